"""Process-mode output: an append-only, resumable JSONL of groups and a static HTML viewer.

Each JSONL line is one group in atroposlib's `process` shape (`tokens`, `masks`, `scores`,
`messages`, `inference_logprobs`, `overrides`, `group_overrides`, `generation_params`) plus our keys:
`uid` (the group's stable key), `rewards` (every sample's RewardResult as a dict) and
`finish_reasons`. `tokens` are the exact sampled ids when `tokens_exact` is true.

Resuming: `GroupWriter` reads the uids already written, so a re-run neither duplicates nor loses
groups. A torn last line (a crash mid-write) is cut off before appending.
"""

from __future__ import annotations

import html
import json
import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any


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
        self._file = open(self.path, "a", encoding="utf-8")  # noqa: SIM115 - closed in close()

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
        self._file.write(json.dumps(record, ensure_ascii=False) + "\n")
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


def read_groups(path: str | Path) -> Iterator[dict[str, Any]]:
    with open(path, encoding="utf-8") as f:
        for line in f:
            if line.strip():
                yield json.loads(line)


_CSS = """
body{font-family:system-ui,sans-serif;margin:2em;max-width:70em}
details{border:1px solid #ccc;border-radius:6px;margin:.6em 0;padding:.4em .8em}
summary{cursor:pointer;font-weight:600}
.s{border-left:5px solid #999;margin:.6em 0;padding:.2em .8em;background:#fafafa}
.pos{border-color:#2a2}.zero{border-color:#c33}.none{border-color:#e90}
pre{white-space:pre-wrap;word-break:break-word;margin:.3em 0}
.meta{color:#555;font-size:.9em}
.prompt{background:#f4f6fb}
"""


def _turns_html(messages: list[dict[str, Any]]) -> str:
    return "".join(
        f"<div><b>{html.escape(str(m.get('role', '?')))}</b><pre>{html.escape(str(m.get('content', '')))}</pre></div>"
        for m in messages
    )


def _sample_html(messages: list[dict[str, Any]], reward: dict[str, Any] | None, score: Any) -> str:
    value = reward.get("score") if reward else score
    cls = "none" if value is None else ("pos" if value > 0 else "zero")
    meta = f"score={value!r}"
    if reward:
        meta += f" · status={reward.get('status')} · {reward.get('reason', '')}"
    return f'<div class="s {cls}"><div class="meta">{html.escape(meta)}</div>{_turns_html(messages)}</div>'


def _common_prefix(conversations: list[list[dict[str, Any]]]) -> int:
    """How many leading messages all conversations share (at most all but the last of each)."""
    if not conversations:
        return 0
    n = min(len(c) for c in conversations) - 1
    first = conversations[0]
    for i in range(max(n, 0)):
        if any(c[i] != first[i] for c in conversations):
            return i
    return max(n, 0)


def write_html(jsonl_path: str | Path, html_path: str | Path | None = None) -> Path:
    """Render the JSONL as a self-contained HTML page (all model text escaped). Returns its path."""
    src = Path(jsonl_path)
    out = Path(html_path) if html_path else src.with_suffix(".html")
    parts = [
        f"<!doctype html><meta charset=utf-8><title>{html.escape(src.name)}</title><style>{_CSS}</style>"
    ]
    parts.append(f"<h1>{html.escape(src.name)}</h1>")
    for index, group in enumerate(read_groups(src)):
        scores = group.get("scores", [])
        rewards = group.get("rewards") or [None] * len(scores)
        mean = sum(scores) / len(scores) if scores else float("nan")
        conversations = group.get("messages") or []
        # every sample of a group shares the prompt: show it once, then only each sample's own turns
        shared = _common_prefix(conversations)
        prompt = f"<details class=prompt><summary>prompt</summary>{_turns_html(conversations[0][:shared])}</details>"
        samples = prompt if conversations else ""
        samples += "".join(
            _sample_html(msgs[shared:], rew, sc)
            for msgs, rew, sc in zip(conversations, rewards, scores, strict=False)
        )
        title = (
            f"Group {index} · {html.escape(str(group.get('uid')))} · {len(scores)} samples · mean {mean:.3f}"
        )
        parts.append(f"<details><summary>{title}</summary>{samples}</details>")
    out.write_text("".join(parts), encoding="utf-8")
    return out
