"""Process-mode output: an append-only, resumable JSONL of groups and a static HTML viewer.

Each JSONL line is one group in atroposlib's `process` shape (`tokens`, `masks`, `scores`,
`messages`, `inference_logprobs`, `overrides`, `group_overrides`, `generation_params`) plus our keys
(`VIEW_KEYS`, never sent to a trainer): `uid` (the group's stable key), `item_uid`, `prompt` (the
item's messages), `answer` (the gold answer), `rewards` (every sample's `RewardResult.to_dict()`:
score, status, components, feedback, reason, and where the rubric gives them `tests`, the per-test
records, and `seen`, what it read: the viewer shows them), `finish_reasons`, `prompt_tokens` /
`completion_tokens` (per sample, when token ids are exact) and, for multi-turn tasks, `episodes`
(every turn: text, finish reason, exact ids, the environment's reply). `tokens` are the exact
sampled ids when `tokens_exact` is true.

What never reaches the output goes to `<stem>.dropped.jsonl` (`rejected_record`): a dropped group
with its drop reason, or the unverified samples of a kept group (reason `unverified`).

Resuming: `GroupWriter` reads the uids already written, so a re-run neither duplicates nor loses
groups. A torn last line (a crash mid-write) is cut off before appending.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from environments.atropos_runtime import fast_json


class GroupWriter:
    """Appends one JSON line per group, keyed by `record["uid"]`.

    Each line is flushed to the OS at once (a killed or crashed run loses no written group) and
    fsynced at most every `fsync_every_s` and on close (a power cut loses at most that much; an
    fsync costs ~10 ms here and would stall the event loop on every group). A torn last line is
    cut off when the file is reopened."""

    def __init__(self, path: str | Path, fsync_every_s: float = 1.0) -> None:
        self.path = Path(path)
        self.fsync_every_s = fsync_every_s
        self._synced_at = time.monotonic()
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.done: set[str] = set()
        self._repair_and_index()
        self._file = open(self.path, "ab")  # noqa: SIM115 - closed in close()

    def _repair_and_index(self) -> None:
        if not self.path.exists():
            return
        good_end = 0
        with open(self.path, "rb") as f:
            for line in f:
                if not line.endswith(b"\n"):
                    break
                try:
                    uid = json.loads(line).get("uid")
                except (json.JSONDecodeError, AttributeError):
                    break
                if uid is not None:
                    self.done.add(uid)
                good_end += len(line)
        if good_end < self.path.stat().st_size:
            with open(self.path, "r+b") as f:
                f.truncate(good_end)

    def write(self, record: dict[str, Any]) -> None:
        uid = record["uid"]
        if uid in self.done:
            return
        self._file.write(fast_json.dumps(record) + b"\n")
        self._file.flush()
        if time.monotonic() - self._synced_at >= self.fsync_every_s:
            os.fsync(self._file.fileno())
            self._synced_at = time.monotonic()
        self.done.add(uid)

    def close(self) -> None:
        if not self._file.closed:
            self._file.flush()
            os.fsync(self._file.fileno())
            self._file.close()

    def __enter__(self) -> GroupWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


VIEW_KEYS = (
    "uid", "item_uid", "tokens_exact", "prompt", "answer", "rewards", "finish_reasons",
    "prompt_tokens", "completion_tokens", "episodes",
)  # fmt: skip


def jsonable(value: Any) -> Any:
    """`value` as plain JSON types (anything else as its `str`)."""
    return json.loads(json.dumps(value, default=str))


def token_counts(masks: list[int] | None) -> tuple[int | None, int | None]:
    """(prompt tokens, policy-sampled tokens) of one sequence from its mask (-100 = not sampled);
    an episode's environment turns count in neither. (None, None) without token ids."""
    if masks is None:
        return None, None
    masked = masks.count(-100)
    prompt = next((i for i, m in enumerate(masks) if m != -100), len(masks)) if masked else 0
    return prompt, len(masks) - masked


def sample_record(rollout: Any, result: Any) -> dict[str, Any]:
    """One sample of the dropped file: text, finish reason, reward, token counts, episode turns."""
    prompt_tokens, completion_tokens = token_counts(rollout.masks)
    episode = getattr(rollout, "episode", None)
    record: dict[str, Any] = {
        "text": rollout.text,
        "finish_reason": rollout.finish_reason,
        "reward": result.to_dict() if result is not None else None,
        "prompt_tokens": prompt_tokens,
        "completion_tokens": completion_tokens,
    }
    if episode is not None:
        record["messages"] = episode.messages
        record["episode"] = episode.to_dict()
    return record


def rejected_record(
    item: Any,
    drop: str | None,
    detail: str,
    rollouts: Sequence[Any] = (),
    results: Sequence[Any] = (),
    generation_params: Mapping[str, Any] | None = None,
) -> dict[str, Any] | None:
    """The dropped-file line for one group: every sample when the group was dropped (`reason` is
    the drop reason; no samples when inference failed), else only its unverified samples (`reason`
    `unverified`); None when nothing was left out. The caller adds `uid`."""
    if drop:
        keep = list(range(len(rollouts)))
        reason = drop
    else:
        keep = [i for i, r in enumerate(results) if not r.verified]
        if not keep:
            return None
        reason, detail = "unverified", results[keep[0]].reason
    return {
        "item_uid": item.uid,
        "reason": reason,
        "detail": detail,
        "prompt": jsonable(item.prompt),
        "answer": jsonable(item.answer),
        "generation_params": dict(generation_params or {}),
        "samples": [sample_record(rollouts[i], results[i] if i < len(results) else None) for i in keep],
    }


def read_groups(path: str | Path) -> Iterator[dict[str, Any]]:
    with open(path, encoding="utf-8") as f:
        for line in f:
            if line.strip():
                yield json.loads(line)


def write_html(jsonl_path: str | Path, html_path: str | Path | None = None, tokenizer: Any = None) -> Path:
    """The viewer page for a process JSONL (`environments.atropos_runtime.viewer.write_viewer`). Returns its path."""
    from environments.atropos_runtime.viewer import write_viewer

    return write_viewer(jsonl_path, html_path, tokenizer=tokenizer)
