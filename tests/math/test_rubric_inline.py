"""MathRubric's inline path (cheap part on the event loop, CAS jobs awaited with CasPool.arun) changes no verdict."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from rubrics.core import Sample, Status
from rubrics.math import CasPool, MathRubric
from rubrics.math.rubric import INLINE_CHARS

CASES = [
    json.loads(line)
    for line in (Path(__file__).parents[2] / "benchmarks/data/math_cases.jsonl").read_text().splitlines()
    if line.strip()
]


@pytest.fixture(scope="module")
def rubric():
    r = MathRubric(workers=1)
    yield r
    r.pool.close()


async def test_inline_and_threaded_checks_agree(rubric):
    samples = [Sample(prompt="", completion=c["pred"], answer=c["gold"]) for c in CASES]
    scored = await rubric.score_group(samples)
    for sample, got in zip(samples, scored, strict=True):
        expected = rubric.result(rubric.check(sample.completion_text, [sample.answer], rubric.policy))
        assert got == expected, sample
    reasons = {r.reason.split(":")[0] for r in scored}
    assert "match_cas" in reasons and "match_string" in reasons  # both paths were taken


async def test_cas_items_and_long_texts_still_reach_the_pool(rubric):
    cas = await rubric.score(Sample(prompt="", completion="\\boxed{(x-1)(x+1)}", answer="x^2-1"))
    long = await rubric.score(Sample(prompt="", completion="x" * INLINE_CHARS + " \\boxed{4}", answer="4"))
    assert cas.score == 1.0 and cas.reason.startswith("match_cas")
    assert long.score == 1.0


async def test_a_dead_cas_worker_leaves_only_its_own_item_unverified():
    pool = CasPool(workers=1)
    try:
        rubric = MathRubric(pool=pool)
        dead = pool._idle[0].proc
        dead.kill()
        dead.wait()
        samples = [
            Sample(prompt="", completion="\\boxed{(x-1)(x+1)}", answer="x^2-1"),  # CAS: the dead worker
            Sample(prompt="", completion="\\boxed{(x+2)^2}", answer="x^2+4x+4"),  # CAS: its replacement
            Sample(prompt="", completion="\\boxed{12}", answer="12"),  # cheap: no worker at all
        ]
        first, second, cheap = await rubric.score_group(samples)
        assert first.score is None and first.status == Status.ERROR and "worker died" in first.reason
        assert second.score == 1.0 and second.reason.startswith("match_cas")
        assert cheap.score == 1.0
        assert pool.stats["errors"] == 1
    finally:
        pool.close()
