"""Episodes inside RubricEnv's serve / process / evaluate (the hooks `environments/atropos_runtime/base.py` and
`environments/atropos_runtime/modes.py` call when the task is a `MultiTurnTask`; single-turn tasks never get here).

* `episode_rollouts`: a group of episodes as Rollouts + their own rewards (matched by identity).
* `finish_group`: after `assemble_group` (the single-turn invariants), the group's `messages` become
  the full conversations, `episodes` records every turn (messages and exact ids), and the
  multi-turn invariant (decoded runs == turns) is checked; a violation drops the group as malformed.
* `eval_fields` / `turn_metrics`: what `evaluate` writes per sample and reports per turn.
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Sequence
from typing import Any

from environments.atropos_runtime.env_protocol import RuntimeEnv
from environments.atropos_runtime.episodes import (
    EpisodeRollout,
    EpisodeRunner,
    MultiTurnTask,
    episode_violations,
    to_rollout,
)
from environments.atropos_runtime.rollouts import DropReason, GroupOutcome
from environments.atropos_runtime.turn_tokens import ChatTokens
from rubrics.core import RewardResult

log = logging.getLogger("rlvr")


def runner_for(env: RuntimeEnv) -> EpisodeRunner:
    """The env's EpisodeRunner, built on first use (after `setup`, which builds the rubric)."""
    runner = getattr(env, "_episode_runner", None)
    if runner is None or runner.rubric is not env.rubric:
        assert isinstance(env.task, MultiTurnTask) and env.rubric is not None
        chat = (
            ChatTokens(env.tokenizer, chat_template=env.task.chat_template()) if env.token_capable else None
        )
        if chat is not None and chat.rewrites_history:
            log.warning(
                "the chat template rewrites earlier turns (e.g. drops <think>); episodes keep the exact "
                "sampled ids, so later turns see the model's full earlier turns (environments/atropos_runtime/turn_tokens.py)"
            )
        runner = EpisodeRunner(
            env.task,
            env.server,
            chat,
            env.rubric,
            token_budget=token_budget(env),
            request_timeout_s=env.config.request_timeout_s,
            step_timeout_s=env.config.score_timeout_s,
        )
        env._episode_runner = runner  # type: ignore[attr-defined]
    return runner


def token_budget(env: RuntimeEnv) -> int:
    """Tokens one episode may hold: the config's `max_episode_tokens` (if any) within the trainer's
    `max_token_len` (or the config's `max_token_length`), strictly below it."""
    limit = env.max_token_len if env.max_token_len > 0 else env.config.max_token_length
    own = getattr(env.config, "max_episode_tokens", None)
    return min(limit - 1, own) if own else limit - 1


async def episode_rollouts(
    env: RuntimeEnv, item: Any, n: int, split: str
) -> tuple[list[EpisodeRollout], list[RewardResult]]:
    runner = runner_for(env)
    runner.token_budget = token_budget(env)  # the trainer's /info may arrive after the first group
    episodes = await runner.run_group(item, n, env.generation_params(split), split)
    rollouts = [to_rollout(ep, runner.chat) for ep in episodes]
    results = [ep.result for ep in episodes]
    assert all(r is not None for r in results)
    env.statuses.update(r.status.value for r in results)  # type: ignore[union-attr]
    return rollouts, results  # type: ignore[return-value]


def finish_group(
    env: RuntimeEnv, outcome: GroupOutcome, rollouts: Sequence[Any], results: Sequence[RewardResult]
) -> GroupOutcome:
    group = outcome.group
    if group is None or not rollouts or not isinstance(rollouts[0], EpisodeRollout):
        return outcome
    kept = [r for r, res in zip(rollouts, results, strict=True) if res.verified]
    chat = runner_for(env).chat
    if chat is not None and group["tokens"]:
        problems = [f"episode {k}: {p}" for k, r in enumerate(kept) for p in episode_violations(chat, r)]
        if problems:
            return GroupOutcome(None, DropReason.MALFORMED, "; ".join(problems))
    group["messages"] = [r.episode.messages for r in kept]
    group["episodes"] = [r.episode.to_dict() for r in kept]
    return outcome


def eval_fields(rollout: Any) -> dict[str, Any]:
    """Per-sample evaluate fields of an episode (nothing for a single-turn rollout)."""
    ep = getattr(rollout, "episode", None)
    if ep is None:
        return {}
    return {
        "messages": ep.messages,
        "turns": len(ep.turns),
        "stop_reason": ep.stop_reason,
        "turn_info": [t.info for t in ep.turns],
        "episode": ep.to_dict(),
    }


def turn_metrics(samples: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """evaluate's per-turn metrics: turns used, stop reasons, and the mean of every numeric
    `info` key per turn (`eval/turn{k}/{key}`), over the samples that reached turn k."""
    episodes = [s for s in samples if "turns" in s]
    if not episodes:
        return {}
    out: dict[str, Any] = {"eval/turns_mean": sum(s["turns"] for s in episodes) / len(episodes)}
    out.update({f"eval/stop/{k}": v for k, v in Counter(s["stop_reason"] for s in episodes).items()})
    sums: dict[tuple[int, str], list[float]] = {}
    for s in episodes:
        for k, info in enumerate(s["turn_info"], start=1):
            for key, value in info.items():
                if isinstance(value, bool | int | float):
                    sums.setdefault((k, key), []).append(float(value))
    out.update({f"eval/turn{k}/{key}": sum(v) / len(v) for (k, key), v in sorted(sums.items())})
    return out
