"""A `Rubric` as a TRL `GRPOTrainer` reward function (sync and async twins).

Contract (TRL >= 1.0): `f(prompts, completions, completion_ids=None, **kwargs) -> list[float | None]`,
one value per completion. Dataset columns arrive in `kwargs` as per-completion lists: the gold is
read from `answer_key` (default "answer"); every other column becomes the sample's `info`.
Conversational prompts/completions (lists of `{"role", "content"}`) are accepted as they are. Golds
stored as JSON object strings (HF datasets flatten a code test suite to one) are decoded
(`decode_gold`). The sync function runs on the process's persistent reward loop (`rubrics.aio`), so
it works from any thread, for every step.

* Unverified results (judge outage, timeout, parse failure) map to `None` (TRL turns it into NaN
  and keeps it out of the baseline), or to `fallback` when one is configured.
* The async twin enforces its own deadline (`timeout_s`) with `asyncio.wait_for`: TRL has no timeout
  of its own, so a hung judge would otherwise hang training. A missed deadline makes the whole call
  unverified.
* When TRL passes `log_metric`, the function logs `<name>/unverified` and `<name>/fail/<kind>`
  (parse_error, timeout, ...) as shares of the batch.

Honest semantics with several reward functions: TRL sums them with `nansum`, so a None from one
function counts as 0 whenever another function returned a number for that completion; only a row
where *every* function returned None is kept out of the group baseline (TRL >= 1.7: advantage 0).
Passing a math function and a judge function separately therefore trains a judge outage as "judge
said 0". To keep such samples out, pass ONE combined function: `trl_weighted_reward({"math": ...,
"judge": ...})` scores a `WeightedRubric`, which is unverified (None) as soon as any part is.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from rubrics.adapters._inputs import decode_gold
from rubrics.aio import run_sync
from rubrics.core import Component, RewardResult, Rubric, Sample, Status, WeightedRubric

_TRL_KEYS = {"trainer_state", "log_metric", "log_extra", "environments", "completion_ids"}


def _samples(
    prompts: Sequence[Any], completions: Sequence[Any], answer_key: str, kwargs: dict
) -> list[Sample]:
    columns = {k: v for k, v in kwargs.items() if k not in _TRL_KEYS and isinstance(v, list | tuple)}
    answers = columns.pop(answer_key, [None] * len(completions))
    return [
        Sample(
            prompt=prompt,
            completion=completion,
            answer=decode_gold(answers[i]),
            info={k: v[i] for k, v in columns.items() if len(v) == len(completions)},
        )
        for i, (prompt, completion) in enumerate(zip(prompts, completions, strict=True))
    ]


def _log(name: str, results: Sequence[RewardResult], log_metric: Callable[[str, float], Any] | None) -> None:
    if log_metric is None or not results:
        return
    n = len(results)
    failed = [r for r in results if r.score is None]
    log_metric(f"{name}/unverified", len(failed) / n)
    for kind, count in Counter(r.reason.split(":", 1)[0] or r.status.value for r in failed).items():
        log_metric(f"{name}/fail/{kind}", count / n)


def trl_reward_functions(
    rubric: Rubric,
    *,
    name: str | None = None,
    answer_key: str = "answer",
    timeout_s: float = 300.0,
    fallback: float | None = None,
) -> tuple[Callable[..., list[float | None]], Callable[..., Any]]:
    """(sync, async) reward functions over `rubric`, both named `name` (default `<rubric>_reward`)."""
    fname = name or f"{rubric.name}_reward"

    async def score(prompts: Sequence[Any], completions: Sequence[Any], **kwargs: Any) -> list[float | None]:
        samples = _samples(prompts, completions, answer_key, kwargs)
        try:
            results = await asyncio.wait_for(rubric.score_group(samples), timeout_s)
        except asyncio.TimeoutError:
            results = [
                RewardResult.unverified(Status.TIMEOUT, f"timeout: reward call over {timeout_s}s")
            ] * len(samples)
        _log(fname, results, kwargs.get("log_metric"))
        return [fallback if r.score is None else float(r.score) for r in results]

    async def reward_async(prompts, completions, completion_ids=None, **kwargs):  # noqa: ANN001, ANN202
        return await score(prompts, completions, **kwargs)

    def reward(prompts, completions, completion_ids=None, **kwargs):  # noqa: ANN001, ANN202
        return run_sync(score(prompts, completions, **kwargs))

    reward.__name__ = reward.__qualname__ = fname
    reward_async.__name__ = reward_async.__qualname__ = fname
    return reward, reward_async


def trl_weighted_reward(
    parts: Mapping[str, Component | Rubric], *, name: str = "weighted_reward", **options: Any
) -> tuple[Callable[..., list[float | None]], Callable[..., Any]]:
    """One (sync, async) TRL reward function over `WeightedRubric(parts)` (see module doc: use it
    instead of one function per part, so that an unverified part keeps the sample out of the
    baseline instead of counting as 0). `options` as for `trl_reward_functions`."""
    return trl_reward_functions(WeightedRubric(parts), name=name, **options)
