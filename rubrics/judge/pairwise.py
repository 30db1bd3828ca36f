"""Pairwise judging as a rubric: the completion against a baseline response for the same question.

`PairwiseRubric(judge).score(sample)` compares the completion's final segment with
`sample.answer["baseline"]` (or `sample.answer` itself when it is a string) through
`JudgeRubric.compare`: 1.0 when the completion is better, 0.0 when the baseline is, 0.5 for a tie.
With `swap=True` (default) both orders are judged and an order-dependent verdict is a tie, so a
position-biased judge cannot hand out wins. Canaries short-circuit exactly as in `JudgeRubric`.
"""

from __future__ import annotations

from collections.abc import Mapping

from rubrics.core import RewardResult, Rubric, Sample, Status
from rubrics.judge.rubric import JudgeRubric, question_of
from rubrics.text import final_segment


class PairwiseRubric(Rubric):
    name = "pairwise_judge"

    def __init__(self, judge: JudgeRubric, *, swap: bool = True) -> None:
        self.judge = judge
        self.swap = swap

    async def _score(self, sample: Sample) -> RewardResult:
        response = final_segment(sample.completion_text)
        if response is None:
            return RewardResult.zero(Status.NO_ANSWER, "unclosed <think> block: no final answer")
        canary = self.judge.canary(response)
        if canary is not None:
            return canary
        answer = sample.answer
        baseline = answer.get("baseline") if isinstance(answer, Mapping) else answer
        if not isinstance(baseline, str) or not baseline.strip():
            return RewardResult.unverified(Status.ERROR, "invalid_input: sample has no baseline response")
        return await self.judge.compare(question_of(sample.prompt), response, baseline, swap=self.swap)

    async def unavailable(self) -> str | None:
        return await self.judge.unavailable()

    async def aclose(self) -> None:
        await self.judge.aclose()
