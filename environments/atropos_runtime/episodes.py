"""Multi-turn episodes: a `Task` that answers each assistant turn, run with exact tokens.

A task becomes multi-turn by subclassing `MultiTurnTask` and implementing `env_step`: after every
assistant turn it gets an `EpisodeContext` (item, messages so far, per-episode `state`, turn number,
the run's rubric) and returns an `EnvStep`: the next user/tool message(s), or `done`, or a
`failure` (the environment could not step, e.g. sandbox down). A task that does not subclass it stays
single-turn and never touches this module.

`EpisodeRunner.run_group(item, n)` runs `n` episodes of one item concurrently: the first turn of all
`n` is one request (`n` choices of the shared prompt), then each episode goes on by itself, so the
slowest never holds the others. Each turn is sampled token-in/token-out through the ServerManager's
`tokens_and_logprobs_completion` (the call ManagedServer makes, on `VLLMTokenServer` for stock vLLM),
with the context carried forward as exact ids (`environments.atropos_runtime.turn_tokens`). Servers without token ids
(OpenAI-only endpoints) get chat completions of the conversation: text only, never for training.

Stop conditions, checked after each assistant turn in this order: a failed sample (inference error
or timeout: unverified), `finish_reason == "length"` (`truncated`; a task may go on after it with
`stop_on_truncation = False`: the whole end-of-turn text is appended then), an empty answer (`no_answer`: the model stopped answering), the environment's failure (`env_error`:
unverified, counted, dropped) or `done` (its reason, e.g. `solved`), the turn budget (`max_turns`),
the token budget (`token_budget`: the next context would not fit). A turn's `max_tokens` is capped
by what is left of the token budget, so a turn cut by the budget is `truncated` too. An episode with
any truncated turn has `finish_reason` `length`, so training zeroes its advantage.

When an episode stops, however it stops, `task.end_episode(ctx)` releases what it held (e.g. its
tool sessions, `environments/atropos_runtime/tools.py`), before it is scored. Each episode is
scored by its own coroutine on `task.final_sample(ctx)` and the result is stored on the episode
object, so rewards are matched by identity, never by list position.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from abc import abstractmethod
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from environments.atropos_runtime.rollouts import Rollout
from environments.atropos_runtime.server_health import describe, unwrap
from environments.atropos_runtime.turn_tokens import ChatTokens, Segment, assemble, segment_violations
from environments.task import Item, Task
from rubrics.core import RewardResult, Rubric, Sample, Status

log = logging.getLogger("rlvr")


@dataclass
class EnvStep:
    """The environment's answer to one assistant turn. `info` is recorded with the turn (metrics)."""

    messages: list[dict[str, Any]] = field(default_factory=list)
    done: bool = False
    reason: str = ""
    failure: str | None = None
    info: dict[str, Any] = field(default_factory=dict)


@dataclass
class EpisodeContext:
    """What `env_step` sees. `messages` is the conversation so far (derived text: prompt, then each
    assistant turn and environment message); `state` belongs to this episode alone."""

    item: Item
    messages: list[dict[str, Any]]
    state: dict[str, Any]
    turn: int
    max_turns: int
    rubric: Rubric
    split: str

    @property
    def answer(self) -> str:
        """The content of the last assistant turn."""
        return next(
            (str(m.get("content") or "") for m in reversed(self.messages) if m["role"] == "assistant"), ""
        )

    @property
    def last_turn(self) -> bool:
        return self.turn >= self.max_turns


class MultiTurnTask(Task):
    """A `Task` whose episodes continue after the first answer (see module docstring)."""

    max_turns: int = 3
    stop_on_truncation: bool = True

    def turn_budget(self) -> int:
        return int(getattr(self.config, "max_turns", self.max_turns))

    def stops_on_truncation(self) -> bool:
        return bool(getattr(self.config, "stop_on_truncation", self.stop_on_truncation))

    def init_state(self, item: Item) -> dict[str, Any]:
        return {}

    def chat_template(self) -> str | None:
        """The Jinja chat template (its text) episodes render with instead of the tokenizer's own;
        None (default): the tokenizer's."""
        return None

    async def start(self, tokenizer: Any | None) -> None:
        """Called by the env's `setup` (tokenizer: None on a text-only server): start what every
        episode shares (e.g. tool servers). Default: nothing."""

    async def aclose(self) -> None:
        """Called by the env's `aclose`: stop what `start` started. Default: nothing."""

    async def end_episode(self, ctx: EpisodeContext) -> None:
        """Called once an episode stops, however it stops, before it is scored: release what the
        episode held (e.g. its tool sessions). A failure here is logged, never the episode's."""

    @abstractmethod
    async def env_step(self, ctx: EpisodeContext) -> EnvStep:
        """The next environment message(s) after `ctx.answer`, or done, or a failure. May raise:
        an exception is an environment failure (the episode becomes unverified)."""

    def final_sample(self, ctx: EpisodeContext) -> Sample:
        """What the rubric scores at the end (default: the item's gold against every turn after the
        prompt; rubrics grade the last assistant message)."""
        return ctx.item.sample(ctx.messages[len(ctx.item.prompt) :])

    def finalize(self, ctx: EpisodeContext, result: RewardResult) -> RewardResult:
        """Shaping hook on the final reward (default: unchanged)."""
        return result

    def tools(self, item: Item) -> list[dict[str, Any]] | None:
        """The OpenAI tool definitions the episode's prompt offers (rendered by the chat template's
        `tools=`); None for a task without tools."""
        return None

    def assistant_message(self, content: str) -> dict[str, Any]:
        """The conversation message of a sampled turn (override to parse e.g. tool calls; the ids
        stay exactly as sampled either way)."""
        return {"role": "assistant", "content": content}


@dataclass(frozen=True)
class TurnRecord:
    """One assistant turn and the environment's reply (JSONL: `episodes[i].turns`)."""

    content: str
    finish_reason: str
    assistant: Segment | None
    env_messages: list[dict[str, Any]]
    env: Segment | None
    info: dict[str, Any]

    def to_dict(self) -> dict[str, Any]:
        return {
            "content": self.content,
            "finish_reason": self.finish_reason,
            "tokens": list(self.assistant.ids) if self.assistant else None,
            "logprobs": list(self.assistant.logprobs or ()) if self.assistant else None,
            "env_messages": self.env_messages,
            "env_tokens": list(self.env.ids) if self.env else None,
            "info": self.info,
        }


@dataclass(eq=False)
class Episode:
    """One multi-turn episode. Identity (`id`, and the object itself) ties its reward to it."""

    item: Item
    messages: list[dict[str, Any]]
    segments: list[Segment]
    id: str = field(default_factory=lambda: uuid.uuid4().hex[:12])
    turns: list[TurnRecord] = field(default_factory=list)
    stop_reason: str = ""
    result: RewardResult | None = None
    state: dict[str, Any] = field(default_factory=dict)  # the task's per-episode state (ctx.state)

    @property
    def truncated(self) -> bool:
        return any(t.finish_reason == "length" for t in self.turns)

    def to_dict(self) -> dict[str, Any]:
        return {"id": self.id, "stop_reason": self.stop_reason, "turns": [t.to_dict() for t in self.turns]}


@dataclass(frozen=True)
class EpisodeRollout(Rollout):
    """An episode in the shape `assemble_group` takes; `episode` holds the turns."""

    episode: Episode | None = None


@dataclass
class TurnSample:
    """One sampled turn: exact ids and logprobs (token servers) or text only (OpenAI endpoints)."""

    ids: list[int] | None
    logprobs: list[float] | None
    text: str | None
    finish_reason: str


class EpisodeRunner:
    """Runs groups of episodes of a `MultiTurnTask` against a server (see module docstring).

    `server` is atroposlib's ServerManager (or anything with its `tokens_and_logprobs_completion` /
    `chat_completion`); `chat` is None for text-only servers. `sampling` holds temperature, top_p and
    max_tokens (per turn); `token_budget` bounds an episode's whole sequence."""

    def __init__(
        self,
        task: MultiTurnTask,
        server: Any,
        chat: ChatTokens | None,
        rubric: Rubric,
        *,
        token_budget: int,
        request_timeout_s: float = 300.0,
        step_timeout_s: float = 300.0,
    ) -> None:
        self.task, self.server, self.chat, self.rubric = task, server, chat, rubric
        self.token_budget = token_budget
        self.request_timeout_s, self.step_timeout_s = request_timeout_s, step_timeout_s
        self.stops: Counter[str] = Counter()
        self.turns_taken = 0

    async def run_group(
        self, item: Item, n: int, sampling: Mapping[str, Any], split: str = "train"
    ) -> list[Episode]:
        """`n` concurrent episodes of `item`, each with its `result` set (never raises for one
        episode's failure)."""
        prompt = self.chat.prompt(item.prompt, self.task.tools(item)) if self.chat else None
        if prompt is not None and len(prompt.ids) >= self.token_budget:
            raise ValueError(
                f"a prompt of {len(prompt.ids)} tokens leaves no room in the token budget {self.token_budget}"
            )
        episodes = [
            Episode(item, [dict(m) for m in item.prompt], [prompt] if prompt else []) for _ in range(n)
        ]
        try:
            firsts = await self._sample(episodes[0], n, sampling, split)
        except Exception as exc:  # noqa: BLE001 - reported on every episode, never raised
            for ep in episodes:
                self._fail(ep, exc)
            return episodes
        await asyncio.gather(
            *(self._run(ep, first, sampling, split) for ep, first in zip(episodes, firsts, strict=True))
        )
        return episodes

    async def _run(self, ep: Episode, sampled: TurnSample, sampling: Mapping[str, Any], split: str) -> None:
        ctx = EpisodeContext(
            ep.item,
            ep.messages,
            self.task.init_state(ep.item),
            0,
            self.task.turn_budget(),
            self.rubric,
            split,
        )
        ep.state = ctx.state
        try:
            await self._turns(ep, ctx, sampled, sampling, split)
        finally:
            try:
                await asyncio.wait_for(self.task.end_episode(ctx), self.step_timeout_s)
            except Exception as exc:  # noqa: BLE001 - the episode's outcome stands
                log.warning("releasing an episode's resources failed: %s: %s", type(exc).__name__, exc)
        if ep.result is None:
            ep.result = await self._score(ctx)

    async def _turns(
        self, ep: Episode, ctx: EpisodeContext, sampled: TurnSample, sampling: Mapping[str, Any], split: str
    ) -> None:
        """The episode's turns, until it stops (`ep.stop_reason` set; `ep.result` set if unverified)."""
        while True:
            ctx.turn += 1
            self.turns_taken += 1
            segment = self.chat.assistant(sampled.ids or [], sampled.logprobs or []) if self.chat else None
            content = self.chat.content(segment) if segment else (sampled.text or "")
            ep.segments += [segment] if segment else []
            message = self.task.assistant_message(content)
            ep.messages.append(message)
            step = await self._step(ep, ctx, sampled, content)
            env_segment, env_messages = None, []
            if not ep.stop_reason and step.messages and segment is not None:
                extra = set(message) - {"role", "content"}  # e.g. tool_calls: the template needs the message
                try:
                    env_segment, env_messages = self.chat.env_turn(  # type: ignore[union-attr]
                        segment,
                        step.messages,
                        assistant_message=message if extra else None,
                        tools=self.task.tools(ep.item),
                    )
                except Exception as exc:  # noqa: BLE001 - the template refuses the message, or it cannot round-trip
                    reason = f"environment turn cannot be tokenised: {type(exc).__name__}: {exc}"
                    ep.stop_reason, ep.result = "env_error", RewardResult.unverified(Status.ERROR, reason)
                    env_segment, env_messages = None, []
                if (
                    env_segment is not None
                    and sum(len(s.ids) for s in ep.segments) + len(env_segment.ids) >= self.token_budget
                ):
                    ep.stop_reason, env_segment, env_messages = "token_budget", None, []
            elif not ep.stop_reason:
                env_messages = list(step.messages)
            ep.turns.append(
                TurnRecord(content, sampled.finish_reason, segment, env_messages, env_segment, step.info)
            )
            if ep.stop_reason:
                break
            ep.messages.extend(env_messages)
            ep.segments += [env_segment] if env_segment else []
            try:
                sampled = (await self._sample(ep, 1, sampling, split))[0]
            except Exception as exc:  # noqa: BLE001 - this episode only
                self._fail(ep, exc)
                return
        self.stops[ep.stop_reason] += 1

    async def _step(self, ep: Episode, ctx: EpisodeContext, sampled: TurnSample, content: str) -> EnvStep:
        """The environment's step, or none; sets `ep.stop_reason` when the episode ends here."""
        if sampled.finish_reason == "length" and self.task.stops_on_truncation():
            ep.stop_reason = "truncated"
            return EnvStep()
        if not content.strip():
            ep.stop_reason = "no_answer"
            return EnvStep()
        try:
            step = await asyncio.wait_for(self.task.env_step(ctx), self.step_timeout_s)
        except asyncio.TimeoutError:
            step = EnvStep(
                failure=f"environment step took longer than {self.step_timeout_s}s", reason="timeout"
            )
        except Exception as exc:  # noqa: BLE001 - an environment failure, never the model's
            step = EnvStep(failure=f"environment step failed: {type(exc).__name__}: {exc}")
        if step.failure is not None:
            status = Status.TIMEOUT if step.reason == "timeout" else Status.ERROR
            ep.stop_reason, ep.result = "env_error", RewardResult.unverified(status, step.failure)
        elif step.done:
            ep.stop_reason = step.reason or "done"
        elif ctx.last_turn:
            ep.stop_reason = "max_turns"
        elif not step.messages:
            ep.stop_reason = "done"
        return step

    async def _sample(self, ep: Episode, n: int, sampling: Mapping[str, Any], split: str) -> list[TurnSample]:
        kwargs = dict(sampling)
        if self.chat is None:
            call = self.server.chat_completion(messages=list(ep.messages), n=n, split=split, **kwargs)
            completion = await asyncio.wait_for(call, self.request_timeout_s)
            return [
                TurnSample(None, None, c.message.content or "", str(c.finish_reason))
                for c in completion.choices
            ]
        context = [t for seg in ep.segments for t in seg.ids]
        left = self.token_budget - len(context)
        kwargs["max_tokens"] = min(int(kwargs.get("max_tokens", left)), left)
        return await sample_tokens(self.server, context, n, kwargs, split, self.request_timeout_s)

    def _fail(self, ep: Episode, exc: BaseException) -> None:
        timeout = isinstance(exc, asyncio.TimeoutError)
        status = Status.TIMEOUT if timeout else Status.ERROR
        what = (
            f"inference took longer than {self.request_timeout_s}s"
            if timeout
            else f"inference failed: {describe(unwrap(exc))}"  # the server's own words, not a retry wrapper
        )
        ep.stop_reason, ep.result = "inference_error", RewardResult.unverified(status, what)
        self.stops[ep.stop_reason] += 1

    async def _score(self, ctx: EpisodeContext) -> RewardResult:
        try:
            result = await asyncio.wait_for(
                self.rubric.score(self.task.final_sample(ctx)), self.step_timeout_s
            )
        except asyncio.TimeoutError:
            return RewardResult.unverified(Status.TIMEOUT, f"scoring took longer than {self.step_timeout_s}s")
        return self.task.finalize(ctx, result) if result.verified else result


async def sample_tokens(
    server: Any, input_ids: list[int], n: int, sampling: Mapping[str, Any], split: str, timeout_s: float
) -> list[TurnSample]:
    """`n` continuations of exactly `input_ids` (ids + logprobs + finish reason each) through the
    ServerManager's `tokens_and_logprobs_completion`, the call ManagedServer makes. Raises
    `asyncio.TimeoutError` after `timeout_s`, RuntimeError if the server sampled from other ids."""
    call = server.tokens_and_logprobs_completion(input_ids=list(input_ids), n=n, split=split, **sampling)
    prompt_ids, ids, lps, reasons = await asyncio.wait_for(call, timeout_s)
    if list(prompt_ids) != list(input_ids):
        raise RuntimeError("the server sampled from a different context than the one sent")
    if len(ids) != n:
        raise RuntimeError(f"asked for {n} samples, got {len(ids)}")
    return [
        TurnSample(list(i), list(lp), None, r.get("type", "stop") if isinstance(r, dict) else str(r))
        for i, lp, r in zip(ids, lps, reasons, strict=True)
    ]


def to_rollout(ep: Episode, chat: ChatTokens | None) -> EpisodeRollout:
    """The episode as a Rollout (exact tokens when `chat` is set); `finish_reason` is `length` for a
    truncated episode (so training zeroes its advantage)."""
    text = ep.turns[-1].content if ep.turns else ""
    finish = "length" if ep.truncated else "stop"
    if chat is None or not ep.segments:
        return EpisodeRollout(text=text, finish_reason=finish, episode=ep)
    tokens, masks, logprobs = assemble(ep.segments)
    return EpisodeRollout(text, finish, tokens, masks, logprobs, episode=ep)


def episode_violations(chat: ChatTokens, rollout: EpisodeRollout) -> list[str]:
    """The extra multi-turn invariant (see `turn_tokens.segment_violations`)."""
    if rollout.tokens is None or rollout.episode is None:
        return []
    return segment_violations(chat, rollout.episode.segments, rollout.tokens, rollout.masks or [])
