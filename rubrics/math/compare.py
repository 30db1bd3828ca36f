r"""Comparison of two answer structures (`rubrics.math.structure` parses them).

`compare(pred, gold, leaf)` walks both structures; `leaf(p, g, kind)` decides one pair of
expressions (kind "value", "eq" for proportional equations, "ineq" for positive multiples) and
may raise `NeedCAS` when the cheap checks cannot decide. Sets are order-free (a subset never
passes), tuples and intervals ordered, matrices by shape and entry, relations as relations (never
via one side), set-typed answers (unions, inequalities, `x \neq a`, `\mathbb{R}\setminus\{a\}`) by
their merged intervals (`rubrics.math.intervals`). Several predicted forms of one answer must all
match a single gold.
"""

from __future__ import annotations

import re

from rubrics.math.intervals import as_pieces, canon_rel, rel_to_interval, relational, set_typed
from rubrics.math.normalize import text_key
from rubrics.math.policy import DEFAULT_RULES, Rules
from rubrics.math.structure import (
    UNDEFINED,
    Assign,
    Dict,
    Leaf,
    LeafCmp,
    Matrix,
    Node,
    Rel,
    Seq,
    Text,
    Union,
    parse_item,
)


def compare(pred: Node, gold: Node, leaf: LeafCmp, rules: Rules = DEFAULT_RULES) -> bool:
    """True when `pred` answers `gold` (see module docstring). `leaf` may raise NeedCAS."""
    if isinstance(pred, Seq) and pred.kind == "list" and isinstance(gold, Leaf | Text | Matrix | Assign):
        return all(compare(x, gold, leaf, rules) for x in pred.items)  # one answer in several forms
    if set_typed(pred) or set_typed(gold):
        ps, gs = as_pieces(pred), as_pieces(gold)
        if ps is not None and gs is not None:
            if relational(pred) and not relational(gold) and rules.direction == "gold_to_pred":
                return False
            return ps[1] == gs[1] and (ps[0] is None or gs[0] is None or ps[0] == gs[0])
    if isinstance(gold, Assign) and isinstance(pred, Rel):
        return _compare_rel(pred, Rel((gold.lhs, gold.rhs), ("=",)), leaf)
    if isinstance(gold, Assign) and not isinstance(pred, Assign):
        return compare(pred, gold.value, leaf, rules)
    if isinstance(pred, Assign):
        if isinstance(gold, Assign):
            return pred.name == gold.name and compare(pred.value, gold.value, leaf, rules)
        if isinstance(gold, Rel):
            return _compare_rel(Rel((pred.lhs, pred.rhs), ("=",)), gold, leaf)
        return compare(pred.value, gold, leaf, rules)
    if isinstance(pred, Text) or isinstance(gold, Text):
        return _key(pred) == _key(gold) and _key(gold) != ""
    if isinstance(gold, Rel) and not isinstance(pred, Rel):
        as_set = rel_to_interval(gold)
        return as_set is not None and compare(pred, as_set, leaf, rules)
    if isinstance(pred, Rel) and not isinstance(gold, Rel):
        if all(o == "=" for o in pred.ops) and not re.search(
            r"[A-Za-z]", re.sub(r"\\[A-Za-z]+", "", pred.parts[0])
        ):
            return compare(parse_item(pred.parts[-1]), gold, leaf, rules)
        as_set = rel_to_interval(pred) if rules.direction == "both" else None
        return as_set is not None and compare(as_set, gold, leaf, rules)
    if isinstance(pred, Rel):
        return _compare_rel(pred, gold, leaf)
    if isinstance(gold, Dict) or isinstance(pred, Dict):
        return _compare_dict(pred, gold, leaf, rules)
    if isinstance(pred, Leaf) and isinstance(gold, Leaf):
        if pred.text == gold.text and not UNDEFINED.search(gold.text):
            return True
        return leaf(pred.text, gold.text, "value")
    if isinstance(pred, Matrix) and isinstance(gold, Matrix):
        if [len(r) for r in pred.rows] != [len(r) for r in gold.rows]:
            return False
        return all(
            compare(a, b, leaf)
            for ra, rb in zip(pred.rows, gold.rows, strict=True)
            for a, b in zip(ra, rb, strict=True)
        )
    if isinstance(pred, Union) and isinstance(gold, Union):
        return _unordered(pred.items, gold.items, leaf, rules)
    if isinstance(pred, Seq) and isinstance(gold, Seq):
        return _compare_seq(pred, gold, leaf, rules)
    return False


def _key(n: Node) -> str:
    if isinstance(n, Text):
        return n.key
    if isinstance(n, Leaf):
        return text_key(n.text)
    return "\x00structured"


def _compare_seq(p: Seq, g: Seq, leaf: LeafCmp, rules: Rules) -> bool:
    if len(p.items) != len(g.items) and not ({p.kind, g.kind} <= {"list", "set"}):
        return False
    unordered = {"list", "set"}
    if p.kind == g.kind == "list" and rules.ordered_lists:
        return _ordered(p.items, g.items, leaf, rules)
    if p.kind in unordered and g.kind in unordered:
        return _unordered(p.items, g.items, leaf, rules)
    if p.kind in unordered or g.kind in unordered:
        if "set" in (p.kind, g.kind):
            return False
        return _ordered(p.items, g.items, leaf, rules)
    return p.kind == g.kind and _ordered(p.items, g.items, leaf, rules)


def _ordered(ps: tuple, gs: tuple, leaf: LeafCmp, rules: Rules) -> bool:
    return len(ps) == len(gs) and all(compare(a, b, leaf, rules) for a, b in zip(ps, gs, strict=True))


def _unordered(ps: tuple, gs: tuple, leaf: LeafCmp, rules: Rules) -> bool:
    """Set equality: every pred element matches some gold element and vice versa (dupes collapse)."""
    if not ps or not gs:
        return not ps and not gs
    matched_gold = set()
    for a in ps:
        hits = [j for j, b in enumerate(gs) if compare(a, b, leaf, rules)]
        if not hits:
            return False
        matched_gold.update(hits)
    return len(matched_gold) == len(gs)


def _compare_dict(p: Node, g: Node, leaf: LeafCmp, rules: Rules) -> bool:
    if isinstance(p, Dict) and isinstance(g, Dict):
        pk, gk = dict(p.items), dict(g.items)
        if set(pk) == set(gk):
            return all(compare(pk[k], gk[k], leaf, rules) for k in gk)
        return _ordered(tuple(pk.values()), tuple(gk.values()), leaf, rules)
    pv = tuple(v for _, v in p.items) if isinstance(p, Dict) else None
    gv = tuple(v for _, v in g.items) if isinstance(g, Dict) else None
    other = g if pv is not None else p
    if not isinstance(other, Seq):
        return False
    if pv is not None:
        return _compare_seq(Seq("()" if other.kind != "list" else "list", pv), other, leaf, rules)
    return _compare_seq(other, Seq("()" if other.kind != "list" else "list", gv), leaf, rules)


def _compare_rel(p: Rel, g: Node, leaf: LeafCmp) -> bool:
    if not isinstance(g, Rel):
        return False
    p, g = canon_rel(p), canon_rel(g)
    if p.ops != g.ops or len(p.parts) != len(g.parts):
        return False
    if p.parts == g.parts:
        return True
    if len(p.parts) == 2:
        kind = "eq" if p.ops[0] in ("=", "!=") else "ineq"
        return leaf(f"({p.parts[0]})-({p.parts[1]})", f"({g.parts[0]})-({g.parts[1]})", kind)
    return all(a == b or leaf(a, b, "value") for a, b in zip(p.parts, g.parts, strict=True))
