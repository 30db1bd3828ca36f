"""Zero false positives on hostile inputs (hedges, think blocks, towers, injections, ...)."""

from __future__ import annotations

import pytest

from rubrics.math import check_answer, verify
from tests.math.adversarial_cases import ALL

CASES = [(group, i, p, g, exp) for group, cases in ALL.items() for i, (p, g, exp) in enumerate(cases)]


@pytest.mark.parametrize(
    ("group", "index", "pred", "gold", "expected"), CASES, ids=[f"{c[0]}-{c[1]}" for c in CASES]
)
def test_adversarial_case(group, index, pred, gold, expected):
    verdict = verify(pred, gold)
    assert verdict.correct is expected, verdict
    assert check_answer(pred, gold) is expected


def test_no_false_positive_in_whole_suite():
    false_positives = [
        (p[:60], g) for cases in ALL.values() for p, g, exp in cases if not exp and check_answer(p, g)
    ]
    assert false_positives == []


@pytest.mark.parametrize(
    ("pred", "gold"),
    [
        (r"\boxed{9^{9^{9^{9}}}}", "1"),
        (r"\boxed{(10^{100})!}", "1"),
        (r"\boxed{2^{2^{2^{2^{2^{2}}}}}}", "4"),
        (r"\boxed{10^{10^{10^{10^{10}}}}}", "1"),
        (r"\boxed{" + "9" * 100_000 + "}", "9"),
    ],
)
def test_hang_bait_is_rejected_by_guards_not_by_the_deadline(pred, gold):
    verdict = verify(pred, gold)
    assert verdict.correct is False
    assert verdict.reason in ("too_complex", "mismatch", "parse_error"), verdict


def test_identical_tower_matches_as_a_string():
    assert verify(r"\boxed{9^{9^9}}", r"9^{9^{9}}").reason == "match_string"
