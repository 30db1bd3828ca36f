r"""Parse a normalised answer into a structure (`rubrics.math.compare` compares two of them).

Structures: `Leaf` (one expression), `Text`, `Seq` (a bare list — order-free —, a `\{…\}` set, or a
bracketed tuple/interval whose brackets must match), `Union` (`\cup`, order-free), `Matrix`, `Rel`
(equations / inequalities, compared as relations, never via one side), `Assign` (`x = 3`: a
name-like left side, compared by value), `Dict` (`p=5, q=2`), `Joined` (inequalities joined by
or/and), `Minus` (a set minus points). `\pm` expands to a two-element set.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass

from rubrics.math.normalize import text_key
from rubrics.math.numeric import parse_number
from rubrics.math.spans import depths


class NeedCAS(Exception):
    """The cheap comparison cannot decide this pair; the CAS worker must."""


class TooComplex(Exception):
    """The answer is past a complexity guard; it is compared structurally only."""


@dataclass(frozen=True)
class Leaf:
    text: str


@dataclass(frozen=True)
class Text:
    key: str


@dataclass(frozen=True)
class Seq:
    kind: str  # "list" (order-free), "set", or the bracket pair such as "()", "[)"
    items: tuple


@dataclass(frozen=True)
class Union:
    items: tuple


@dataclass(frozen=True)
class Matrix:
    rows: tuple


@dataclass(frozen=True)
class Rel:
    parts: tuple  # of str
    ops: tuple  # of "=", "<", "<=", ">", ">=", "!="


@dataclass(frozen=True)
class Assign:
    name: str
    value: object
    lhs: str = ""
    rhs: str = ""


@dataclass(frozen=True)
class Joined:
    op: str  # "or" (union) / "and" (intersection) of one-variable inequalities
    rels: tuple  # of Rel


@dataclass(frozen=True)
class Minus:
    base: object  # a set-typed node
    points: tuple  # of str: the removed points (`\mathbb{R}\setminus\{2\}`)


@dataclass(frozen=True)
class Dict:
    items: tuple  # of (name, node)


Node = object


LeafCmp = Callable[[str, str, str], bool]

_REL = re.compile(r"\\leq|\\geq|\\neq|\\approx|\\in(?![A-Za-z])|<|>|=")
_REL_OPS = {
    "\\leq": "<=",
    "\\geq": ">=",
    "\\neq": "!=",
    "<": "<",
    ">": ">",
    "=": "=",
    "\\approx": "~",
    "\\in": "in",
}
_FUNCS = {
    "sin",
    "cos",
    "tan",
    "sec",
    "csc",
    "cot",
    "log",
    "ln",
    "exp",
    "sqrt",
    "pi",
    "arcsin",
    "arccos",
    "arctan",
    "sinh",
    "cosh",
    "tanh",
    "frac",
    "cdot",
    "times",
    "infty",
    "left",
    "right",
    "min",
    "max",
    "mod",
    "pmod",
    "bmod",
    "gcd",
    "lcm",
    "floor",
    "ceil",
    "div",
    "circ",
    "emptyset",
    "mathbb",
    "oo",
    "abs",
    "lfloor",
    "rfloor",
    "lceil",
    "rceil",
    "binom",
    "choose",
    "dfrac",
    "tfrac",
    "det",
    "deg",
    "cis",
}
_MATRIX = re.compile(
    r"^\\begin\{(?:[pbvBV]?matrix|array)\}(?:\{[^{}]*\})?(.*)\\end\{(?:[pbvBV]?matrix|array)\}$", re.DOTALL
)
MAX_ITEMS = 64
UNDEFINED = re.compile(r"\\frac\s*\{[^{}]*\}\s*\{\s*0\s*\}|/\s*0(?![\d.])|\bnan\b|\bzoo\b", re.IGNORECASE)


def split_top(s: str, pattern: re.Pattern[str]) -> list[str]:
    """Split `s` at matches of `pattern` that sit outside every bracket."""
    depth, parts, last = depths(s), [], 0
    for m in pattern.finditer(s):
        if m.start() < len(depth) and depth[m.start()] == 0 and m.start() >= last:
            parts.append(s[last : m.start()])
            last = m.end()
    parts.append(s[last:])
    return parts


def _wrapped(s: str, open_: str, close: str) -> bool:
    """True when `s` is one bracketed group from its first to its last character."""
    if not (s.startswith(open_) and s.endswith(close)) or len(s) < len(open_) + len(close):
        return False
    depth = depths(s)
    inner = range(len(open_), len(s) - len(close))
    return all(depth[i] >= 1 for i in inner)


_SEP1 = re.compile(r";|(?<![A-Za-z\\])(?:and|or|et|und)(?![A-Za-z])|和|或")
_COMMA = re.compile(r",")


def is_name(lhs: str) -> bool:
    """A left side that names a quantity (`x`, `a_{37}`, `f(x)`, `|AB|`, `(p,q)`, `V_1:V_2`)."""
    bare = re.sub(r"_\{[^{}]*\}|_[A-Za-z0-9]|\^\{?\s*\\prime\s*\}?|'", "", lhs).strip()
    if not re.search(r"[A-Za-z]", bare) or re.search(r"\d|[+\-*^]", bare):
        return False
    return bool(re.fullmatch(r"[A-Za-z\s(),|:/\\{}\[\]]*", bare))


_JOIN = re.compile(r"(?<![A-Za-z\\])(or|and|et|und|ou|oder|o|y)(?![A-Za-z])|(或|和|且)")


def _joined(s: str) -> Node | None:
    """`x<0 or x>5`, `x>-1 and x<4`: one-variable inequalities joined by one connective."""
    seps = [m for m in _JOIN.finditer(s) if depths(s)[m.start()] == 0]
    if not seps:
        return None
    ops = {"or" if (m.group(1) or m.group(2)) in ("or", "ou", "oder", "o", "或") else "and" for m in seps}
    if len(ops) != 1:
        return None
    rels = [parse_item(p) for p in split_top(s, _JOIN)]
    ok = all(isinstance(r, Rel) and all(o in ("<", "<=", ">", ">=", "!=") for o in r.ops) for r in rels)
    return Joined(ops.pop(), tuple(rels)) if ok and len(rels) > 1 else None


def parse_answer(s: str) -> Node:
    """Structure of one normalised answer string (several answers are joined by the caller)."""
    if _REL.search(s):
        joined = _joined(s)
        if joined is not None:
            return joined
    parts = [p for p in split_top(s, _SEP1) if p.strip()]
    items: list = []
    for part in parts:
        sub = [parse_item(x) for x in split_top(part, _COMMA) if x.strip()]
        items.append(_group(sub))
        if len(items) > MAX_ITEMS:
            raise TooComplex("too many items")
    return _group(items, flatten=True)


def _group(items: list, flatten: bool = False) -> Node:
    if flatten:
        flat: list = []
        for it in items:
            if isinstance(it, Seq) and it.kind == "list":
                flat.extend(it.items)
            else:
                flat.append(it)
        items = flat
    if not items:
        return Text("")
    if len(items) == 1:
        return items[0]
    if all(isinstance(x, Assign) for x in items):
        names = [x.name for x in items]
        if len(set(names)) == len(names):
            return Dict(tuple((x.name, x.value) for x in items))
        if len(set(names)) == 1:
            return Seq("list", tuple(x.value for x in items))
    if isinstance(items[0], Assign) and not any(isinstance(x, Assign) for x in items[1:]):
        return Seq("list", (items[0].value, *items[1:]))
    return Seq("list", tuple(items))


def parse_item(t: str) -> Node:
    t = t.strip()
    if len(t) > 2000:
        raise TooComplex("answer too long")
    scalar, body = _scaled_matrix(t)
    m = _MATRIX.match(_strip_brackets(body))
    if m:
        rows = [r for r in re.split(r"\\\\", m.group(1)) if r.strip()]
        return Matrix(
            tuple(tuple(_entry(scalar, c.strip().rstrip("\\").strip()) for c in r.split("&")) for r in rows)
        )
    rel = [m for m in _REL.finditer(t)]
    if rel:
        depth = depths(t)
        rel = [m for m in rel if depth[m.start()] == 0]
    if rel:
        return _relation(t, rel)
    minus = _minus(t)
    if minus is not None:
        return minus
    if "\\cup" in t:
        pieces = split_top(t, re.compile(r"\\cup(?![A-Za-z])"))
        if len(pieces) > 1:
            return Union(tuple(parse_item(p) for p in pieces))
    if re.search(r"\\(?:pm|mp)(?![A-Za-z])", t):
        if t.count("\\pm") + t.count("\\mp") > 1:
            raise TooComplex("several \\pm")
        plus, minus = re.sub(r"\\pm|\\mp", "+", t), re.sub(r"\\pm|\\mp", "-", t)
        if "\\mp" in t:
            plus, minus = minus, plus
        return Seq("set", (parse_item(plus), parse_item(minus)))
    if _wrapped(t, "\\{", "\\}"):
        inner = t[2:-2]
        builder = _SET_BUILDER.fullmatch(inner)
        if builder:  # \{x \mid x \neq 2\}: the condition is the set
            cond = re.sub(
                r"^\s*[A-Za-z]\s*\\in\s*\(-\\infty,\\infty\)\s*,?\s*(?:and\s+)?", "", builder.group(1)
            )
            return parse_answer(cond)
        return Seq("set", tuple(parse_item(x) for x in split_top(inner, re.compile(r"[,;]")) if x.strip()))
    if t == "\\emptyset":
        return Seq("set", ())
    if t and t[0] in "([" and t[-1] in ")]" and _wrapped(t, t[0], t[-1]):
        inner = t[1:-1]
        pieces = split_top(inner, re.compile(r"[,;]"))
        if len(pieces) > 1:
            return Seq(t[0] + t[-1], tuple(parse_item(x) for x in pieces))
        if t[0] == "(" and t[-1] == ")":
            return parse_item(inner)
    if _wrapped(t, "{", "}"):
        return parse_answer(t[1:-1])
    if _is_text(t) or _WORD.fullmatch(t):
        return Text(text_key(t))
    return Leaf(t)


_SET_BUILDER = re.compile(r"\s*[A-Za-z]\s*(?:\\in\s*\(-\\infty,\\infty\)\s*)?(?:\\mid|\||:)\s*(.+)")
_SETMINUS = re.compile(r"\\setminus|\\backslash|-(?=\s*\\\{)")


def _minus(t: str) -> Node | None:
    if not _SETMINUS.search(t):
        return None
    parts = split_top(t, _SETMINUS)
    if len(parts) != 2 or not _wrapped(parts[1].strip(), "\\{", "\\}"):
        return None
    points = tuple(x.strip() for x in split_top(parts[1].strip()[2:-2], re.compile(r"[,;]")) if x.strip())
    return Minus(parse_item(parts[0]), points)


def _scaled_matrix(t: str) -> tuple[str | None, str]:
    """`3\\begin{pmatrix}…\\end{pmatrix}` → ("3", the matrix); no scalar → (None, t)."""
    k = t.find("\\begin")
    if k <= 0 or not t.rstrip().endswith(("matrix}", "array}")):
        return None, t
    scalar = re.sub(r"\s*(?:\\cdot|\\times|\*)\s*$", "", t[:k]).strip()
    if not scalar or "\\begin" in scalar or depths(t)[k] != 0:
        return None, t
    return scalar, t[k:]


def _entry(scalar: str | None, cell: str) -> Leaf:
    if scalar is None:
        return Leaf(cell)
    scalar = {"-": "-1", "+": "1"}.get(scalar, scalar)
    a, b = parse_number(scalar), parse_number(cell)
    if a is not None and b is not None and not a.inexact and not b.inexact:
        v = a.value * b.value
        return Leaf(str(v.numerator) if v.denominator == 1 else f"\\frac{{{v.numerator}}}{{{v.denominator}}}")
    return Leaf(f"({scalar})\\cdot({cell})")


def _strip_brackets(t: str) -> str:
    for o, c in (("[", "]"), ("(", ")")):
        if _wrapped(t, o, c) and "\\begin" in t:
            return t[1:-1].strip()
    return t


_WORD = re.compile(r"(?i:yes|no|true|false|odd|even|none|both|neither|si|sí|oui|non|ja|nein|да|нет|是|否)")


def _is_text(t: str) -> bool:
    bare = re.sub(r"\\[A-Za-z]+", " ", t)
    for word in re.findall(r"[A-Za-z]{3,}", bare):
        if word.lower() not in _FUNCS:
            return True
    return bool(re.search(r"[^\x00-\x7f]", t))


def _relation(t: str, rels: list[re.Match[str]]) -> Node:
    parts, ops, last = [], [], 0
    for m in rels:
        parts.append(t[last : m.start()].strip())
        ops.append(_REL_OPS[m.group(0)])
        last = m.end()
    parts.append(t[last:].strip())
    if any(not p for p in parts):
        return Text(text_key(t))
    return _relation_parts(parts, ops, t, rels)


def _relation_parts(parts: list, ops: list, t: str, rels: list | None = None) -> Node:
    if len(parts) == 1:
        return parse_item(parts[0])
    if ops[0] == "~":
        return parse_item(parts[-1] if is_name(parts[0]) else parts[0])
    if "~" in ops and all(o == "=" for o in ops[: ops.index("~")]):
        # "x = 1/3 ≈ 0.33": the exact value is the answer, the approximation a remark
        cut = ops.index("~")
        return _relation_parts(parts[: cut + 1], ops[:cut], t)
    if ops[0] == "in" and is_name(parts[0]) and rels:
        return parse_item(t[rels[0].end() :])
    if "~" in ops or "in" in ops:
        return Text(text_key(t))
    if all(o == "=" for o in ops) and is_name(parts[0]):
        return Assign(text_key(parts[0]), parse_item(parts[-1]), parts[0], parts[-1])
    return Rel(tuple(parts), tuple(ops))
