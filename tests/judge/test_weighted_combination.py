"""WeightedRubric (rubrics/core.py): weights, clipping, components, and unverified propagation."""

from __future__ import annotations

import pytest

from rubrics.core import Component, RewardResult, Rubric, Sample, Status, WeightedRubric


class Fixed(Rubric):
    """Returns a fixed result and counts calls (a real Rubric subclass, no mocking library)."""

    def __init__(self, result: RewardResult) -> None:
        self.result = result
        self.calls = 0

    async def _score(self, sample: Sample) -> RewardResult:
        self.calls += 1
        return self.result


class Boom(Rubric):
    async def _score(self, sample: Sample) -> RewardResult:
        raise RuntimeError("bug")


SAMPLE = Sample(prompt="q", completion="a")


async def test_weights_clipping_and_components():
    rubric = WeightedRubric(
        {
            "judge": Component(Fixed(RewardResult(0.8, components={"raw": 8.0})), weight=0.7),
            "length": Component(Fixed(RewardResult(-3.0)), weight=0.3, low=-1.0, high=1.0),
        }
    )
    result = await rubric.score(SAMPLE)
    assert result.score == pytest.approx(0.7 * 0.8 + 0.3 * -1.0)
    assert result.components == {"judge": 0.8, "judge.raw": 8.0, "length": -1.0}
    assert result.status is Status.OK


async def test_any_unverified_part_makes_the_whole_unverified():
    rubric = WeightedRubric(
        {"a": Fixed(RewardResult(1.0)), "b": Fixed(RewardResult.unverified(Status.TIMEOUT, "judge slow"))}
    )
    result = await rubric.score(SAMPLE)
    assert result.score is None and result.status is Status.TIMEOUT
    assert result.reason == "b: judge slow"


async def test_verified_non_ok_status_propagates_and_exceptions_become_errors():
    rubric = WeightedRubric(
        {"a": Fixed(RewardResult(1.0)), "b": Fixed(RewardResult.zero(Status.HACK, "key"))}
    )
    hacked = await rubric.score(SAMPLE)
    assert hacked.score == 1.0 and hacked.status is Status.HACK
    broken = await WeightedRubric({"a": Fixed(RewardResult(1.0)), "b": Boom()}).score(SAMPLE)
    assert broken.score is None and broken.status is Status.ERROR and "bug" in broken.reason


async def test_group_scoring_calls_each_part_once_per_sample():
    part = Fixed(RewardResult(0.5))
    results = await WeightedRubric({"p": Component(part, weight=2.0)}).score_group([SAMPLE] * 3)
    assert [r.score for r in results] == [1.0, 1.0, 1.0]
    assert part.calls == 3


def test_invalid_configuration_is_rejected():
    with pytest.raises(ValueError):
        WeightedRubric({})
    with pytest.raises(ValueError):
        WeightedRubric({"a": Component(Fixed(RewardResult(1.0)), low=1.0, high=0.0)})
