"""A verifiers **v1** Taskset in Atropos (verifiers 0.3.1 .. 0.4.x): `python environments/verifiers_env.py
serve|process|evaluate --env.vf_env_name <taskset id> --env.env_args '<json taskset config>'`.

`verifiers_env.py` dispatches here when the id names a v1 Taskset (`vf_dispatch.bridge_for`; the classic bridge
stays in verifiers_env.py). The taskset runs through its own v1 `Env` and harness loop, in process:
the env is loaded as `vf-eval` loads it (`--env.taskset.id <id>`, the taskset's own `Env` subclass if
its package exports one), with harness `null` (plain chat loop) and runtime `subprocess` by default
(`--env.harness`, `--env.runtime`), nothing pushed anywhere. Its model calls go to our loopback
endpoint (`environments.vf_bridge.v1_endpoint`), which samples the policy token-in/token-out through the
ServerManager and records every turn's exact ids and logprobs per `X-Session-ID` (= the v1 trace id).

* **Items**: the taskset's tasks (`list(env.taskset)`; the same tasks in train and eval; an
  infinite taskset needs `--env.train_limit` / `--env.eval_limit`), uid = the task's stable `key`.
* **Groups**: `group_size` independent v1 episodes of one task (`env.slots(task, n)`, `run_slot`),
  at most `--env.max_concurrent_rollouts` episodes (harness programs) running at once over all groups.
  A group in which a rollout failed because model calls failed (the policy server, HTTP 503 from the
  endpoint) raises, so the runtime treats it as any inference failure (waits out an outage, retries,
  or drops the group as `error`).
* **Identity**: each episode's trace is matched to its token session by trace id, never by position;
  sessions of retried (discarded) traces are dropped.
* **Rewards** are the trace's own: Σ score × weight of `trace.rewards`, metrics as components. A
  trace or episode with `ok=False` or errors (a raising reward: TaskError; a harness failure:
  HarnessError), a None reward, a failed endpoint session (edited history, refused request, token
  budget), a rollout that never called the model, a multi-agent episode (several traces), a reply
  that differs from the recorded tokens or a turn sampled with other parameters than the group's:
  unverified with the reason (never 0), counted in `reward_status/*`, kept out of training groups.
* **Tools** (a taskset's v1 `Toolset`s): v1 serves them over MCP and the harness program (null: its
  chat loop) offers them on each model call; the endpoint renders them through the chat template and
  parses each sampled turn with vLLM's tool parser `--env.tool_parser` (default hermes; the classic
  bridge's `tool_parser_for`), tool results rendered after the exact ids, masked out. Refused at load,
  in one line, where the server, parser or chat template cannot carry tools. A taskset without
  Toolsets gets a harness's own tool offers refused per request (unverified, with the reason).
* The episodes are `environments.atropos_runtime.episodes.Episode`s, so the single-turn alignment invariants and the
  multi-turn masked-in/out invariant (`episode_runtime.finish_group`) check every group.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import itertools
import json
import logging
import math
import os
from collections.abc import Iterable, Mapping
from typing import Any

from pydantic import Field

from environments.atropos_runtime.base import RubricEnv, RubricEnvConfig
from environments.atropos_runtime.episode_runtime import runner_for, token_budget
from environments.atropos_runtime.episodes import EnvStep, Episode, EpisodeContext, MultiTurnTask, to_rollout
from environments.task import Item, Split
from environments.vf_bridge.classic_tools import tool_names, tool_parser_for
from environments.vf_bridge.compat import (
    VerifiersAPIError,
    VerifiersV1Error,
    detect,
    require,
    v1_runner_problem,
)
from environments.vf_bridge.tool_calls import ToolCallParser, ToolSupportError
from environments.vf_bridge.v1_endpoint import MODEL_EVAL, MODEL_TRAIN, ChatEndpoint, Session, SessionStore
from environments.vf_bridge.v1_uv_pin import pin_harness_openai
from rubrics.core import RewardResult, Rubric, Sample, Status

KEY_VAR = "RLVR_V1_ENDPOINT_KEY"


class VerifiersV1EnvConfig(RubricEnvConfig):
    vf_env_name: str = Field(
        default="", description="verifiers v1 taskset id (its module exports one Taskset)"
    )
    env_args: str = Field(default="{}", description="JSON object of taskset config fields (--env.taskset.*)")
    harness: str = Field(default="null", description="v1 harness id (null = plain chat loop)")
    runtime: str = Field(default="subprocess", description="v1 runtime type of the harness program")
    max_episode_tokens: int | None = Field(default=None, description="Token budget of one episode")
    max_concurrent_rollouts: int = Field(
        default=64,
        ge=1,
        description="v1 episodes running at once over all groups (each runs a harness program: with runtime "
        "subprocess, one process per episode)",
    )
    tool_parser: str = Field(
        default="hermes",
        description="Tasksets with v1 tools: vLLM tool parser of the model's family (hermes, llama3_json, ...)",
    )


def load_v1_env(config: VerifiersV1EnvConfig) -> Any:
    """The v1 `Env` for the config (as `vf-eval` builds it), or one clear `VerifiersV1Error`."""
    try:
        require("v1")
    except VerifiersAPIError as exc:
        raise VerifiersV1Error(f"{config.vf_env_name} is a verifiers v1 Taskset: {exc}") from exc
    problem = v1_runner_problem()
    if problem:
        raise VerifiersV1Error(problem)
    pin_harness_openai(detect().version)  # 0.3.x: its harness programs' own uv env, kept on openai<3
    from verifiers.v1.utils.loaders import load_environment, resolve_env_config

    args = json.loads(config.env_args or "{}")
    if not isinstance(args, dict):
        raise VerifiersV1Error(f"--env.env_args must be a JSON object, got {config.env_args!r}")
    env_config = resolve_env_config({
        "taskset": {**args, "id": config.vf_env_name},
        "agent": {"harness": {"id": config.harness}, "runtime": {"type": config.runtime}},
    })  # fmt: skip
    return load_environment(env_config)


def toolset_specs(env: Any) -> list[dict[str, Any]]:
    """OpenAI definitions of the `@vf.tool` methods of the taskset's Toolsets (names and descriptions:
    what the load-time template check needs; the harness sends the MCP schemas on each call). A
    Toolset whose tools are not discoverable here (e.g. an external MCP `url`) adds a probe tool."""
    taskset = env.taskset
    task_type = type(taskset).task_type()
    toolsets = [*type(taskset).toolsets(taskset.config), *task_type.toolsets(taskset.config.task)]
    specs = []
    for toolset in toolsets:
        found = [fn for name in dir(type(toolset)) if hasattr(fn := getattr(toolset, name, None), "tool")]
        for fn in found or [None]:
            name = (getattr(fn, "tool_name", None) or fn.__name__) if fn else f"{type(toolset).__name__}_tool"
            doc = (fn.__doc__ or "").strip() if fn else ""
            specs.append({"type": "function",
                          "function": {"name": name, "description": doc, "parameters": {"type": "object"}}})  # fmt: skip
    return specs


class _UnusedRubric(Rubric):
    """v1 traces carry their own rewards; nothing is scored through a project rubric."""

    name = "verifiers-v1"

    async def _score(self, sample: Sample) -> RewardResult:
        return RewardResult.unverified(Status.ERROR, "v1 rewards come from the trace, not this rubric")


class VerifiersV1Task(MultiTurnTask):
    """The taskset's tasks as Items; episodes run in the v1 Env (`VerifiersV1Env.rollout_and_score`)."""

    config: VerifiersV1EnvConfig

    def __init__(self, config: VerifiersV1EnvConfig) -> None:
        super().__init__(config)
        self.v1_env = load_v1_env(config)
        self.tasks: dict[str, Any] = {}

    def rows(self, split: Split) -> Iterable[Any]:
        taskset = self.v1_env.taskset
        limit = self.config.train_limit if split == "train" else self.config.eval_limit
        if not getattr(taskset, "bounded", True):
            if limit is None:
                raise VerifiersV1Error(f"{self.config.vf_env_name} is an infinite taskset: bound it with "
                                       f"--env.{split}_limit")  # fmt: skip
            return list(itertools.islice(taskset, limit))
        return list(taskset)

    def item(self, row: Any, index: int) -> Item:
        data = row.data
        uid = str(getattr(row, "key", None) or getattr(data, "idx", index))
        self.tasks[uid] = row
        prompt = data.prompt if data.prompt is not None else []
        messages = [{"role": "user", "content": prompt}] if isinstance(prompt, str) else [
            m.model_dump(exclude_none=True) if hasattr(m, "model_dump") else dict(m) for m in prompt
        ]  # fmt: skip
        if data.system_prompt:
            messages = [{"role": "system", "content": data.system_prompt}, *messages]
        return Item(uid, messages, getattr(data, "answer", None), {"v1_task": type(row).__name__})

    def rubric(self) -> Rubric:
        return _UnusedRubric()

    async def env_step(self, ctx: EpisodeContext) -> EnvStep:
        raise NotImplementedError("v1 episodes are played by the v1 Env, not env_step")


def trace_result(
    trace: Any, v1_episode: Any, session: Session | None, sampling: Mapping[str, Any]
) -> RewardResult:
    """The RewardResult of one v1 trace and its token session (see module docstring)."""
    errors = [*v1_episode.errors, *trace.errors]
    if errors:
        first = errors[-1]
        return RewardResult.unverified(Status.ERROR, f"v1 {first.type}: {str(first.message)[:300]}")
    if not (v1_episode.ok and trace.ok):
        return RewardResult.unverified(Status.ERROR, f"v1 trace not ok (stop {trace.stop_condition})")
    if session is None:
        return RewardResult.unverified(Status.ERROR, "the rollout never called the model")
    if session.failure is not None:
        return RewardResult.unverified(Status.ERROR, f"endpoint session: {session.failure}")
    if (trace.last_reply or "").strip() != session.messages[-1]["content"].strip():  # v1 strips last_reply
        return RewardResult.unverified(Status.ERROR, "the trace's last reply is not the recorded last turn")
    for k, turn in enumerate(session.sampling):
        for key in ("temperature", "top_p"):
            if key in sampling and not math.isclose(turn.get(key, float("nan")), float(sampling[key])):
                return RewardResult.unverified(
                    Status.ERROR, f"turn {k + 1} sampled with {key}={turn.get(key)}, not {sampling[key]}"
                )
    missing = [name for name, r in trace.rewards.items() if r is None]
    if missing or not trace.rewards:
        return RewardResult.unverified(
            Status.ERROR, f"v1 rewards without a score: {missing or 'none defined'}"
        )
    total = sum(r.score * r.weight for r in trace.rewards.values())
    components = {f"reward/{n}": float(r.score) for n, r in trace.rewards.items()}
    components |= {n: float(v) for n, v in trace.metrics.items() if isinstance(v, int | float)}
    return RewardResult(score=float(total), components=components)


class VerifiersV1Env(RubricEnv):
    name = "verifiers-v1"
    env_config_cls = VerifiersV1EnvConfig
    task_cls = VerifiersV1Task
    task: VerifiersV1Task
    config: VerifiersV1EnvConfig

    def __init__(self, config: VerifiersV1EnvConfig, server_configs: Any, **kwargs: Any) -> None:
        super().__init__(config, server_configs, **kwargs)
        self.tool_parser: ToolCallParser | None = None
        tools = toolset_specs(self.task.v1_env)
        if tools:
            try:
                self.tool_parser = tool_parser_for(
                    config.tool_parser, self.tokenizer, self.token_capable, tools
                )
            except ToolSupportError as exc:
                raise VerifiersV1Error(
                    f"{config.vf_env_name} gives its rollouts v1 tools {tool_names(tools)}, but {exc}"
                ) from exc

    async def setup(self) -> None:
        if not self.token_capable:
            raise SystemExit(
                "the v1 bridge records exact token ids: use --openai.server_type vllm (stock `vllm serve`) "
                "or sglang"
            )
        await super().setup()
        logging.getLogger("aiohttp.access").setLevel(logging.WARNING)  # v1's interception server, per call
        if getattr(self, "_v1_stack", None) is None:
            os.environ.setdefault(KEY_VAR, "rlvr-loopback")
            self.sessions = SessionStore(runner_for(self).chat, self.server, token_budget(self),
                                         self.config.request_timeout_s, self.tool_parser)  # fmt: skip
            self.rollout_slots = asyncio.Semaphore(self.config.max_concurrent_rollouts)
            self._v1_stack = contextlib.AsyncExitStack()
            self.endpoint = await self._v1_stack.enter_async_context(ChatEndpoint(self.sessions))
            await self._v1_stack.enter_async_context(self.task.v1_env.serving())
        self.sessions.token_budget = token_budget(self)

    async def close_rubric(self) -> None:
        stack, self._v1_stack = getattr(self, "_v1_stack", None), None
        if stack is not None:
            await stack.aclose()
        await super().close_rubric()

    def model_context(self, split: str) -> Any:
        """The rollouts' model: our endpoint, the split's model name, the run's generation params."""
        from verifiers.v1.clients import EvalClientConfig, ModelContext
        from verifiers.v1.types import SamplingConfig

        client = EvalClientConfig(base_url=self.endpoint.base_url, api_key_var=KEY_VAR)
        model = MODEL_EVAL if split == "eval" else MODEL_TRAIN
        return ModelContext(
            client=client, model=model, sampling=SamplingConfig(**self.generation_params(split))
        )

    async def rollout_and_score(
        self, item: Item, n: int, split: str = "train"
    ) -> tuple[list, list[RewardResult]]:
        self.sessions.token_budget = token_budget(self)  # the trainer's /info may come after setup
        env, task = self.task.v1_env, self.task.tasks[item.uid]
        ctx, sampling = self.model_context(split), self.generation_params(split)
        minted: list[list[str]] = [[] for _ in range(n)]

        watch = "on_trace" in inspect.signature(env.run_slot).parameters  # 0.4: every minted trace

        async def one(k: int, slot: Any) -> Any:
            async with self.rollout_slots:
                if not watch:  # 0.3.1: only the final traces are known (a retried trace's session stays until the store's idle TTL)
                    return await env.run_slot(slot, ctx)
                return await env.run_slot(slot, ctx, on_trace=lambda trace: minted[k].append(trace.id))

        v1_episodes = await asyncio.gather(*(one(k, s) for k, s in enumerate(env.slots(task, n))))
        chat = runner_for(self).chat
        rollouts, results, outage = [], [], []
        for v1_episode, ids in zip(v1_episodes, minted, strict=True):
            sessions = {i: self.sessions.pop(i) for i in ids}
            ep, result = self._episode(item, v1_episode, sessions, sampling)
            rollouts.append(to_rollout(ep, chat))
            results.append(result)
            failed_calls = [e for s in sessions.values() if s for e in s.inference_errors]
            if not result.verified and failed_calls:
                outage.append(failed_calls[-1])
        if outage:  # the policy server failed, not the env: the group fails as the runtime's do
            raise RuntimeError(f"{len(outage)} of {n} rollouts lost model calls: {outage[0]}")
        self.statuses.update(r.status.value for r in results)
        return rollouts, results

    def _episode(self, item: Item, v1_episode: Any, sessions: dict[str, Session | None],
                 sampling: Mapping[str, Any]) -> tuple[Episode, RewardResult]:  # fmt: skip
        traces = list(v1_episode.traces)
        if len(traces) != 1:
            ep = Episode(item, [dict(m) for m in item.prompt], [], stop_reason="v1_error")
            why = f"the v1 episode has {len(traces)} traces (one agent run expected)"
            return ep, RewardResult.unverified(Status.ERROR, why)
        trace = traces[0]
        session = sessions.get(trace.id) or self.sessions.pop(trace.id)
        sessions[trace.id] = session
        result = trace_result(trace, v1_episode, session, sampling)
        if session is None:
            return Episode(item, [dict(m) for m in item.prompt], [], stop_reason="v1_error"), result
        stop = session.stop_reason or f"v1:{trace.stop_condition or 'done'}"
        ep = Episode(item, session.messages, session.segments, id=trace.id, turns=session.turns,
                     stop_reason=stop, result=result)  # fmt: skip
        return ep, result


if __name__ == "__main__":
    VerifiersV1Env.cli()
