"""Rollouts (policy samples with their exact tokens) and their assembly into Atropos groups.

One code path for all three modes: `sample_group` asks the inference server for `n` completions of
one prompt (through atroposlib's ManagedServer when the server returns token ids and logprobs,
otherwise through plain chat completions), and `assemble_group` turns rollouts + rubric results into
a ScoredDataGroup, or says why the group must be dropped.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from environments.atropos_runtime.checks import group_violations
from environments.atropos_runtime.server_health import InferenceWatcher, within
from rubrics.core import RewardResult, Status


class DropReason:
    """Why a group never reached the trainer / output file (counted and logged)."""

    IDENTICAL = "identical_scores"
    TOO_LONG = "too_long"
    MALFORMED = "malformed"
    ERROR = "error"
    TIMEOUT = "timeout"


@dataclass(frozen=True)
class Rollout:
    """One sampled completion. Token fields are None when the server cannot return token ids."""

    text: str
    finish_reason: str
    tokens: list[int] | None = None  # prompt + completion, exactly as sampled
    masks: list[int] | None = None  # -100 on the prompt, the token id on the completion
    logprobs: list[float] | None = None  # 1.0 on the prompt, the sampling logprob on the completion

    @property
    def truncated(self) -> bool:
        return self.finish_reason == "length"


async def sample_group(
    server: Any,
    tokenizer: Any,
    messages: Sequence[Mapping[str, Any]],
    n: int,
    sampling: Mapping[str, Any],
    token_capable: bool,
    timeout_s: float,
    split: str = "train",
    watcher: InferenceWatcher | None = None,
) -> list[Rollout]:
    """`n` rollouts of one prompt. Raises `asyncio.TimeoutError` after `timeout_s` (no silent hangs);
    with a `watcher`, time during which the inference server was down does not count."""
    kwargs = dict(messages=list(messages), n=n, split=split, **sampling)
    if token_capable:
        async with server.managed_server(tokenizer=tokenizer) as managed:
            completion = await within(managed.chat_completion(**kwargs), timeout_s, watcher)
            nodes = managed.get_state()["nodes"]
        if len(nodes) != len(completion.choices):
            raise RuntimeError(f"{len(completion.choices)} choices but {len(nodes)} tracked sequences")
        return [
            Rollout(
                text=choice.message.content or "",
                finish_reason=str(choice.finish_reason),
                tokens=list(node.tokens),
                masks=list(node.masked_tokens),
                logprobs=list(node.logprobs),
            )
            for choice, node in zip(completion.choices, nodes, strict=True)
        ]
    completion = await within(server.chat_completion(**kwargs), timeout_s, watcher)
    return [
        Rollout(text=choice.message.content or "", finish_reason=str(choice.finish_reason))
        for choice in completion.choices
    ]


def unverified_reason(results: Sequence[RewardResult]) -> str | None:
    """The drop reason if any result could not be verified (timeout wins over error)."""
    statuses = {r.status for r in results if not r.verified}
    if not statuses:
        return None
    return DropReason.TIMEOUT if Status.TIMEOUT in statuses else DropReason.ERROR


@dataclass
class GroupOutcome:
    """A group for the output (or None), the drop reason, and (set by `RubricEnv.group_for`) the
    `rejected` record of what was left out (`environments.output.rejected_record`)."""

    group: dict[str, Any] | None
    drop: str | None = None
    detail: str = ""
    rejected: dict[str, Any] | None = None


def assemble_group(
    messages: Sequence[Mapping[str, Any]],
    rollouts: Sequence[Rollout],
    results: Sequence[RewardResult],
    generation_params: Mapping[str, Any],
    *,
    group_size: int,
    training: bool,
    ensure_scores_differ: bool,
    max_token_len: int = -1,
    bos_token_id: int | None = None,
    eos_token_id: int | None = None,
) -> GroupOutcome:
    """Build a ScoredDataGroup from rollouts and their rewards, or a drop reason.

    Unverified samples never enter a group. For training the whole group is dropped (the trainer's
    batch packing needs full groups); otherwise the verified subset is kept. Training groups must
    carry token ids and logprobs and pass every alignment invariant.
    """
    keep = [i for i, r in enumerate(results) if r.verified]
    reason = unverified_reason(results)
    if reason and (training or not keep):
        bad = next(r for r in results if not r.verified)
        return GroupOutcome(None, reason, bad.reason)
    scores = [float(results[i].score) for i in keep]  # type: ignore[arg-type]
    if ensure_scores_differ and len(set(scores)) <= 1:
        return GroupOutcome(None, DropReason.IDENTICAL, f"all {len(scores)} scores are {scores[0]}")
    exact = all(rollouts[i].tokens is not None for i in keep)
    group: dict[str, Any] = {
        "tokens": [rollouts[i].tokens for i in keep] if exact else [],
        "masks": [rollouts[i].masks for i in keep] if exact else [],
        "inference_logprobs": [rollouts[i].logprobs for i in keep] if exact else None,
        "scores": scores,
        "messages": [[*messages, {"role": "assistant", "content": rollouts[i].text}] for i in keep],
        "generation_params": dict(generation_params),
        "overrides": [{"set_advantage_to_zero": True} if rollouts[i].truncated else {} for i in keep],
        "group_overrides": {} if len(keep) == group_size else {"group_size": len(keep)},
        "advantages": None,
        "ref_logprobs": None,
        "images": None,
    }
    if training and not exact:
        return GroupOutcome(None, DropReason.MALFORMED, "no token ids/logprobs from the server")
    if exact and max_token_len > 0 and any(len(t) >= max_token_len for t in group["tokens"]):
        longest = max(len(t) for t in group["tokens"])
        return GroupOutcome(None, DropReason.TOO_LONG, f"{longest} tokens >= max_token_len {max_token_len}")
    if exact:
        problems = group_violations(
            group, max_token_len=max_token_len, bos_token_id=bos_token_id, eos_token_id=eos_token_id
        )
        if problems:
            return GroupOutcome(None, DropReason.MALFORMED, "; ".join(problems))
    return GroupOutcome(group)
