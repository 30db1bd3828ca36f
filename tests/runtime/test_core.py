"""The reward contract: tri-state results, guarded rubrics, weighted combination, exact match."""

from __future__ import annotations

import asyncio

import pytest

from rubrics.core import Component, ExactMatchRubric, RewardResult, Rubric, Sample, Status, WeightedRubric
from rubrics.text import final_segment


class Fixed(Rubric):
    name = "fixed"

    def __init__(self, result: RewardResult) -> None:
        self.result = result

    async def _score(self, sample: Sample) -> RewardResult:
        return self.result


class Boom(Rubric):
    name = "boom"

    async def _score(self, sample: Sample) -> RewardResult:
        raise ZeroDivisionError("bad")


def s(text: str, answer: object = "Paris") -> Sample:
    return Sample(prompt=[{"role": "user", "content": "q"}], completion=text, answer=answer)


def test_unverified_results_cannot_carry_a_score():
    with pytest.raises(ValueError):
        RewardResult(score=0.0, status=Status.TIMEOUT)
    with pytest.raises(ValueError):
        RewardResult(score=None, status=Status.OK)
    r = RewardResult.unverified(Status.ERROR, "judge down")
    assert r.score is None and not r.verified and r.to_dict()["status"] == "error"


async def test_exceptions_become_error_results_not_zero():
    result = await Boom().score(s("x"))
    assert result.score is None and result.status is Status.ERROR and "ZeroDivisionError" in result.reason
    group = await Boom().score_group([s("a"), s("b")])
    assert [r.status for r in group] == [Status.ERROR, Status.ERROR]


async def test_weighted_rubric_clips_weights_and_keeps_names():
    inner = Fixed(RewardResult(score=3.0, components={"sub": 0.5}))
    rubric = WeightedRubric(
        {"a": Component(inner, weight=0.5, low=0, high=1), "b": Fixed(RewardResult(score=2.0))}
    )
    result = await rubric.score(s("x"))
    assert result.score == pytest.approx(0.5 * 1.0 + 2.0)
    assert result.components == {"a": 1.0, "a.sub": 0.5, "b": 2.0}


async def test_weighted_rubric_is_unverified_if_any_part_is():
    rubric = WeightedRubric(
        {
            "ok": Fixed(RewardResult(score=1.0)),
            "judge": Fixed(RewardResult.unverified(Status.TIMEOUT, "slow")),
        }
    )
    result = await rubric.score(s("x"))
    assert result.score is None and result.status is Status.TIMEOUT and result.reason.startswith("judge")


async def test_weighted_rubric_reports_first_non_ok_status():
    rubric = WeightedRubric(
        {"a": Fixed(RewardResult.zero(Status.NO_ANSWER, "none")), "b": Fixed(RewardResult(score=1.0))}
    )
    result = await rubric.score(s("x"))
    assert result.status is Status.NO_ANSWER and result.score == 1.0


@pytest.mark.parametrize(
    ("text", "answer", "score", "status"),
    [
        ("Paris", "Paris", 1.0, Status.OK),
        ("  paris. ", "Paris", 1.0, Status.OK),
        ("<think>hmm</think><answer>PARIS</answer>", "Paris", 1.0, Status.OK),
        ("<answer>Lyon</answer>", "Paris", 0.0, Status.OK),
        ("<think>Paris", "Paris", 0.0, Status.NO_ANSWER),
        ("", "Paris", 0.0, Status.NO_ANSWER),
        ("eight", ["8", "eight"], 1.0, Status.OK),
        ("The answer is Paris", "Paris", 0.0, Status.OK),
    ],
)
async def test_exact_match(text, answer, score, status):
    result = await ExactMatchRubric().score(s(text, answer))
    assert (result.score, result.status) == (score, status)


async def test_exact_match_without_gold_is_unverified():
    assert (await ExactMatchRubric().score(s("Paris", None))).score is None


def test_final_segment_policy():
    assert final_segment("a</think>b") == "b"
    assert final_segment("<think>x</think>y<think>z") is None
    assert final_segment("plain") == "plain"


async def test_score_group_runs_concurrently():
    class Slow(Rubric):
        running = 0
        peak = 0

        async def _score(self, sample: Sample) -> RewardResult:
            Slow.running += 1
            Slow.peak = max(Slow.peak, Slow.running)
            await asyncio.sleep(0)
            Slow.running -= 1
            return RewardResult(score=1.0)

    await Slow().score_group([s("a")] * 4)
    assert Slow.peak == 4
