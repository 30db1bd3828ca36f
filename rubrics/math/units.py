r"""Units and magnitude words at the end of one answer: `7\text{ mm}`, `4 hours`, `5\,\mathrm{m}^3`,
`6 billion`, `\$12`, `2{,}5 km/h`.

`split_quantity(answer)` returns the value text and a `Unit` (dimension and exact factor to the
dimension's base unit), or None when the answer names no known unit. A magnitude word is part of
the number, never a label: `6 billion` is 6·10⁹, `9 hundred` is 900 (also `thousand`, `million`,
`trillion`, `lakh`, `crore`, `万`, `亿`).

Policy (applied by `reconcile`): when both sides name a unit, they must share a dimension (`m` vs
`m^3`, `hours` vs `kg`: a mismatch) and the prediction's value is converted to the gold's unit
(`7 km` = `7000 m`, `120 minutes` = `2 hours`). When only one side names a unit, the other side is
read as a bare number in that unit (`7 cm` = `7`): a gold without a unit says nothing about it.
Counting labels (`people`, `ways`, `points`, `apples`) are not units.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from fractions import Fraction

from rubrics.math.numeric import parse_number


@dataclass(frozen=True)
class Unit:
    name: str
    dim: str  # "length", "length^2", "time", "mass", "volume", "speed", "usd", ...
    factor: Fraction  # value in the dimension's base unit


_LENGTH = {
    "mm": ("mm|millimet(?:er|re)s?", Fraction(1, 1000)),
    "cm": ("cm|centimet(?:er|re)s?", Fraction(1, 100)),
    "dm": ("dm|decimet(?:er|re)s?", Fraction(1, 10)),
    "km": ("km|kilomet(?:er|re)s?", Fraction(1000)),
    "m": ("m|met(?:er|re)s?", Fraction(1)),
    "in": ("in|inch|inches", Fraction(254, 10000)),
    "ft": ("ft|foot|feet", Fraction(3048, 10000)),
    "yd": ("yd|yards?", Fraction(9144, 10000)),
    "mi": ("mi|miles?", Fraction(1609344, 1000)),
}
_OTHER = {
    "ms": ("ms|milliseconds?", "time", Fraction(1, 1000)),
    "s": ("s|secs?|seconds?", "time", Fraction(1)),
    "min": ("min|mins|minutes?", "time", Fraction(60)),
    "h": ("h|hrs?|hours?", "time", Fraction(3600)),
    "day": ("days?", "time", Fraction(86400)),
    "week": ("weeks?", "time", Fraction(604800)),
    "month": ("months?", "month", Fraction(1)),
    "year": ("years?|yrs?", "month", Fraction(12)),
    "mg": ("mg|milligrams?", "mass", Fraction(1, 1000)),
    "g": ("g|grams?", "mass", Fraction(1)),
    "kg": ("kg|kilograms?", "mass", Fraction(1000)),
    "lb": ("lbs?|pounds?", "mass", Fraction(45359237, 100000)),
    "oz": ("oz|ounces?", "mass", Fraction(45359237, 1600000)),
    "ml": ("ml|mL|millilit(?:er|re)s?", "volume", Fraction(1, 1000)),
    "l": ("l|L|lit(?:er|re)s?", "volume", Fraction(1)),
    "km/h": ("km/h|kph|kmh|km\\s*per\\s*hour|kilomet(?:er|re)s\\s+per\\s+hour", "speed", Fraction(5, 18)),
    "m/s": ("m/s|met(?:er|re)s\\s+per\\s+second", "speed", Fraction(1)),
    "mph": ("mph|miles\\s+per\\s+hour", "speed", Fraction(1609344, 3600000)),
    "usd": ("dollars?|usd", "usd", Fraction(1)),
    "cent": ("cents?", "usd", Fraction(1, 100)),
    "eur": ("euros?|eur", "eur", Fraction(1)),
    "yuan": ("yuan|rmb|元", "cny", Fraction(1)),
}
_NATIVE = {
    "米": "m",
    "厘米": "cm",
    "毫米": "mm",
    "千米": "km",
    "公里": "km",
    "克": "g",
    "千克": "kg",
    "公斤": "kg",
}
_NATIVE.update({"小时": "h", "分钟": "min", "秒": "s", "天": "day"})
_MAGNITUDE = {
    "hundred": 2,
    "thousand": 3,
    "million": 6,
    "billion": 9,
    "trillion": 12,
    "lakh": 5,
    "crore": 7,
    "百": 2,
    "千": 3,
    "万": 4,
    "亿": 8,
}

_ALTERNATIVES = {name: pat for name, (pat, _) in _LENGTH.items()}
_ALTERNATIVES.update({name: pat for name, (pat, _, _) in _OTHER.items()})
_UNIT_RE = "|".join(f"(?P<u_{i}>{pat})" for i, pat in enumerate(_ALTERNATIVES.values()))
_NAMES = list(_ALTERNATIVES)
_QUANTITY = re.compile(
    r"^(?P<value>.*?[\d}).])\s*(?P<mag>hundred|thousand|million|billion|trillion|lakh|crore|[百千万亿](?![克米]))?s?"
    r"\s*(?:(?P<pre>square|sq\.?|cubic|cu\.?)\s+)?"
    r"(?:(?P<unit>" + _UNIT_RE + r")|(?P<native>" + "|".join(sorted(_NATIVE, key=len, reverse=True)) + r"))"
    r"\s*(?:\^\s*\{?\s*(?P<pow>[23])\s*\}?)?\s*$",
    re.IGNORECASE,
)
_CASE_SENSITIVE = {"ml", "l", "m", "mm", "cm", "km", "g", "mg", "kg", "s", "h", "ms", "in", "mi"}
_MAG_ONLY = re.compile(
    r"^(?P<value>.*?[\d}).])\s*(?P<mag>hundred|thousand|million|billion|trillion|lakh|crore|[百千万亿](?![克米]))s?\s*$",
    re.IGNORECASE,
)


def _clean(ans: str) -> str:
    s = ans.replace("\u00a0", " ").replace("\u202f", " ").replace("\u2009", " ")
    s = re.sub(r"\\(?:text|mathrm|textrm|mbox|textnormal|rm|operatorname)\s*\{([^{}]*)\}", r" \1 ", s)
    s = re.sub(r"(?<!\\)\\[,;:! ]|~", " ", s)
    s = s.replace("²", "^2").replace("³", "^3")
    s = re.sub(r"\s+", " ", s).strip().rstrip(".")
    dollar = re.match(r"^\\?\$\s*(?=[\d.])", s)
    if dollar:  # \$12 -> 12 dollars
        s = s[dollar.end() :] + " dollars"
    return s


def split_quantity(ans: str) -> tuple[str, Unit | None]:
    """`(value text, unit)` for an answer ending in a unit; the answer itself and None otherwise.
    A magnitude word is folded into the value text (`6 billion` → `6\\cdot 10^{9}`)."""
    if len(ans) > 300:  # units close short answers; a long expression is never scanned
        return ans, None
    s = _clean(ans)
    m = _QUANTITY.match(s)
    unit = None
    if m:
        unit = _unit_of(m)
        if unit is None:
            m = None
    if m is None:
        m = _MAG_ONLY.match(s)
        if m is None:
            return ans, None
    value = m.group("value").strip()
    mag = m.group("mag")
    if mag:
        value = _scaled(value, _MAGNITUDE[mag.lower()])
    return value, unit


def _scaled(value: str, power: int) -> str:
    num = parse_number(value.replace(",", "") if re.fullmatch(r"[\d,]+(?:\.\d+)?", value) else value)
    if num is not None:
        scaled = num.value * 10**power
        return (
            str(scaled.numerator)
            if scaled.denominator == 1
            else f"\\frac{{{scaled.numerator}}}{{{scaled.denominator}}}"
        )
    return f"({value})\\cdot 10^{{{power}}}"


def _unit_of(m: re.Match[str]) -> Unit | None:
    if m.group("native"):
        name = _NATIVE[m.group("native")]
        written = name
    else:
        idx = next(i for i in range(len(_NAMES)) if m.group(f"u_{i}"))
        name, written = _NAMES[idx], m.group(f"u_{idx}")
        if name in _CASE_SENSITIVE and len(written) <= 2 and written.isupper() and written != "L":
            return None  # `5 M`, `3 S`: not a unit symbol
        if len(written) == 1 and not re.search(r"[\s}]$", m.string[: m.start("unit")]):
            return None  # a glued single letter (`7m`) is a product, not a unit
    power = int(m.group("pow") or 1)
    pre = (m.group("pre") or "").lower()
    if pre:
        power = 2 if pre.startswith(("sq", "square")) else 3
    if name in _LENGTH:
        factor = _LENGTH[name][1] ** power
        if power == 3:
            return Unit(name + "^3", "volume", factor * 1000)  # base: litres
        return Unit(name if power == 1 else f"{name}^{power}", "length" if power == 1 else "length^2", factor)
    if power != 1:
        return None
    _, dim, factor = _OTHER[name]
    return Unit(name, dim, factor)


def reconcile(pred: str, gold: str, convert: bool = True) -> tuple[str, str] | None:
    """The two value texts with the prediction converted to the gold's unit, or None when both name
    units of different dimensions (or, with `convert=False`, different units)."""
    p_val, p_unit = split_quantity(pred)
    g_val, g_unit = split_quantity(gold)
    if p_unit is None or g_unit is None:
        return p_val, g_val
    if p_unit.dim != g_unit.dim or (not convert and p_unit.factor != g_unit.factor):
        return None
    ratio = p_unit.factor / g_unit.factor
    if ratio == 1:
        return p_val, g_val
    num = parse_number(p_val)
    if num is not None:
        v = num.value * ratio
        text = str(v.numerator) if v.denominator == 1 else f"\\frac{{{v.numerator}}}{{{v.denominator}}}"
        return text, g_val
    return f"({p_val})\\cdot\\frac{{{ratio.numerator}}}{{{ratio.denominator}}}", g_val
