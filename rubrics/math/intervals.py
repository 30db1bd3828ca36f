r"""Subsets of the real line as sorted, merged interval lists (exact endpoints, no CAS).

A set-typed answer — a union (`[0,4]\cup[3,7]`), an inequality or several joined by "or"/"and"
(`x<0 \text{ or } x>5`), `x \neq 2`, `\mathbb{R}\setminus\{2\}` (normalised to intervals minus
points) — is turned into disjoint intervals `(lo, lo_closed, hi, hi_closed)` with exact rational or
infinite endpoints; overlapping or touching pieces merge (`[0,4]\cup[3,7]` = `[0,7]`,
`[1,5]\cup(5,8]` = `[1,8]`, but `[1,5)\cup(5,8]` is not). Two set-typed answers are equal when
their lists are. Endpoints that are not plain numbers (`\sqrt 2`) leave the set undecided here
(`None`), and the structural comparison of `rubrics.math.compare` decides instead. A solved
one-variable relation (`a < x \le b`, `|x| > a`) reads as its interval(s) here (`rel_to_interval`).
"""

from __future__ import annotations

import math
import re
from fractions import Fraction

from rubrics.math.normalize import text_key
from rubrics.math.numeric import parse_number
from rubrics.math.structure import Joined, Leaf, Minus, Node, Rel, Seq, Union, is_name

Piece = tuple  # (lo, lo_closed, hi, hi_closed); lo/hi are Fraction or ±math.inf


_FLIP = {">": "<", ">=": "<=", "<": "<", "<=": "<=", "=": "=", "!=": "!="}


def canon_rel(r: Rel) -> Rel:
    if r.ops[0] in (">", ">="):
        return Rel(tuple(reversed(r.parts)), tuple(_FLIP[o] for o in reversed(r.ops)))
    return r


def rel_to_interval(r: Rel) -> Node | None:
    """`a < x <= b` → `(a, b]`; `x > a` → `(a, \\infty)`. None when it is not a 1-variable range."""
    r = canon_rel(r)
    if any(o not in ("<", "<=") for o in r.ops):
        return None
    br = {"<": ("(", ")"), "<=": ("[", "]")}
    absolute = re.fullmatch(r"\|(.+)\|", r.parts[1].strip()) if len(r.parts) == 3 else None
    if absolute and is_name(absolute.group(1)):  # lo <= |z| <= hi: z in [-hi, -lo] U [lo, hi]
        lo, hi = r.parts[0], r.parts[2]
        left = Seq(br[r.ops[1]][0] + br[r.ops[0]][1], (Leaf(_neg(hi)), Leaf(_neg(lo))))
        return Union((left, Seq(br[r.ops[0]][0] + br[r.ops[1]][1], (Leaf(lo), Leaf(hi)))))
    if len(r.parts) == 2:  # |z| < a: (-a, a);  a < |z|: (-inf, -a) U (a, inf)
        side = 0 if re.fullmatch(r"\|(.+)\|", r.parts[0].strip()) else 1
        inner = re.fullmatch(r"\|(.+)\|", r.parts[side].strip())
        if inner and is_name(inner.group(1)):
            a = r.parts[1 - side]
            if side == 0:
                return Seq(br[r.ops[0]][0] + br[r.ops[0]][1], (Leaf(_neg(a)), Leaf(a)))
            out = br[r.ops[0]][1], br[r.ops[0]][0]
            return Union(
                (
                    Seq("(" + out[0], (Leaf("-\\infty"), Leaf(_neg(a)))),
                    Seq(out[1] + ")", (Leaf(a), Leaf("\\infty"))),
                )
            )
    if len(r.parts) == 3 and is_name(r.parts[1]):
        return Seq(br[r.ops[0]][0] + br[r.ops[1]][1], (Leaf(r.parts[0]), Leaf(r.parts[2])))
    if len(r.parts) == 2 and is_name(r.parts[0]):
        return Seq("(" + br[r.ops[0]][1], (Leaf("-\\infty"), Leaf(r.parts[1])))
    if len(r.parts) == 2 and is_name(r.parts[1]):
        return Seq(br[r.ops[0]][0] + ")", (Leaf(r.parts[0]), Leaf("\\infty")))
    return None


def _neg(a: str) -> str:
    a = a.strip()
    if re.fullmatch(r"\d+(?:\.\d+)?|\\frac\{\d+\}\{\d+\}", a):
        return "-" + a
    if re.fullmatch(r"-\d+(?:\.\d+)?|-\\frac\{\d+\}\{\d+\}", a):
        return a[1:]
    return f"-({a})"


def endpoint(text: str) -> Fraction | float | None:
    t = text.strip().replace(" ", "")
    if re.fullmatch(r"\+?\\infty|\+?oo|\+?∞", t):
        return math.inf
    if re.fullmatch(r"-\\infty|-oo|-∞", t):
        return -math.inf
    num = parse_number(t)
    return num.value if num is not None else None


def interval(kind: str, lo_text: str, hi_text: str) -> list[Piece] | None:
    lo, hi = endpoint(lo_text), endpoint(hi_text)
    if lo is None or hi is None or not lo < hi:
        return None
    lo_closed, hi_closed = kind[0] == "[" and lo != -math.inf, kind[1] == "]" and hi != math.inf
    return [(lo, lo_closed, hi, hi_closed)]


def merge(pieces: list[Piece]) -> list[Piece]:
    """Sorted, disjoint pieces covering the same set."""
    out: list[Piece] = []
    for lo, lc, hi, hc in sorted(pieces, key=lambda p: (p[0], not p[1])):
        if out:
            plo, plc, phi, phc = out[-1]
            if lo < phi or (lo == phi and (lc or phc)):
                if hi > phi or (hi == phi and hc):
                    out[-1] = (plo, plc, hi, hc or (hi == phi and phc))
                continue
        out.append((lo, lc, hi, hc))
    return out


def intersect(a: list[Piece], b: list[Piece]) -> list[Piece]:
    out = []
    for alo, alc, ahi, ahc in a:
        for blo, blc, bhi, bhc in b:
            lo, lc = max((alo, not alc), (blo, not blc))
            hi, hc = min((ahi, ahc), (bhi, bhc))
            lc = not lc
            if lo < hi:
                out.append((lo, lc, hi, hc))
    return merge(out)


def minus_points(a: list[Piece], points: list) -> list[Piece]:
    out = list(a)
    for p in points:
        nxt = []
        for lo, lc, hi, hc in out:
            if lo < p < hi:
                nxt += [(lo, lc, p, False), (p, False, hi, hc)]
            elif p == lo and lc:
                nxt.append((lo, False, hi, hc))
            elif p == hi and hc:
                nxt.append((lo, lc, hi, False))
            else:
                nxt.append((lo, lc, hi, hc))
        out = nxt
    return merge(out)


REAL_LINE = [(-math.inf, False, math.inf, False)]


def as_pieces(node) -> tuple[str | None, list[Piece]] | None:
    """`(variable, pieces)` of a set-typed node (variable None for interval notation), or None."""
    if isinstance(node, Seq) and len(node.kind) == 2 and len(node.items) == 2:
        a, b = node.items
        if isinstance(a, Leaf) and isinstance(b, Leaf):
            got = interval(node.kind, a.text, b.text)
            return (None, got) if got else None
        return None
    if isinstance(node, Union):
        parts = [as_pieces(x) for x in node.items]
        if any(p is None for p in parts):
            return None
        names = {v for v, _ in parts if v is not None}
        if len(names) > 1:
            return None
        return (names.pop() if names else None), merge([piece for _, ps in parts for piece in ps])
    if isinstance(node, Rel):
        return _rel_pieces(node)
    if isinstance(node, Joined):
        parts = [_rel_pieces(r) for r in node.rels]
        if any(p is None for p in parts) or len({v for v, _ in parts}) != 1:
            return None
        out = parts[0][1]
        for _, ps in parts[1:]:
            out = merge(out + ps) if node.op == "or" else intersect(out, ps)
        return parts[0][0], out
    if isinstance(node, Minus):
        base = as_pieces(node.base)
        points = [endpoint(p) for p in node.points]
        if base is None or any(p is None or p in (math.inf, -math.inf) for p in points):
            return None
        return base[0], minus_points(base[1], points)
    return None


def _rel_pieces(rel) -> tuple[str | None, list[Piece]] | None:
    if len(rel.parts) == 2 and rel.ops == ("!=",):
        name, point = (rel.parts[0], rel.parts[1]) if is_name(rel.parts[0]) else (rel.parts[1], rel.parts[0])
        value = endpoint(point)
        if not is_name(name) or value is None or value in (math.inf, -math.inf):
            return None
        return text_key(name), minus_points(REAL_LINE, [value])
    as_set = rel_to_interval(rel)
    if as_set is None:
        return None
    c = canon_rel(rel)
    name = c.parts[1] if len(c.parts) == 3 else (c.parts[0] if is_name(c.parts[0]) else c.parts[1])
    got = as_pieces(as_set)
    return (text_key(name), got[1]) if got else None


def set_typed(node) -> bool:
    """Nodes that denote a subset of the line by their form (not a bare bracket pair: `(2, 3)` may
    be a point)."""
    if isinstance(node, Rel):
        return all(o in ("<", "<=", ">", ">=", "!=") for o in node.ops)
    return isinstance(node, Union | Joined | Minus)


def relational(node) -> bool:
    return isinstance(node, Rel | Joined)
