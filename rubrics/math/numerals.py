r"""How numbers are written around the world, rewritten to one plain form (string rules, linear time).

* Native digits (Arabic-Indic `٤٥`, Persian `۴۵`, Devanagari `४५`, Bengali, Thai, …: any Unicode
  decimal digit) become ASCII; the Arabic decimal separator `٫` is a point, `٬` a thousands mark.
* Vulgar fractions: `⅓` is `\frac{1}{3}`, `2½` the mixed number 2 + 1/2 (never `21/2`).
* Grouped thousands that cannot be decimals: `7.654.321` and `1.234,5` (dot groups), `1'234'567`.
* A LaTeX decimal comma `3{,}75` (the `{,}` is followed by other than exactly three digits; `1{,}000`
  stays one thousand).
* Repeating decimals, exact: `0.\overline{6}`, `0.2\overline{7}`, `0.\dot{3}`, `0.\dot{1}4285\dot{7}`,
  `0.(3)`, and a trailing ellipsis after a repeated block (`0.1666…`, `0.142857142857...`). A
  non-repeating `3.14159…` just loses its ellipsis (an approximation, graded by the tolerance rule).
* Mixed numbers: `66\frac{2}{3}` (and `\frac23` shorthand, and plain `66 2/3`) is 66 + 2/3,
  written `\frac{200}{3}` (only a proper fraction after the whole part).
"""

from __future__ import annotations

import re
import unicodedata
from fractions import Fraction

_NATIVE_SEPARATORS = {ord("\u066b"): ".", ord("\u066c"): "", ord("\u060c"): ",", ord("\u3001"): ","}
_VULGAR = re.compile("[\u00bc-\u00be\u2150-\u215e]")
_DOTS = re.compile(
    r"(?<![\d.,])(\d{1,3})((?:\.\d{3}){2,})(?![\d.])|(?<![\d.,])(\d{1,3})((?:\.\d{3})+),(\d+)(?![\d.,])"
)
_APOSTROPHE = re.compile(r"(?<![\d'’ʼ])(\d{1,3})((?:['’ʼ]\d{3})+)(?![\d'’ʼ])")
_BRACE_COMMA = re.compile(r"(?<=\d)\{,\}(?=\d{1,2}(?!\d)|\d{4,})")
_ELLIPSIS = r"(?:\.\.\.|\\ldots|\\dots|\\cdots|…)"
_OVERLINE = re.compile(r"(?<![\d.])(\d*)\.(\d*)\\(?:overline|bar)\s*(?:\{(\d+)\}|(\d))")
_DOT_NOTATION = re.compile(r"(?<![\d.])(\d*)\.(\d*)\\dot\s*\{?(\d)\}?(?:(\d*)\\dot\s*\{?(\d)\}?)?")
_PAREN = re.compile(r"(?<![\d.])(\d+)\.(\d*)\((\d+)\)")
_TRAILING = re.compile(r"(?<![\d.])(\d+)\.(\d+)\s*" + _ELLIPSIS)
_SHORT_FRAC = re.compile(r"\\frac\s*(\d)\s*(\d)")
_PLAIN_MIXED = re.compile(r"(?<![\d./,])(\d{1,6})\s+(\d{1,2})\s*/\s*(\d{1,2})(?![\d/.])")
_MIXED = re.compile(r"(?<![\d.^_}A-Za-z\\])(\d+)\s*\\frac\s*\{\s*(\d+)\s*\}\s*\{\s*(\d+)\s*\}")


def _frac_text(v: Fraction) -> str:
    return str(v.numerator) if v.denominator == 1 else f"\\frac{{{v.numerator}}}{{{v.denominator}}}"


def repeating(whole: str, fixed: str, block: str) -> Fraction:
    """The exact value of `whole.fixed(block)(block)…`."""
    a = len(fixed)
    head = int((whole or "0") + fixed)
    full = int((whole or "0") + fixed + block)
    return Fraction(full - head, 10**a * (10 ** len(block) - 1))


def _trailing_repeat(m: re.Match[str]) -> str:
    whole, digits = m.group(1), m.group(2)
    for size in range(1, len(digits) // 2 + 1):
        block = digits[-size:]
        reps = 0
        while digits.endswith(block * (reps + 1)):
            reps += 1
        if reps >= 2:
            fixed = digits[: len(digits) - size * reps]
            return _frac_text(repeating(whole, fixed, block))
    return f"{whole}.{digits}"


def _native(s: str) -> str:
    if s.isascii():
        return s
    out = []
    for ch in s.translate(_NATIVE_SEPARATORS):
        if ch > "\x7f" and unicodedata.category(ch) == "Nd":
            out.append(str(unicodedata.decimal(ch)))
        elif _VULGAR.fullmatch(ch):
            value = Fraction(unicodedata.numeric(ch)).limit_denominator(100)
            out.append(f"\\frac{{{value.numerator}}}{{{value.denominator}}}")
        else:
            out.append(ch)
    return "".join(out)


def _ungroup(m: re.Match[str]) -> str:
    if m.group(1):
        return m.group(1) + m.group(2).replace(".", "")
    return m.group(3) + m.group(4).replace(".", "") + "." + m.group(5)


def numerals(s: str) -> str:
    """`s` with the number spellings of the module docstring rewritten."""
    s = _native(s)
    if not re.search(r"\d", s):
        return s
    s = _DOTS.sub(_ungroup, s)
    s = _APOSTROPHE.sub(lambda m: m.group(1) + re.sub("['’ʼ]", "", m.group(2)), s)
    s = _BRACE_COMMA.sub(".", s)
    if "\\" in s:
        s = _OVERLINE.sub(
            lambda m: _frac_text(repeating(m.group(1), m.group(2), m.group(3) or m.group(4))), s
        )
        s = _DOT_NOTATION.sub(_dotted, s)
    s = _PAREN.sub(lambda m: _frac_text(repeating(m.group(1), m.group(2), m.group(3))), s)
    s = _TRAILING.sub(_trailing_repeat, s)
    s = _SHORT_FRAC.sub(r"\\frac{\1}{\2}", s)
    s = _PLAIN_MIXED.sub(lambda m: f"{m.group(1)}\\frac{{{m.group(2)}}}{{{m.group(3)}}}", s)
    return _MIXED.sub(_mixed, s)


def _dotted(m: re.Match[str]) -> str:
    whole, fixed, first, middle, last = m.groups()
    block = first + (middle or "") + (last or "") if last else first
    return _frac_text(repeating(whole, fixed, block))


def _mixed(m: re.Match[str]) -> str:
    whole, top, bottom = int(m.group(1)), int(m.group(2)), int(m.group(3))
    if bottom == 0 or top >= bottom or len(m.group(1)) > 30:
        return m.group(0)
    return _frac_text(whole + Fraction(top, bottom))
