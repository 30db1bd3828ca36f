"""Recall on real-output shapes: correct answers in every format class of issue 15 are paid."""

from __future__ import annotations

import pytest

from rubrics.math import verify
from tests.math.recall_cases import ALL

CASES = [(group, i, p, g, exp) for group, cases in ALL.items() for i, (p, g, exp) in enumerate(cases)]


@pytest.mark.parametrize(
    ("group", "index", "pred", "gold", "expected"), CASES, ids=[f"{c[0]}-{c[1]}" for c in CASES]
)
def test_recall_case(group, index, pred, gold, expected):
    verdict = verify(pred, gold)
    assert verdict.correct is expected, verdict


def test_same_verdicts_from_worker_threads():
    """No signal-based timeouts: every verdict is the same when four threads grade at once."""
    from concurrent.futures import ThreadPoolExecutor

    pairs = [(p, g) for _, _, p, g, _ in CASES]
    main = [verify(p, g).correct for p, g in pairs]
    with ThreadPoolExecutor(4) as pool:
        threaded = list(pool.map(lambda pg: verify(*pg).correct, pairs))
    assert threaded == main
