"""A `Rubric` as a veRL custom reward function (`custom_reward_function.path/.name`).

veRL calls `compute_score(data_source, solution_str, ground_truth, extra_info=None, **kwargs)` by
keyword and wants a float or a dict with a float `"score"`; its other keys become
`reward_extra_info` and MUST be the same for every sample (mixed key sets crash its collation).
veRL does not pass the prompt: judges need the question in `extra_info["question"]` (written at
data-prep time); a judge sample without it comes back unverified (`invalid_input`).

Every result has exactly the keys of `VerlReward.KEYS`:
* `score`: the rubric's score, or `fallback` (default 0.0) when unverified, since veRL cannot take None;
* `verified`: 1.0 / 0.0, so unverified samples can be masked or counted downstream;
* `status_<name>`: one-hot of the result status (ok, no_answer, invalid, hack, timeout, error).

Usage, in a file veRL points at:

    from rubrics.adapters.verl import VerlReward
    from rubrics.judge import JudgeConfig, JudgeRubric
    _reward = VerlReward(JudgeRubric(JudgeConfig(base_url="http://127.0.0.1:9002/v1")), needs_question=True)
    compute_score = _reward.compute_score            # or compute_score_async / compute_score_batch
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
from typing import Any

from rubrics.adapters._sync import run_sync
from rubrics.core import RewardResult, Rubric, Sample, Status


class VerlReward:
    KEYS = ("score", "verified", *(f"status_{s.value}" for s in Status))

    def __init__(
        self, rubric: Rubric, *, needs_question: bool = False, timeout_s: float = 300.0, fallback: float = 0.0
    ) -> None:
        self.rubric = rubric
        self.needs_question = needs_question
        self.timeout_s = timeout_s
        self.fallback = fallback

    def _sample(
        self, solution_str: str, ground_truth: Any, extra_info: Mapping[str, Any] | None
    ) -> Sample | None:
        info = dict(extra_info or {})
        question = info.get("question")
        if self.needs_question and not (isinstance(question, str) and question.strip()):
            return None
        prompt = [{"role": "user", "content": question}] if isinstance(question, str) else []
        return Sample(prompt=prompt, completion=solution_str, answer=ground_truth, info=info)

    def _row(self, result: RewardResult) -> dict[str, float]:
        row = {key: 0.0 for key in self.KEYS}
        row["score"] = self.fallback if result.score is None else float(result.score)
        row["verified"] = 0.0 if result.score is None else 1.0
        row[f"status_{result.status.value}"] = 1.0
        return row

    async def compute_score_batch_async(
        self,
        data_sources: Sequence[str],
        solution_strs: Sequence[str],
        ground_truths: Sequence[Any],
        extra_infos: Sequence[Mapping[str, Any] | None] | None = None,
        **kwargs: Any,
    ) -> list[dict[str, float]]:
        infos = list(extra_infos) if extra_infos is not None else [None] * len(solution_strs)
        samples = [self._sample(s, g, i) for s, g, i in zip(solution_strs, ground_truths, infos, strict=True)]
        valid = [s for s in samples if s is not None]
        try:
            scored = await asyncio.wait_for(self.rubric.score_group(valid), self.timeout_s)
        except asyncio.TimeoutError:
            scored = [RewardResult.unverified(Status.TIMEOUT, f"timeout: over {self.timeout_s}s")] * len(
                valid
            )
        it = iter(scored)
        missing = RewardResult.unverified(Status.ERROR, "invalid_input: extra_info['question'] is required")
        return [self._row(next(it) if s is not None else missing) for s in samples]

    async def compute_score_async(
        self, data_source: str, solution_str: str, ground_truth: Any, extra_info: Any = None, **kwargs: Any
    ) -> dict[str, float]:
        return (
            await self.compute_score_batch_async([data_source], [solution_str], [ground_truth], [extra_info])
        )[0]

    def compute_score(
        self, data_source: str, solution_str: str, ground_truth: Any, extra_info: Any = None, **kwargs: Any
    ) -> dict[str, float]:
        return run_sync(self.compute_score_async(data_source, solution_str, ground_truth, extra_info))

    def compute_score_batch(
        self,
        data_sources: Sequence[str],
        solution_strs: Sequence[str],
        ground_truths: Sequence[Any],
        extra_infos: Sequence[Any] | None = None,
        **kwargs: Any,
    ) -> list[dict[str, float]]:
        return run_sync(
            self.compute_score_batch_async(data_sources, solution_strs, ground_truths, extra_infos)
        )
