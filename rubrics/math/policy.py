"""Grading policies that projects disagree on, as named options with documented defaults.

Every option below changes verdicts only on inputs where RL pipelines genuinely disagree (the
`ambiguous` cases of the benchmark). The defaults are the conservative reward-mode choices.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal


@dataclass(frozen=True)
class MathPolicy:
    """How `verify` extracts and compares answers.

    percent: "unit" (default) reads `%` as a unit label: `28\\%` = `28` = `28 percent`, and `0.28`
        does NOT match a `28\\%` gold. "value" reads `%` as x/100: `28\\%` = `0.28`, and `28` does
        not match `28\\%`. A `%` in the prediction never matters unless the gold carries one
        (no ×100 fudge: gold `50` never accepts `0.5`).
    decimal_comma: False (default): `1,5` is the list (1, 5) and `1,000` is one thousand. True reads
        a comma between digits that is not a thousands group (`2,74`) as a decimal point.
    unreduced_fractions: True (default) accepts `2/4` for `1/2`; False requires lowest terms when
        the gold is a reduced fraction.
    degrees: "strip" (default) reads `90^\\circ` as 90; "radians" also accepts `\\pi/2` for a
        `90^\\circ` gold.
    relation_direction: "gold_to_pred" (default): a gold inequality (`-1 < x < 2`) accepts the
        pred's solution set (`(-1, 2)`), never the reverse (a restated inequality is no answer
        to "give the interval"). "both" accepts either direction.
    list_order: "set" (default): a bare list `4, 10, -2` is compared as a set (a box per solution
        gives no order either); "ordered" compares bare lists element by element (Hendrycks MATH).
        Bracketed tuples/intervals are always ordered, `\\{…\\}` sets never.
    prose_fallback: True (default): with no box, `<answer>` tag or "answer is"/"Answer:" anchor,
        grade the completion's final statement only when it holds exactly one candidate answer,
        no hedge words and no grader-directed text. It is never a last-number-anywhere search:
        a hedge ("3 or 5"), a second candidate or a question mark in that statement means
        no answer. False: such completions have no answer.
    cas_timeout_s: hard wall-clock deadline for the CAS part of one check (worker killed after it).
    max_chars: a completion longer than this is not searched (no answer); answers longer than
        `max_answer_chars` are compared as strings only (`too_complex`).
    """

    percent: Literal["unit", "value"] = "unit"
    decimal_comma: bool = False
    unreduced_fractions: bool = True
    degrees: Literal["strip", "radians"] = "strip"
    relation_direction: Literal["gold_to_pred", "both"] = "both"
    list_order: Literal["set", "ordered"] = "set"
    prose_fallback: bool = True
    cas_timeout_s: float = 1.0
    max_chars: int = 400_000
    max_answer_chars: int = 2_000
    max_depth: int = 64


DEFAULT_POLICY = MathPolicy()


def rules_of(policy: MathPolicy):
    """The comparison knobs `rubrics.math.structure.compare` needs."""
    from rubrics.math.structure import Rules

    return Rules(direction=policy.relation_direction, ordered_lists=policy.list_order == "ordered")
