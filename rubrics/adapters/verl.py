"""A `Rubric` as a veRL custom reward function (`custom_reward_function.path/.name`).

veRL calls `compute_score(data_source, solution_str, ground_truth, extra_info=None, **kwargs)` by
keyword and wants a float or a dict with a float `"score"`; its other keys become
`reward_extra_info` and MUST be the same for every sample (mixed key sets crash its collation).
veRL does not pass the prompt: judges need the question in `extra_info["question"]` (written at
data-prep time); a judge sample without it comes back unverified (`invalid_input`). Ground truths
stored as JSON object strings (a code test suite in parquet) are decoded (`decode_gold`).

Every dict result has exactly the keys of `VerlReward.KEYS`:
* `score`: the rubric's score, or `fallback` (default 0.0) when unverified;
* `verified`: 1.0 / 0.0, so unverified samples can be counted (and filtered, see below);
* `status_<name>`: one-hot of the result status (ok, no_answer, invalid, hack, timeout, error).

Which method for which veRL call site:
* naive / dapo managers, reward loop (sync or async): `compute_score` / `compute_score_async`
  (sync calls run on the process's persistent reward loop, from any thread: `rubrics.aio`);
* batch manager: `compute_score_batch`;
* prime manager (a process pool that indexes `result[0]`): `compute_score_prime`, which returns
  `(score, row)`. The prime manager pickles the function into each worker: build the adapter from a
  picklable rubric *factory* (`VerlReward(functools.partial(MathRubric, workers=1))`); each worker
  process builds its rubric once and reuses it. An adapter over a rubric instance is not picklable.

Honest semantics: veRL has no mask for unverified samples; with the default fallback they train as
wrong answers (0.0). To keep them out, use `fallback=math.nan` together with the `grpo_verified`
advantage estimator (`rubrics.adapters.verl_advantage`): unverified rows leave the group baseline
and get advantage 0. `verified` is also in `reward_extra_info` for metrics and filters.

Usage, in a file veRL points at:

    from functools import partial
    from rubrics.adapters.verl import VerlReward
    from rubrics.judge.rubric import JudgeConfig, JudgeRubric
    _reward = VerlReward(partial(JudgeRubric, JudgeConfig(base_url="http://127.0.0.1:9002/v1")),
                         needs_question=True)
    compute_score = _reward.compute_score      # or compute_score_async / _batch / _prime
"""

from __future__ import annotations

import asyncio
import os
import threading
import uuid
import weakref
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from rubrics.adapters._inputs import decode_gold
from rubrics.aio import run_sync
from rubrics.core import RewardResult, Rubric, Sample, Status

RubricFactory = Callable[[], Rubric]

# (pid, uid) -> this process's adapter: weak for the ones users built (dropped with them), strong for
# copies unpickled into worker processes (the prime manager unpickles per task: build the rubric once)
_ADAPTERS: weakref.WeakValueDictionary[tuple[int, str], VerlReward] = weakref.WeakValueDictionary()
_RESTORED: dict[tuple[int, str], VerlReward] = {}
_ADAPTERS_LOCK = threading.Lock()


def _restore(uid: str, factory: RubricFactory, options: dict[str, Any]) -> VerlReward:
    """Unpickling target: one adapter (and rubric) per process and original adapter."""
    key = (os.getpid(), uid)
    with _ADAPTERS_LOCK:
        adapter = _ADAPTERS.get(key) or _RESTORED.get(key)
    if adapter is None:
        adapter = VerlReward(factory, _uid=uid, **options)
        with _ADAPTERS_LOCK:
            adapter = _RESTORED.setdefault(key, adapter)
    return adapter


class VerlReward:
    KEYS = ("score", "verified", *(f"status_{s.value}" for s in Status))

    def __init__(
        self,
        rubric: Rubric | RubricFactory,
        *,
        needs_question: bool = False,
        timeout_s: float = 300.0,
        fallback: float = 0.0,
        _uid: str | None = None,
    ) -> None:
        self._rubric = rubric if isinstance(rubric, Rubric) else None
        self._factory = None if isinstance(rubric, Rubric) else rubric
        if self._rubric is None and not callable(self._factory):
            raise TypeError(f"VerlReward needs a Rubric or a rubric factory, got {type(rubric).__name__}")
        self.needs_question = needs_question
        self.timeout_s = timeout_s
        self.fallback = fallback
        self._uid = _uid or uuid.uuid4().hex
        self._lock = threading.Lock()
        with _ADAPTERS_LOCK:
            _ADAPTERS[(os.getpid(), self._uid)] = self

    @property
    def rubric(self) -> Rubric:
        """The rubric (built from the factory on first use in this process)."""
        if self._rubric is None:
            with self._lock:
                if self._rubric is None:
                    self._rubric = self._factory()  # type: ignore[misc]
        return self._rubric

    def __reduce__(self) -> tuple[Any, ...]:
        if self._factory is None:
            raise TypeError(
                "a VerlReward over a rubric instance cannot be pickled (veRL's prime manager pickles its "
                "reward function): pass a picklable factory, e.g. VerlReward(functools.partial(MathRubric))"
            )
        options = {
            "needs_question": self.needs_question,
            "timeout_s": self.timeout_s,
            "fallback": self.fallback,
        }
        return (_restore, (self._uid, self._factory, options))

    def _sample(self, solution_str: str, ground_truth: Any, extra_info: Any) -> Sample | None:
        if isinstance(extra_info, str):
            extra_info = decode_gold(extra_info)
        info = dict(extra_info) if isinstance(extra_info, Mapping) else {}
        question = info.get("question")
        if self.needs_question and not (isinstance(question, str) and question.strip()):
            return None
        prompt = [{"role": "user", "content": question}] if isinstance(question, str) else []
        return Sample(prompt=prompt, completion=solution_str, answer=decode_gold(ground_truth), info=info)

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
        samples = [
            self._sample(s, g, i) for s, g, i in zip(solution_strs, list(ground_truths), infos, strict=True)
        ]
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

    def compute_score_prime(
        self, data_source: str, solution_str: str, ground_truth: Any, extra_info: Any = None, **kwargs: Any
    ) -> tuple[float, dict[str, float]]:
        """For veRL's prime manager (positional call, `float(result[0])`): `(score, row)`."""
        row = self.compute_score(data_source, solution_str, ground_truth, extra_info)
        return row["score"], row
