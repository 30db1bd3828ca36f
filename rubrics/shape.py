"""Small shape rubrics meant to be combined with a quality rubric through `WeightedRubric`.

* `LengthRubric(limit_chars)`: 1.0 when the final answer (after the last `</think>`) has at most
  `limit_chars` characters, falling linearly to 0.0 at twice the limit (a guard against the verbosity
  bias of LLM judges).
* `FormatRubric`: 1.0 when the completion closes every think block it opens and leaves a non-empty
  final answer, else 0.0 with `no_answer`.
"""

from __future__ import annotations

from rubrics.core import RewardResult, Rubric, Sample, Status
from rubrics.text import final_segment


class LengthRubric(Rubric):
    name = "length"

    def __init__(self, limit_chars: int = 2000) -> None:
        if limit_chars <= 0:
            raise ValueError("limit_chars must be positive")
        self.limit = limit_chars

    async def _score(self, sample: Sample) -> RewardResult:
        final = final_segment(sample.completion_text)
        if final is None:
            return RewardResult.zero(Status.NO_ANSWER, "unclosed <think> block")
        n = len(final.strip())
        score = 1.0 if n <= self.limit else max(0.0, 2.0 - n / self.limit)
        return RewardResult(
            score=score, components={"chars": float(n)}, reason=f"{n} chars (limit {self.limit})"
        )


class FormatRubric(Rubric):
    name = "format"

    async def _score(self, sample: Sample) -> RewardResult:
        final = final_segment(sample.completion_text)
        if final is None:
            return RewardResult.zero(Status.NO_ANSWER, "unclosed <think> block")
        if not final.strip():
            return RewardResult.zero(Status.NO_ANSWER, "empty final answer")
        return RewardResult(score=1.0, reason="well-formed")
