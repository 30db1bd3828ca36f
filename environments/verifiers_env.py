"""Any classic Verifiers environment in Atropos: `python environments/verifiers_env.py
serve|process|evaluate --env.vf_env_name <id> --env.env_args '<json>'`.

The environment is loaded with `vf.load_environment(id, **env_args)` (classic API: verifiers
0.1.9.post2 .. 0.3.x, messages as dicts or pydantic as the version wants; on 0.4 / none one
`VerifiersBridgeError` says why, from `environments.vf_bridge.compat`) and runs
through the project's own runtime, so it gets the same guarantees as our environments: exact
sampled tokens, alignment invariants, tri-state rewards, resumable `process`, `evaluate` files.

* **Rows**: the env's formatted train / eval datasets (an eval-only env has an empty train split;
  the eval split falls back to train as Verifiers does). Each row's `prompt, answer, task, info,
  example_id` becomes an `Item` (uid = `example_id`).
* **Rollouts**: every env (SingleTurnEnv is a MultiTurnEnv with `max_turns=1`) runs as episodes of
  `environments.atropos_runtime.episodes` (token-in/token-out, context carried as exact ids). After each assistant
  turn the env's own Verifiers state gets the turn (`add_trajectory_step`), its stop conditions run
  (`is_completed`, which also runs its `@vf.cleanup` hooks), then `env_response`; a
  `final_env_response` ends the episode (it goes into the scored completion, never to the policy).
  An exception from `setup_state`/`env_response` is an environment failure: unverified, never 0.
* **Sampling**: the env's own `sampling_args` (temperature, top_p, max_tokens /
  max_completion_tokens) override the config's, in every split.
* **Rewards**: the env's OWN rubric scores each group (`rubric.score_group`, so RubricGroups, async
  and group reward functions get their full keyword contract), never `rubric.funcs/weights` read by
  us. Classic Verifiers turns a raising reward function into 0.0; the bridge wraps each function
  once (same name, same signature plus `state`/`states`, so Verifiers' own group detection and
  argument filtering are unchanged) to record failures, non-numeric or NaN results and group
  functions returning the wrong number of values on the failing rollout's own state: that sample
  is unverified (score None, counted in `reward_status/error`, kept out of training groups).
  Rewards are read from each episode's own state object (identity), never paired by position.
* **Tools** (ToolEnv, StatefulToolEnv, any env with `oai_tools` / 0.2+ `tool_defs`, per row by
  Verifiers' own rule): the tool definitions go into the prompt through the chat template's
  `tools=`; each sampled turn is parsed in process by vLLM's tool parser `--env.tool_parser`
  (default hermes; `environments.vf_bridge.tool_calls`) into the OpenAI assistant message Verifiers expects
  (`tool_calls` with JSON-string arguments; 0.2+ normalises it to its pydantic ToolCall); the env's
  own `env_response` runs the tools and its tool messages are rendered after the exact sampled ids
  (masked out). A call whose JSON does not parse reaches the env as a call with the raw text as
  arguments, so the env's own handling answers it (ToolEnv: the JSON error, back to the model; with
  the error type in its `stop_errors`, `vf.ToolParseError` ends the episode, which is scored: the
  model's fault, not the environment's).
* **EnvGroup** (`environments.vf_bridge.classic_group`): each item runs on the sub-env of its
  `task` (its own hooks, turn limit, tools, stop conditions and sampling args over the group's),
  scored by the group's own `EnvGroupRubric`; per-task metrics in `evaluate`'s metrics
  (`eval/task/<task>/...`) and `process`'s summary (`tasks`).
* **Completion mode** (`message_type="completion"`, single- and multi-turn): no chat template; the
  prompt text tokenised as vLLM's `/v1/completions` does, the completion is the sampled ids, string
  env responses appended as their own ids (`environments.vf_bridge.completion_tokens`).
* **Refused loudly** (`VerifiersBridgeError` at construction): completion-mode envs on a text-only
  server, with tools or with `--env.system_prompt`; EnvGroups mixing chat and completion sub-envs
  or whose sub-envs offer different tools; tool envs on a text-only server, without vLLM's tool
  parsers, with an unknown parser or one that does not fit the tokenizer, or with a chat template
  that ignores `tools=`, writes calls the parser does not read back or drops tool results (a tool
  env without its tools would silently score ~0).
* Process hygiene: Verifiers' SIGINT/SIGTERM handlers installed while loading are undone.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib
import inspect
import json
import math
import signal
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from pydantic import Field

from environments.atropos_runtime.base import RubricEnv, RubricEnvConfig
from environments.atropos_runtime.episode_runtime import runner_for, token_budget
from environments.atropos_runtime.episodes import (
    EnvStep,
    Episode,
    EpisodeContext,
    EpisodeRunner,
    MultiTurnTask,
    to_rollout,
)
from environments.atropos_runtime.rollouts import GroupOutcome
from environments.atropos_runtime.sampling_slots import sampling_done
from environments.task import DatasetError, Item, Split
from environments.vf_bridge.classic_group import (
    TaskTally,
    VerifiersBridgeError,
    env_for,
    is_group,
    message_type,
    sampling_args,
    sub_envs,
    task_metrics,
    text_of,
    turn_budget,
)
from environments.vf_bridge.classic_tools import state_tools, tool_names, tool_parser_for, tool_specs
from environments.vf_bridge.compat import VerifiersAPIError, classic_client, require
from environments.vf_bridge.completion_tokens import CompletionTokens
from environments.vf_bridge.tool_calls import ToolCallParser, ToolSupportError
from rubrics.core import RewardResult, Rubric, Sample, Status

PENDING = "pending: scored by the Verifiers rubric after the group"
ERRORS_KEY = "rlvr_reward_errors"


class VerifiersEnvConfig(RubricEnvConfig):
    vf_env_name: str = Field(default="", description="Verifiers environment id (vf.load_environment)")
    env_args: str = Field(default="{}", description="JSON object of load_environment keyword arguments")
    max_turns: int = Field(default=10, description="Turn budget for envs that set none (max_turns <= 0)")
    max_episode_tokens: int | None = Field(default=None, description="Token budget of one episode")
    tool_parser: str = Field(
        default="hermes",
        description="Tool envs: vLLM tool parser of the model's family (hermes, llama3_json, mistral, ...)",
    )


def load_vf_env(name: str, env_args: str | Mapping[str, Any]) -> Any:
    """`vf.load_environment(name, **env_args)`, checked for what the bridge can run."""
    try:
        vf = require("classic")
    except VerifiersAPIError as exc:
        raise VerifiersBridgeError(
            f"this bridge class runs classic Verifiers environments (verifiers 0.1.9.post2 .. 0.3.x; v1 "
            f"Tasksets run through environments/vf_bridge/v1_env.py): {exc}"
        ) from exc
    if not name:
        raise VerifiersBridgeError("--env.vf_env_name is required (a Verifiers environment id)")
    args = json.loads(env_args) if isinstance(env_args, str) else dict(env_args)
    if not isinstance(args, dict):
        raise VerifiersBridgeError(f"--env.env_args must be a JSON object, got {env_args!r}")
    handlers = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        env = vf.load_environment(name, **args)
    finally:
        for sig, handler in handlers.items():
            signal.signal(sig, handler)
    message_type(env, name)
    guard_rubric(env.rubric)
    return env


# ------------------------------------------------------------------ reward-function guard
def guard_rubric(rubric: Any) -> None:
    """Wrap every reward function of `rubric` (recursing into RubricGroups and an EnvGroupRubric's
    sub-env rubrics) once, in place."""
    for child in getattr(rubric, "rubrics", None) or []:
        guard_rubric(child)
    for env in (getattr(rubric, "env_map", None) or {}).values():
        guard_rubric(env.rubric)
    funcs = getattr(rubric, "funcs", None) or []
    is_group = getattr(rubric, "_is_group_func", None) or _looks_like_group
    rubric.funcs = [f if getattr(f, "_rlvr_guarded", False) else _guarded(f, is_group(f)) for f in funcs]


def _looks_like_group(func: Callable[..., Any]) -> bool:
    names = {"states", "prompts", "completions", "answers", "tasks", "infos"}
    return bool(names & set(inspect.signature(func).parameters))


def _guarded(func: Callable[..., Any], is_group: bool) -> Callable[..., Any]:
    """`func` with the same name and signature (plus `state`/`states` if it lacks them), recording
    a failure on the state(s) it scored before re-raising (Verifiers then logs it and uses 0.0)."""
    sig = inspect.signature(func)
    key = "states" if is_group else "state"
    var_kw = any(p.kind is p.VAR_KEYWORD for p in sig.parameters.values())
    added = not var_kw and key not in sig.parameters
    if added:
        extra = inspect.Parameter(key, inspect.Parameter.KEYWORD_ONLY, default=None)
        sig = sig.replace(parameters=[*sig.parameters.values(), extra])
    name = getattr(func, "__name__", type(func).__name__)

    async def guarded(*args: Any, **kwargs: Any) -> Any:
        target = kwargs.pop(key) if added else kwargs.get(key)
        try:
            value = func(*args, **kwargs)
            if inspect.isawaitable(value):
                value = await value
            _check(value, target, is_group)
        except Exception as exc:
            for state in target if is_group else [target]:
                if isinstance(state, dict):
                    state.setdefault(ERRORS_KEY, []).append(f"{name}: {type(exc).__name__}: {exc}")
            raise
        return value

    guarded.__name__ = guarded.__qualname__ = name
    guarded.__signature__ = sig  # type: ignore[attr-defined]
    guarded._rlvr_guarded = True  # type: ignore[attr-defined]
    return guarded


def _check(value: Any, target: Any, is_group: bool) -> None:
    values = list(value) if is_group else [value]
    if is_group and target is not None and len(values) != len(target):
        raise ValueError(f"returned {len(values)} values for {len(target)} rollouts")
    for v in values:
        if isinstance(v, bool) or not isinstance(v, int | float) or math.isnan(float(v)):
            raise TypeError(f"returned {v!r}, not a number")


# ------------------------------------------------------------------ task
class _PendingRubric(Rubric):
    """What the episode runner calls per episode; the real scoring is the group's (see below)."""

    name = "verifiers"

    async def _score(self, sample: Sample) -> RewardResult:
        return RewardResult(score=0.0, reason=PENDING)


class VerifiersTask(MultiTurnTask):
    """A loaded Verifiers environment as a `MultiTurnTask` (see module docstring)."""

    config: VerifiersEnvConfig

    def __init__(self, config: VerifiersEnvConfig) -> None:
        super().__init__(config)
        self.vf_env = load_vf_env(config.vf_env_name, config.env_args)
        self.completion = message_type(self.vf_env, config.vf_env_name) == "completion"
        self.normalize = _message_normalizer()
        # init_state wants a client (0.2+ validates its type); the bridge never calls it: the model
        # is sampled by the runtime. A closed loopback port, so a stray call fails at once.
        from openai import AsyncOpenAI  # the SDK itself only here (Verifiers imports it anyway)

        self.placeholder_client = classic_client(AsyncOpenAI(base_url="http://127.0.0.1:9/v1", api_key="x"))
        self.tool_parser: ToolCallParser | None = None  # set by VerifiersEnv for tool envs
        self.parse_tools: list[dict[str, Any]] = []

    def turn_budget(self) -> int:
        return turn_budget(self.vf_env, self.config.max_turns)

    def env_of(self, item: Item) -> Any:
        """The (sub-)environment that runs `item` (an EnvGroup's sub-env of its task)."""
        return env_for(self.vf_env, item.info["vf_input"].get("task"))

    def sampling_args(self, item: Item | None) -> dict[str, Any]:
        """The env's own sampling args for `item` (an EnvGroup: the group's under its sub-env's)."""
        if item is None or not is_group(self.vf_env):
            return dict(getattr(self.vf_env, "sampling_args", None) or {})
        return sampling_args(self.vf_env, item.info["vf_input"].get("task"))

    def to_vf(self, messages: list[dict[str, Any]]) -> Any:
        """A conversation as this Verifiers wants it: the joined text in completion mode, else messages."""
        return text_of(messages) if self.completion else self.normalize(messages)

    def rows(self, split: Split) -> Iterable[Mapping[str, Any]]:
        data = self.vf_env.dataset if split == "train" else self.vf_env.eval_dataset or self.vf_env.dataset
        return [] if data is None else data

    def item(self, row: Mapping[str, Any], index: int) -> Item:
        prompt = row.get("prompt")
        if self.completion:
            if not isinstance(prompt, str):
                raise DatasetError(f"completion-mode prompt is not a string: {str(prompt)[:80]!r}")
            prompt = [{"role": "user", "content": prompt}]  # a label only: no template renders it
        elif not isinstance(prompt, list) or not all(isinstance(m, dict) and "role" in m for m in prompt):
            raise DatasetError(f"prompt is not a list of chat messages: {str(prompt)[:80]!r}")
        example_id = row.get("example_id", index)
        vf_input = {k: row[k] for k in ("prompt", "answer", "task", "info") if k in row}
        vf_input["example_id"] = example_id
        tools = tool_specs(env_for(self.vf_env, row.get("task")), row.get("info"))
        return Item(str(example_id), prompt, row.get("answer", ""), {"vf_input": vf_input, "tools": tools})

    def tools(self, item: Item) -> list[dict[str, Any]] | None:
        return item.info.get("tools") or None

    def env_tools(self) -> list[dict[str, Any]]:
        """The env-level tool definitions (what `--env.tool_parser` and the template must carry);
        an EnvGroup's sub-envs must agree on them (`VerifiersBridgeError` otherwise)."""
        per_env = [tool_specs(e, None) for e in sub_envs(self.vf_env)]
        if any(tool_names(t) != tool_names(per_env[0]) for t in per_env):
            names = [tool_names(t) for t in per_env]
            raise VerifiersBridgeError(
                f"{self.config.vf_env_name}: the EnvGroup's sub-envs offer different tools {names}; the "
                "bridge parses a run's tool calls with one tool list"
            )
        return per_env[0]

    def assistant_message(self, content: str) -> dict[str, Any]:
        """The sampled text as Verifiers' assistant message: with `tool_calls` parsed by the tool parser
        (a tool env) or plain content."""
        if self.tool_parser is None:
            return super().assistant_message(content)
        return self.tool_parser.parse(content, self.parse_tools).message()

    def rubric(self) -> Rubric:
        return _PendingRubric()

    async def vf_state(self, item: Item, holder: dict[str, Any]) -> Any:
        """The episode's own Verifiers state (built on first use: `init_state` + `setup_state`)."""
        if "vf" not in holder:
            vf_input, env = dict(item.info["vf_input"]), self.env_of(item)
            state = await env.init_state(vf_input, self.placeholder_client, "policy", None)
            holder["vf"] = state  # set first: a failing setup_state still leaves the state to inspect
            holder["vf"] = await env.setup_state(state) or state  # 0.3 may return None
        return holder["vf"]

    async def record_turns(
        self, env: Any, state: Any, messages: list[dict[str, Any]], truncated: bool = False
    ) -> None:
        """Give the Verifiers state every assistant turn it has not seen yet (`env`'s own
        `add_trajectory_step` hook)."""
        from verifiers.types import TrajectoryStep

        turns = [k for k, m in enumerate(messages) if m["role"] == "assistant"]
        for k in turns[len(state["trajectory"]) :]:
            step = TrajectoryStep(prompt=self.to_vf(messages[:k]), completion=self.to_vf([messages[k]]),
                                  response=None, tokens=None,
                                  reward=None, advantage=None, is_truncated=truncated,
                                  trajectory_id=state["trajectory_id"], extras={})  # fmt: skip
            await env.add_trajectory_step(state, step)

    async def env_step(self, ctx: EpisodeContext) -> EnvStep:
        state, env = await self.vf_state(ctx.item, ctx.state), self.env_of(ctx.item)
        offered, own = tool_names(self.tools(ctx.item) or []), tool_names(state_tools(state))
        if offered != own:
            return EnvStep(failure=f"the prompt offered tools {offered}, the Verifiers state has {own}")
        messages = [dict(m) for m in ctx.messages]
        await self.record_turns(env, state, messages)
        if await env.is_completed(state):
            return self._done(state)
        try:
            reply = await env.env_response(self.to_vf(messages), state)
        except Exception as exc:
            if isinstance(exc, getattr(require("classic"), "ToolParseError", ())):
                # a tool env's `stop_errors` stop on the MODEL's unparseable call: scored, not unverified
                state["rlvr_tool_parse_error"] = (
                    f"{type(exc.__cause__ or exc).__name__}: {exc.__cause__ or exc}"
                )
                return EnvStep(done=True, reason="vf:tool_parse_error")
            raise
        if state.get("final_env_response") is not None:
            await env.is_completed(state)  # fires has_final_env_response and the cleanups
            return self._done(state)
        if isinstance(reply, str):  # completion mode: the env's text follows the sampled ids
            return EnvStep(messages=[{"role": "user", "content": reply}] if reply else [])
        return EnvStep(messages=[_as_dict(m) for m in reply or []])

    def _done(self, state: Any) -> EnvStep:
        if state.get("error") is not None:
            return EnvStep(failure=f"verifiers state error: {state['error']!r}")
        return EnvStep(done=True, reason=f"vf:{state.get('stop_condition') or 'done'}")

    async def score_episodes(self, episodes: list[Episode], timeout_s: float) -> None:
        """Score the group's pending episodes with the env's own rubric; set each `ep.result` from
        its own state."""
        pending = []
        for ep in episodes:
            if ep.result is None or ep.result.reason != PENDING:
                continue
            try:
                state, env = await self.vf_state(ep.item, ep.state), self.env_of(ep.item)
                await self.record_turns(env, state, ep.messages, ep.truncated)
                state["is_truncated"] = bool(state.get("is_truncated")) or ep.truncated
                await env.render_completion(state)
            except Exception as exc:  # noqa: BLE001 - the env's hooks failed: this episode only
                ep.result = RewardResult.unverified(
                    Status.ERROR, f"verifiers state: {type(exc).__name__}: {exc}"
                )
            else:
                pending.append(ep)
        if not pending:
            return
        states = [ep.state["vf"] for ep in pending]
        rubric = self.vf_env.rubric  # an EnvGroup's EnvGroupRubric routes to the sub-env's by task
        args = {"score_sem": contextlib.nullcontext()} if "score_sem" in inspect.signature(rubric.score_group).parameters else {}  # fmt: skip
        try:
            await asyncio.wait_for(rubric.score_group(states, **args), timeout_s)
        except asyncio.TimeoutError:
            for ep in pending:
                ep.result = RewardResult.unverified(Status.TIMEOUT, f"scoring took longer than {timeout_s}s")
            return
        except Exception as exc:  # noqa: BLE001 - the rubric itself failed: the whole group is unverified
            for ep in pending:
                ep.result = RewardResult.unverified(
                    Status.ERROR, f"verifiers rubric: {type(exc).__name__}: {exc}"
                )
            return
        for ep in pending:
            ep.result = result_of(ep.state["vf"])


def _message_normalizer() -> Callable[[list[dict[str, Any]]], Any]:
    """Messages as this Verifiers wants them: dicts on 0.1.x, pydantic messages on 0.2+."""
    for module in ("verifiers.utils.message_utils", "verifiers.legacy.utils.message_utils"):
        with contextlib.suppress(ImportError):
            normalize = getattr(importlib.import_module(module), "normalize_messages", None)
            if normalize is not None:
                return normalize
    return lambda messages: messages


def _as_dict(message: Any) -> dict[str, Any]:
    """An env message for the episode (and the chat template): role, content and, for tool results,
    `tool_call_id` / `name`."""
    raw = message.model_dump(exclude_none=True) if hasattr(message, "model_dump") else dict(message)
    return {k: v for k, v in raw.items() if k in ("role", "content", "tool_call_id", "name")}


def result_of(state: Mapping[str, Any]) -> RewardResult:
    """The RewardResult of one scored Verifiers state (its own reward, metrics and failures)."""
    errors = state.get(ERRORS_KEY) or []
    if errors:
        return RewardResult.unverified(Status.ERROR, "reward function failed: " + "; ".join(errors))
    if state.get("error") is not None:
        return RewardResult.unverified(Status.ERROR, f"verifiers state error: {state['error']!r}")
    reward = state.get("reward")
    if not isinstance(reward, int | float) or math.isnan(float(reward)):
        return RewardResult.unverified(Status.ERROR, f"the rubric set no numeric reward ({reward!r})")
    metrics = {k: float(v) for k, v in (state.get("metrics") or {}).items() if isinstance(v, int | float)}
    return RewardResult(score=float(reward), components=metrics)


# ------------------------------------------------------------------ env
class VerifiersEnv(RubricEnv):
    name = "verifiers"
    env_config_cls = VerifiersEnvConfig
    task_cls = VerifiersTask
    task: VerifiersTask

    def __init__(self, config: VerifiersEnvConfig, server_configs: Any, **kwargs: Any) -> None:
        super().__init__(config, server_configs, **kwargs)
        self.task_tally = TaskTally()  # an EnvGroup's scored samples per task (summary_extra)
        vf_env = self.task.vf_env
        tools = self.task.env_tools() or next(
            (t for split in ("train", "eval") for row in self.task.rows(split)
             if (t := tool_specs(env_for(vf_env, row.get("task")), row.get("info")))),
            [],
        )  # fmt: skip
        if self.task.completion:
            why = ("it has tools" if tools else "the server is text-only" if not self.token_capable
                   else "--env.system_prompt is set" if config.system_prompt is not None else "")  # fmt: skip
            if why:
                raise VerifiersBridgeError(
                    f"{config.vf_env_name} is a completion-mode environment, but {why} (completion "
                    "envs need a token server, server_type vllm/sglang, no tools and no system prompt)"
                )
        if tools:
            try:
                parser = tool_parser_for(self.config.tool_parser, self.tokenizer, self.token_capable, tools)
            except ToolSupportError as exc:
                what = f"{config.vf_env_name} is a tool environment (tools {tool_names(tools)})"
                raise VerifiersBridgeError(f"{what}, but {exc}") from exc
            self.task.tool_parser, self.task.parse_tools = parser, tools

    def generation_params(self, split: str = "train", item: Item | None = None) -> dict[str, Any]:
        """The config's sampling, overridden by the env's own `sampling_args` (an EnvGroup's item:
        its sub-env's over the group's; without `item`, the group's)."""
        params = super().generation_params(split)
        own = self.task.sampling_args(item)
        for key in ("temperature", "top_p"):
            if own.get(key) is not None:
                params[key] = float(own[key])
        max_tokens = own.get("max_tokens") or own.get("max_completion_tokens")
        if max_tokens:
            params["max_tokens"] = int(max_tokens)
        return params

    async def rollout_and_score(
        self, item: Item, n: int, split: str = "train"
    ) -> tuple[list, list[RewardResult]]:
        runner = self.episode_runner()
        runner.token_budget = token_budget(self)
        episodes = await runner.run_group(item, n, self.generation_params(split, item), split)
        sampling_done()  # scoring does not hold the group's sampling slot (process mode)
        await self.task.score_episodes(episodes, self.config.score_timeout_s)
        results = [ep.result for ep in episodes]
        assert all(r is not None and r.reason != PENDING for r in results)
        self.statuses.update(r.status.value for r in results)  # type: ignore[union-attr]
        if split == "train" and is_group(self.task.vf_env):
            for r in results:
                self.task_tally.add(str(item.info["vf_input"].get("task")), r.score, r.components)  # type: ignore[union-attr]
        return [to_rollout(ep, runner.chat) for ep in episodes], results  # type: ignore[return-value]

    def episode_runner(self) -> EpisodeRunner:
        """`runner_for(self)`; a completion-mode env's runner tokenises with `CompletionTokens`."""
        runner = getattr(self, "_episode_runner", None)
        if self.task.completion and (runner is None or runner.rubric is not self.rubric):
            assert self.rubric is not None, "setup() not called"
            self._episode_runner = EpisodeRunner(
                self.task, self.server, CompletionTokens(self.tokenizer), self.rubric,
                token_budget=token_budget(self), request_timeout_s=self.config.request_timeout_s,
                step_timeout_s=self.config.score_timeout_s,
            )  # fmt: skip
        return runner_for(self)

    async def group_for(self, item: Item, training: bool) -> GroupOutcome:
        """`RubricEnv.group_for`, the group carrying the sampling its item ran with (an EnvGroup's
        items differ: run-api's trainer reads the temperature from it)."""
        outcome = await super().group_for(item, training)
        if outcome.group is not None and is_group(self.task.vf_env):
            outcome.group["generation_params"].update(self.generation_params("train", item))
        return outcome

    def summary_extra(self) -> dict[str, Any]:
        """What `process` adds to its summary: an EnvGroup's per-task metrics (`TaskTally.rows` over
        every train sample this run scored, unverified ones counted) and sampling."""
        if not is_group(self.task.vf_env):
            return {}
        rows: dict[str, dict[str, Any]] = dict(self.task_tally.rows())
        for it in self.train_items:
            task = str(it.info["vf_input"].get("task"))
            if task in rows:
                rows[task]["sampling"] = self.generation_params("train", it)
        return {"tasks": rows}

    async def evaluate_log(self, metrics: dict, *args: Any, **kwargs: Any) -> Any:
        """atroposlib's `evaluate_log`, with an EnvGroup's per-task means (`task_metrics`)."""
        if is_group(self.task.vf_env):
            tasks = {it.uid: str(it.info["vf_input"].get("task")) for it in self.eval_items}
            metrics = {**metrics, **task_metrics(kwargs.get("samples") or [], tasks)}
        return await super().evaluate_log(metrics, *args, **kwargs)


if __name__ == "__main__":
    from environments.vf_bridge.dispatch import bridge_for  # a v1 Taskset id runs in its own v1 Env

    bridge_for(VerifiersEnv).cli()
