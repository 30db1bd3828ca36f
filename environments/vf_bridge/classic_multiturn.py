"""`load_environment()` for a `MultiTurnTask`: a Verifiers (0.1.9 classic API) `MultiTurnEnv`.

The environment turns come from the task's own `env_step` (same `EpisodeContext`, same rubric, same
per-episode `state`), and the reward is the task's `final_sample` + `finalize`, so `vf-eval` /
prime-rl episodes are the ones `serve` / `process` / `evaluate` run. An environment failure raises
`vf.InfraError` (the rollout stops) and the reward is NaN, never 0: NaN keeps the rollout out of
training (see `rubrics/adapters/verifiers.py`). Token accounting is Verifiers' own here.
"""

from __future__ import annotations

import math
from typing import Any

from environments.atropos_runtime.episodes import EpisodeContext, MultiTurnTask
from environments.vf_bridge import compat as vf_compat
from environments.vf_bridge.classic_front import _dataset, task_splits


def build_multiturn_env(task: MultiTurnTask, **env_kwargs: Any) -> Any:
    """A `verifiers.MultiTurnEnv` over the task's splits; episodes stepped by `task.env_step`."""
    vf = vf_compat.require("classic")  # a clear ImportError on verifiers 0.4 (v1 only) or none
    splits = task_splits(task)
    by_uid = {it.uid: it for items in splits.values() for it in items}
    rubric = task.rubric()

    def context(state: Any, messages: list) -> EpisodeContext:
        item = by_uid[state["info"]["uid"]]
        turns = sum(m.get("role") == "assistant" for m in messages)
        return EpisodeContext(
            item, list(messages), state["rlvr_state"], turns, task.turn_budget(), rubric, "train"
        )

    class TaskMultiTurnEnv(vf.MultiTurnEnv):
        async def setup_state(self, state: Any) -> Any:
            state["rlvr_state"] = task.init_state(by_uid[state["info"]["uid"]])
            return state

        async def env_response(self, messages: Any, state: Any, **kwargs: Any) -> Any:
            ctx = context(state, [dict(m) for m in messages])
            try:
                step = await task.env_step(ctx)
            except Exception as exc:  # noqa: BLE001 - an environment failure, never the model's
                step_failure = f"environment step failed: {type(exc).__name__}: {exc}"
            else:
                step_failure = step.failure
            if step_failure is not None:
                state["rlvr_failure"] = step_failure
                raise vf.InfraError(step_failure)
            state.setdefault("rlvr_turn_info", []).append(step.info)
            if step.done or not step.messages:
                state["final_env_response"] = []
                return []
            return step.messages

    async def episode_reward(
        prompt: Any, completion: Any, answer: Any, state: Any = None, info: Any = None
    ) -> float:
        if state.get("rlvr_failure"):
            return math.nan
        messages = [*prompt, *completion]
        ctx = context(state, messages)
        result = await rubric.score(task.final_sample(ctx))  # the item's own gold (by uid)
        if result.verified:
            result = task.finalize(ctx, result)
        state["rlvr_reward"] = result.to_dict()
        return math.nan if result.score is None else float(result.score)

    episode_reward.__name__ = f"{rubric.name}_episode_reward"
    return TaskMultiTurnEnv(
        max_turns=task.turn_budget(),
        dataset=_dataset(splits["train"] or splits["eval"]),
        eval_dataset=_dataset(splits["eval"] or splits["train"]),
        rubric=vf.Rubric(funcs=[episode_reward], weights=[1.0]),
        **env_kwargs,
    )
