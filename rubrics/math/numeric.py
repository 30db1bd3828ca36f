r"""Exact numbers without a CAS: integers, decimals and fractions as `Fraction`, and the tolerance rule.

Tolerance comes from the gold's stated precision: a gold written with k decimals accepts any decimal
within half a unit of its last digit (`0.333` = `0.33`). An exact prediction (`1/3`, `0.\overline{3}`)
is another number than such a rounded gold: it matches only its own value (`1/2` = `0.5`) or, as
below, a gold of at least 6 significant digits (`\sqrt2` = `1.41421356`), unless
`MathPolicy.rounded_golds` says exact answers round. An exact gold (integer, fraction, surd) accepts a decimal
prediction only when that decimal has at least 6 significant digits and is the correct rounding
at its own precision (`0.333` ≠ 1/3, `0.3333333333` = 1/3). Exact values compare exactly, so tiny
magnitudes (`1/2^99` vs `1/2^98`) never collapse.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from fractions import Fraction

from rubrics.math.policy import MathPolicy

_PLAIN = re.compile(r"[+-]?(?:\d+(?:\.\d*)?|\.\d+)")
_FRAC = re.compile(r"(-?)\\frac\s*(?:\{\s*([^{}]+?)\s*\}|(\d))\s*(?:\{\s*([^{}]+?)\s*\}|(\d))")
MAX_DIGITS = 400


@dataclass(frozen=True)
class Num:
    value: Fraction
    decimals: int  # digits after the point; -1 for an exact value
    sig: int  # significant digits written

    @property
    def inexact(self) -> bool:
        return self.decimals >= 0


_SPACED = re.compile(r"\d\s+\d")
_GROUPS = re.compile(r"[+-]?\s*\d{1,3}(?: \d{3})+(?:\.\d*)?")


def _plain(s: str) -> Num | None:
    if _SPACED.search(s) and not _GROUPS.fullmatch(s.strip()):
        return None  # `4 5` and `1 2 3` are no numbers (never 45, 123); `4 500` is
    s = s.replace(" ", "")
    if not _PLAIN.fullmatch(s) or len(s) > MAX_DIGITS:
        return None
    if "." not in s:
        return Num(Fraction(int(s)), -1, len(s.lstrip("+-0")) or 1)
    whole, _, frac = s.lstrip("+-").partition(".")
    digits = (whole + frac).lstrip("0")
    value = Fraction(s.lstrip("+")) if s not in ("-.", ".") else None
    if value is None:
        return None
    if not frac.strip("0"):
        return Num(value, -1, len(whole.lstrip("0")) or 1)  # 5.0 and 1000.00 are exact integers
    return Num(value, len(frac), len(digits))


def parse_number(text: str) -> Num | None:
    """An integer, decimal, `a/b`, `\\frac{a}{b}` or `\\frac12` (with sign), else None."""
    s = text.strip()
    while s.startswith("(") and s.endswith(")") and s.count("(") == 1:
        s = s[1:-1].strip()
    if s.startswith("{") and s.endswith("}") and s.count("{") == 1:
        s = s[1:-1].strip()
    num = _plain(s)
    if num is not None:
        return num
    m = _FRAC.fullmatch(s)
    if m:
        top, bottom = _plain(m.group(2) or m.group(3)), _plain(m.group(4) or m.group(5))
    elif s.count("/") == 1:
        a, b = s.split("/")
        sign = ""
        top, bottom = _plain(a.strip().strip("()")), _plain(b.strip().strip("()"))
        m = None
    else:
        return None
    if top is None or bottom is None or bottom.value == 0:
        return None
    sign = -1 if (m and m.group(1)) else 1
    return Num(sign * top.value / bottom.value, -1, 0)


def is_reduced_fraction(text: str) -> bool:
    m = _FRAC.fullmatch(text.strip()) or re.fullmatch(r"\s*(-?)(\d+)\s*/\s*(\d+)\s*", text)
    if not m:
        return True
    nums = [int(x) for x in m.groups()[1:] if x and x.isdigit()]
    return len(nums) != 2 or Fraction(nums[0], nums[1]).numerator == nums[0]


def close(pred: Num, gold: Num, round_exact: bool = False) -> bool:
    """Equality under the gold-precision rule (module docstring); `round_exact` is
    `MathPolicy.rounded_golds == "exact_rounds"`."""
    if pred.value == gold.value:
        return True
    diff = abs(pred.value - gold.value)
    if gold.inexact:
        if not pred.inexact and gold.sig < (2 if round_exact else 6):
            return False  # 1/3 is not the number 0.33 (one significant digit rounds nothing: 0.3)
        return diff <= Fraction(1, 2 * 10**gold.decimals)
    if pred.inexact:
        return pred.sig >= 6 and diff <= Fraction(1, 2 * 10**pred.decimals)
    return False


def split_percent(text: str, policy: MathPolicy) -> tuple[str, bool]:
    """The text without a trailing `%`, and whether it had one."""
    s = text.strip()
    if s.endswith("%"):
        return s[:-1].strip(), True
    return s, False


def cheap_numbers(pred: str, gold: str, policy: MathPolicy) -> bool | None:
    """Decide a pair of plain numbers exactly; None when either side is not a plain number."""
    p_text, p_pct = split_percent(pred, policy)
    g_text, g_pct = split_percent(gold, policy)
    p, g = parse_number(p_text), parse_number(g_text)
    if p is None or g is None:
        return None
    if policy.percent == "unit" and p_pct and not g_pct and _plain(g_text.strip("{}()")) is None:
        return False  # `0.5%` is no answer to a ratio gold such as 1/2 (nor `50%` under "unit")
    if policy.percent == "value" and p_pct != g_pct:
        scale = Fraction(1, 100)
        p = Num(p.value * scale, p.decimals + 2 if p.inexact else -1, p.sig) if p_pct else p
        g = Num(g.value * scale, g.decimals + 2 if g.inexact else -1, g.sig) if g_pct else g
    if not policy.unreduced_fractions and is_reduced_fraction(g_text) and not is_reduced_fraction(p_text):
        return False
    return close(p, g, policy.rounded_golds == "exact_rounds")
