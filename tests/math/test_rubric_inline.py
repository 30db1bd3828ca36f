"""MathRubric's inline path (cheap part on the event loop, CAS jobs awaited with CasPool.arun, golds
kept) changes no verdict."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

from rubrics.core import Sample, Status
from rubrics.math import CasPool, MathRubric, verify
from rubrics.math.rubric import GOLD_CACHE, INLINE_CHARS

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


async def test_a_kept_gold_gives_the_verdicts_of_a_fresh_one(rubric):
    """The rubric keeps each gold's parse (`verifier.Gold`) and reuses it for every completion scored
    against that gold: same verdicts as `verify`, which prepares the gold afresh, for all public
    cases (twice: the second pass only reuses), and for golds a completion rewrites (unit
    conversion, decimal comma, degrees read as radians) before and after the plain reading."""
    golds = {}
    for c in CASES:
        golds.setdefault(c["gold"], []).append(c["pred"])
    rewrites = {
        "1.5 km": ["\\boxed{1500 m}", "\\boxed{1.5 km}", "\\boxed{1.5}", "\\boxed{2 km}"],
        "3.75": ["\\boxed{3,75}", "\\boxed{3.75}", "\\boxed{15/4}"],
        "12,34,567": ["\\boxed{1234567}", "\\boxed{12,34,567}"],
        "90^\\circ": ["\\boxed{\\frac{\\pi}{2}}", "\\boxed{90}", "\\boxed{\\pi}"],
        "x \\pm 1 \\pm 2": ["\\boxed{x}", "\\boxed{1}"],  # its parse raises TooComplex, every time
    }
    policies = [rubric.policy, replace(rubric.policy, degrees="radians", decimal_comma=True)]
    items = [
        (pred, gold, policy) for gold, preds in golds.items() for pred in preds for policy in policies[:1]
    ]
    items += [(pred, gold, p) for gold, preds in rewrites.items() for pred in preds for p in policies]
    fresh = [verify(pred, gold, policy, rubric.pool) for pred, gold, policy in items]
    for _ in range(2):
        kept = [await rubric._inline(pred, [gold], policy) for pred, gold, policy in items]
        assert kept == fresh
    assert rubric._gold.cache_info().hits >= len(items)  # the second pass parsed no gold
    keys = {k for k in golds} | set(rewrites)
    assert rubric._gold.cache_info().currsize <= len(keys) * len(policies)  # golds only, no completion


def test_the_gold_cache_is_bounded():
    rubric = MathRubric(workers=1)
    for i in range(GOLD_CACHE + 50):
        rubric._gold(str(i), rubric.policy)
    assert rubric._gold.cache_info().currsize == GOLD_CACHE
