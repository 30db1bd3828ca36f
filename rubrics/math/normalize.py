r"""String normalisation of one extracted answer (no evaluation, linear time).

Unicode (NFKC full-width digits, U+2212 minus, dashes, NBSP/thin/zero-width spaces, `°`), LaTeX
spacing and sizing (`\,`, `\!`, `\left`, `\right`, `\displaystyle`), `\dfrac`/`\tfrac`/`\cfrac`,
double-escaped backslashes, text/unit wrappers, currency, degrees, thousands separators
(`1{,}000`, `1,\!000`, `1\,000`, `1 000`, `1,000`), trailing punctuation.
"""

from __future__ import annotations

import re
import unicodedata

from rubrics.math.numerals import numerals
from rubrics.math.policy import MathPolicy

_SPACES = dict.fromkeys(
    map(ord, "\u00a0\u2000\u2001\u2002\u2003\u2004\u2005\u2006\u2007\u2008\u2009\u200a\u202f\u205f\u3000"),
    " ",
)
_SPACES.update(dict.fromkeys(map(ord, "\u200b\u200c\u200d\u2060\ufeff\u00ad"), None))
_SPACES.update(
    {
        ord("\u2212"): "-",
        ord("\u2013"): "-",
        ord("\u2014"): "-",
        ord("\u00b7"): r"\cdot ",
        ord("\u00d7"): r"\times ",
        ord("\u00f7"): r"\div ",
        ord("\u2264"): r"\le ",
        ord("\u2265"): r"\ge ",
        ord("\u2260"): r"\ne ",
        ord("\u221e"): r"\infty ",
        ord("\u03c0"): r"\pi ",
        ord("\u221a"): r"\sqrt",
        ord("\u00b0"): r"^\circ",
        ord("\u2248"): r"\approx ",
        ord("\u00b1"): r"\pm ",
        ord("\u222a"): r"\cup ",
        ord("\u2208"): r"\in ",
        ord("\u211d"): r"\mathbb{R}",
    }
)

_UNIT_WORDS = (
    "cm|mm|km|m|meters?|metres?|centimeters?|kilometers?|inches|inch|in|feet|foot|ft|yards?|miles?|units?|"
    "square|sq|cubic|degrees?|deg|radians?|rad|seconds?|sec|s|minutes?|min|hours?|hrs?|h|days?|weeks?|"
    "months?|years?|kg|g|grams?|kilograms?|pounds?|lbs?|oz|liters?|litres?|l|ml|dollars?|cents?|"
    "yuan|euros?|points?|people|persons?|students?|ways|times|mph|km/h|m/s|cm\\^2|m\\^2|cm\\^3|m\\^3"
)
_TRAILING_WORDS = re.compile(
    r"(?<=[\d}\)a-z])\s*(?:\\(?:text|mbox|textnormal|mathrm|textit|rm)\s*\{\s*(?:"
    + _UNIT_WORDS
    + r")(?:\s+(?:"
    + _UNIT_WORDS
    + r"))*\s*\}(?:\^\{?[23]\}?)?|\s+(?:"
    + _UNIT_WORDS
    + r")(?:\s+(?:"
    + _UNIT_WORDS
    + r"))*(?:\s*\^?\{?[23]\}?)?"
    r"|(?<=\d)(?:cm|mm|km|kg|ml|ft|m(?=\^?\{?[23]))(?:\^?\{?[23]\}?)?)\s*$"
)


_REAL_LINE = re.compile(
    r"\\mathbb\s*\{?\s*R\s*\}?(?![\^_A-Za-z])|\\R(?![A-Za-z\^_])|ℝ(?![\^_])"
    r"|(?i:(?:the\s+set\s+of\s+)?(?:all|every|any)\s+real(?:\s+(?:numbers?|values?|x))?s?|real\s+numbers)"
)


_TRIG = re.compile(
    r"\\(?:sin|cos|tan|sec|csc|cot)(?![A-Za-z])|(?<![A-Za-z])cis(?![A-Za-z])|e\^\{[^{}]*i[^{}]*\\circ"
)
_DEGREE_ARG = re.compile(r"(\d+(?:\.\d+)?)\s*\^\s*(?:\{\s*\\circ\s*\}|\\circ)")


def _unwrap_text(s: str) -> str:
    # \text{...} and friends: their content is plain text; keep it (words become separators later)
    return re.sub(
        r"\\(?:text|textbf|textit|mathrm|mathbf|mbox|textnormal|operatorname|rm|bf|mathit)\s*\{([^{}]*)\}",
        r" \1 ",
        s,
    )


_SUPER = dict(zip("⁰¹²³⁴⁵⁶⁷⁸⁹⁺⁻", "0123456789+-", strict=True))
_SUB = dict(zip("₀₁₂₃₄₅₆₇₈₉", "0123456789", strict=True))


def _scripts(s: str) -> str:
    """`x²` → `x^{2}`, `a₁₂` → `a_{12}` (NFKC would glue them onto the base: `2²` → `22`)."""
    s = re.sub("[⁰¹²³⁴⁵⁶⁷⁸⁹⁺⁻]+", lambda m: "^{" + "".join(_SUPER[c] for c in m.group(0)) + "}", s)
    return re.sub("[₀₁₂₃₄₅₆₇₈₉]+", lambda m: "_{" + "".join(_SUB[c] for c in m.group(0)) + "}", s)


def normalize(ans: str, policy: MathPolicy) -> str:
    """Canonical text of one answer; equal strings mean equal answers (`match_string`)."""
    s = unicodedata.normalize("NFKC", numerals(_scripts(ans.translate(_SPACES)))).replace("\u2044", "/")
    runs = re.findall(r"(\\+)(?=[A-Za-z])", s)
    if runs and all(len(r) % 2 == 0 for r in runs):  # wholly double-escaped (\\frac -> \frac)
        s = re.sub(r"\\\\(?=[A-Za-z])", r"\\", s)
    s = re.sub(
        r"(?<!\\)\\\\(?=(?:[dtc]?frac|sqrt|left|right|text|mathrm|boxed|cdot|times|pi|infty|leq?|geq?|neq|pm)"
        r"(?![A-Za-z]))",
        r"\\",
        s,
    )
    s = s.replace("\\$", " ").replace("$", " ").replace("€", " ").replace("£", " ")
    s = re.sub(r"\\[\(\)\[\]]", " ", s)
    s = re.sub(r"\\(?:left|right|big|Big|bigg|Bigg)(?![A-Za-z])\s*", "", s)
    s = re.sub(r"\\(?:displaystyle|textstyle|limits)(?![A-Za-z])", "", s)
    s = re.sub(r"\\[dtc]frac(?![A-Za-z])", r"\\frac", s)
    s = re.sub(r"\\(?:varnothing|emptyset)(?![A-Za-z])", r"\\emptyset", s)
    s = re.sub(r"\\(?:le|leqslant)(?![A-Za-z])", r"\\leq", s)
    s = re.sub(r"\\(?:ge|geqslant)(?![A-Za-z])", r"\\geq", s)
    s = re.sub(r"\\(?:ne)(?![A-Za-z])", r"\\neq", s)
    s = re.sub(r"\\lt(?![A-Za-z])", "<", s)
    s = re.sub(r"\\gt(?![A-Za-z])", ">", s)
    s = s.replace("<=", r"\leq ").replace(">=", r"\geq ").replace("!=", r"\neq ")
    # thousands separators that cannot be list commas
    s = re.sub(r"(?<=\d)(?:\{,\}|,\\!\s*|(?<!\\)\\,|(?<!\\)\\!|(?<!\\)\\ |~)(?=\d{3}(?!\d))", "", s)
    s = re.sub(r"(?<!\\)\\[,;:! ]|\\q?quad|~", " ", s)
    s = re.sub(r"\\(?:lor|vee)(?![A-Za-z])|∨", " or ", s)
    s = re.sub(r"\\(?:land|wedge)(?![A-Za-z])|∧", " and ", s)
    if "\\angle" in s:  # r \angle θ is polar form: r·cis θ
        s = re.sub(r"\\angle\s*", r" cis ", s)
    if _TRIG.search(s):  # inside a trig or cis argument a degree is pi/180: \sin 15^\circ
        s = _DEGREE_ARG.sub(lambda m: f"\\frac{{{m.group(1)}\\pi}}{{180}}", s)
    s = re.sub(r"\^\s*(?:\{\s*\\circ\s*\}|\\circ)|\\circ|\\degree", " ", s)
    if re.search(r"\\%|%|percent(?:age)?|pct", s):
        s = re.sub(r"\s*(?:\\%|%|\bpercent(?:age)?\b|\bpct\b)", "%", s)
    # a trailing \text{...} after a number is a unit or a remark ("17\text{ any text}"), unless it hedges
    s = re.sub(
        r"(?<=[\d}])\s*\\(?:text|mbox|textnormal)\s*\{(?![^{}]*\b(?:or|and|not|maybe|but)\b)[^{}]*\}\s*$",
        "",
        s,
    )
    s = _unwrap_text(s)
    s = _REAL_LINE.sub(lambda _: "(-\\infty,\\infty)", s)
    s = re.sub(
        r"\(-\\infty,\\infty\)\s*,?\s*(?:except(?:\s+for)?|but\s+not|other\s+than|excluding|without)\s+"
        r"(?:[A-Za-z]\s*=\s*)?(.+)$",
        lambda m: "(-\\infty,\\infty)\\setminus\\{" + re.sub(r"\s+(?:and|or)\s+", ",", m.group(1)) + "\\}",
        s,
    )
    s = re.sub(r"\+\s*\\infty", r"\\infty", s)
    # `x \in \mathbb{R}, x \neq 0`: the domain prefix adds nothing to the condition after it
    s = re.sub(
        r"^[A-Za-z]\s*\\in\s*\(-\\infty,\\infty\)\s*,\s*(?=[A-Za-z]\s*(?:<|>|\\neq|\\leq|\\geq))", "", s
    )
    for _ in range(3):
        s = re.sub(r"\\(?:boxed|fbox)\s*\{([^{}]*(?:\{[^{}]*\}[^{}]*)*)\}", r"\1", s)
    s = re.sub(r"([\^_])\{\s*([A-Za-z0-9])\s*\}", r"\1\2", s)
    s = re.sub(r"\s+", " ", s).strip()
    for _ in range(2):
        s = s.rstrip(" .;,")
        s = _TRAILING_WORDS.sub("", s)
    s = re.sub(r"^(?:(?:and|or)\s+)+", "", s)
    s = re.sub(r"(?<=[\d)}])\s*[^\x00-\x7f]+$", "", s).rstrip("\\ ")
    # thousands commas in plain numbers at top level: 12,345,678 (first group 1-3 digits, no spaces)
    if not re.search(r"[\(\[\{]", s):
        s = re.sub(
            r"(?<![\d.,])([1-9]\d{0,2})((?:,\d{3})+)(?![\d,])(?=\.\d|[^\d,]|$)",
            lambda m: m.group(1) + m.group(2).replace(",", ""),
            s,
        )
        s = re.sub(
            r"(?<![\d.])([1-9]\d{0,2})((?: \d{3})+)(?![\d])",
            lambda m: m.group(1) + m.group(2).replace(" ", ""),
            s,
        )
    if policy.decimal_comma:
        s = re.sub(r"(?<=\d),(?=\d{1,2}(?!\d))", ".", s)
    return s.strip()


def text_key(s: str) -> str:
    """A comparison key for text answers: casefolded, without spaces, braces or formatting."""
    s = re.sub(r"\\(?:text|textbf|mathrm|mathbf|mbox|textnormal)\s*", "", s)
    return re.sub(r"[\s{}\\]", "", s).casefold()
