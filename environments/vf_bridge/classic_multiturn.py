"""`load_environment()` for a `MultiTurnTask`: a Verifiers (0.1.9 classic API) `MultiTurnEnv`.

The environment turns come from the task's own `env_step` (same `EpisodeContext`, same rubric, same
per-episode `state`), and the reward is the task's `final_sample` + `finalize`, so `vf-eval` /
prime-rl episodes are the ones `serve` / `process` / `evaluate` run. An environment failure raises
`vf.InfraError` (the rollout stops) and the reward is NaN, never 0: NaN keeps the rollout out of
training (see `rubrics/adapters/verifiers.py`). When a rollout stops, however it stops, the task's
`end_episode` releases what the episode held (a `@vf.cleanup`, before scoring; a failure there is
logged, never the episode's). Token accounting is Verifiers' own here. `mixins` (classes placed
before `vf.MultiTurnEnv`, calling `super()`) add behaviour, e.g. tools (`classic_tool_env.py`).
"""

from __future__ import annotations

import logging
import math
from typing import Any

from environments.atropos_runtime.episodes import EpisodeContext, MultiTurnTask
from environments.vf_bridge import compat as vf_compat
from environments.vf_bridge.classic_front import _dataset, task_splits

log = logging.getLogger("rlvr")


def build_multiturn_env(task: MultiTurnTask, mixins: tuple[type, ...] = (), **env_kwargs: Any) -> Any:
    """A `verifiers.MultiTurnEnv` over the task's splits; episodes stepped by `task.env_step`."""
    vf = vf_compat.require("classic")  # a clear ImportError on verifiers 0.4 (v1 only) or none
    splits = task_splits(task)
    by_uid = {it.uid: it for items in splits.values() for it in items}
    rubric = task.rubric()
    cleanup = getattr(vf, "cleanup", lambda f: f)  # 0.1.9.post2 may lack it: sessions end with `generate`

    def context(state: Any, messages: list) -> EpisodeContext:
        item = by_uid[state["info"]["uid"]]
        turns = sum(m.get("role") == "assistant" for m in messages)
        return EpisodeContext(
            item, list(messages), state["rlvr_state"], turns, task.turn_budget(), rubric, "train"
        )

    class TaskMultiTurnEnv(*mixins, vf.MultiTurnEnv):  # type: ignore[misc]
        async def setup_state(self, state: Any) -> Any:
            state["rlvr_state"] = task.init_state(by_uid[state["info"]["uid"]])
            return await super().setup_state(state)

        async def env_response(self, messages: Any, state: Any, **kwargs: Any) -> Any:
            ctx = context(state, [as_message(m) for m in messages])
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

        @cleanup
        async def rlvr_end_episode(self, state: Any) -> None:
            if state.get("rlvr_ended") or "rlvr_state" not in state:
                return
            state["rlvr_ended"] = True
            try:
                await task.end_episode(context(state, _messages_so_far(state)))
            except Exception as exc:  # noqa: BLE001 - the episode's outcome stands
                log.warning("releasing an episode's resources failed: %s: %s", type(exc).__name__, exc)

    async def episode_reward(
        prompt: Any, completion: Any, answer: Any, state: Any = None, info: Any = None
    ) -> float:
        if state.get("rlvr_failure"):
            return math.nan
        ctx = context(state, [as_message(m) for m in [*prompt, *completion]])
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


def _messages_so_far(state: Any) -> list[dict[str, Any]]:
    """The conversation of a rollout that is stopping (its last turn's prompt and completion)."""
    steps = state.get("trajectory") or []
    messages = [*steps[-1]["prompt"], *steps[-1]["completion"]] if steps else list(state.get("prompt") or [])
    return [as_message(m) for m in messages]


def as_message(message: Any) -> dict[str, Any]:
    """A Verifiers message as an OpenAI chat dict (0.2+ messages are pydantic models, their tool calls
    `{id, name, arguments}`: those become `{id, type, function: {name, arguments}}`)."""
    m = message.model_dump() if hasattr(message, "model_dump") else dict(message)
    if m.get("tool_calls"):
        m["tool_calls"] = [_openai_call(c) for c in m["tool_calls"]]
    return m


def _openai_call(call: Any) -> dict[str, Any]:
    c = call.model_dump() if hasattr(call, "model_dump") else dict(call)
    if "function" in c:
        return c
    function = {"name": c.get("name"), "arguments": c.get("arguments")}
    return {"id": c.get("id", ""), "type": "function", "function": function}
