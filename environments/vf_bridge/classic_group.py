"""`vf.EnvGroup` and completion-mode envs in the classic bridge: which (sub-)environment runs an item,
with which turn limit, sampling args and message type, by Verifiers' own routing rules.

* **Routing**: an EnvGroup (`env_map` + `get_env_for_task`) hands each row to the sub-env of its
  `task` (`EnvGroup.rollout`: `get_env_for_task`, the first sub-env for an unknown task); a plain
  env is its own sub-env. The bridge calls the turn-by-turn hooks (`init_state`, `setup_state`,
  `env_response`, `is_completed`, `add_trajectory_step`, `render_completion`) on that sub-env; the
  group's own rubric (`EnvGroupRubric`: the sub-env's rubric, metrics padded with every sub-env's
  reward names) scores the group.
* **Sampling args**: the group's own `sampling_args`, overridden by the sub-env's own (a sub-env keeps
  the sampling it has when run alone; Verifiers' `EnvGroup.generate` would send only the group's).
* **Message type**: the sub-envs' (`"chat"` or `"completion"`); a group mixing both is refused.
* **Tools**: every sub-env must offer the same env-level tools (the bridge parses a run's tool calls
  with one tool list); a group whose sub-envs differ is refused.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from typing import Any


class VerifiersBridgeError(ValueError):
    """The Verifiers environment cannot run through this bridge (the message says why)."""


def is_group(env: Any) -> bool:
    """True for a `vf.EnvGroup` (or anything routing rows by task the same way)."""
    return isinstance(getattr(env, "env_map", None), Mapping) and hasattr(env, "get_env_for_task")


def sub_envs(env: Any) -> list[Any]:
    """The environments that run episodes: a group's sub-envs, else `[env]`."""
    return list(env.env_map.values()) if is_group(env) else [env]


def env_for(env: Any, task: Any) -> Any:
    """The environment that runs a row with this `task`, by `EnvGroup.rollout`'s own rule."""
    return env.get_env_for_task(task) if is_group(env) else env


def message_type(env: Any, name: str) -> str:
    """`"chat"` or `"completion"`: the sub-envs' message type; `VerifiersBridgeError` when they mix
    both or use another."""
    kinds = {str(getattr(e, "message_type", "chat")) for e in sub_envs(env)}
    if len(kinds) > 1:
        raise VerifiersBridgeError(
            f"{name}: an EnvGroup mixing message types {sorted(kinds)} is not supported"
        )
    (kind,) = kinds
    if kind not in ("chat", "completion"):
        raise VerifiersBridgeError(f"{name}: message_type {kind!r} is not supported (chat or completion)")
    return kind


def turn_budget(env: Any, default: int) -> int:
    """The episode runner's outer turn cap: the largest own `max_turns` of the sub-envs, `default`
    when one sets none (<= 0). Each sub-env's own limit still stops its episodes first
    (`max_turns_reached` is one of its stop conditions, checked after every turn)."""
    own = [int(getattr(e, "max_turns", -1) or -1) for e in sub_envs(env)]
    return default if any(t <= 0 for t in own) else max(own)


def sampling_args(env: Any, task: Any) -> dict[str, Any]:
    """The sampling args a row with this `task` runs with (see module docstring)."""
    sub = env_for(env, task)
    merged = dict(getattr(env, "sampling_args", None) or {}) if sub is not env else {}
    merged.update({k: v for k, v in (getattr(sub, "sampling_args", None) or {}).items() if v is not None})
    return merged


def text_of(messages: list[dict[str, Any]]) -> str:
    """A completion-mode conversation as the one string Verifiers keeps: the contents in order."""
    return "".join(str(m.get("content") or "") for m in messages)


class TaskTally:
    """Per-task running sums of scored samples (constant memory: `serve` runs for days).
    `rows()`: `{task: {n, n_unverified, mean_score, <metric>...}}`, means over each task's verified
    samples, a metric being the mean of their reward components (an EnvGroup's: every sub-env's
    reward names)."""

    def __init__(self) -> None:
        self.n: Counter[str] = Counter()
        self.sums: dict[str, Counter[str]] = {}  # task -> key -> sum over verified samples
        self.counts: dict[str, Counter[str]] = {}  # task -> key -> verified samples with that key

    def add(self, task: str, score: float | None, components: Mapping[str, float]) -> None:
        self.n[task] += 1
        if score is None:
            return
        sums, counts = self.sums.setdefault(task, Counter()), self.counts.setdefault(task, Counter())
        for key, value in {"mean_score": score, **components}.items():
            sums[key] += float(value)
            counts[key] += 1

    def rows(self) -> dict[str, dict[str, float]]:
        out: dict[str, dict[str, float]] = {}
        for task in sorted(self.n):
            sums, counts = self.sums.get(task, Counter()), self.counts.get(task, Counter())
            out[task] = {"n": self.n[task], "n_unverified": self.n[task] - counts["mean_score"]}
            out[task].update(
                {
                    k: sums[k] / counts[k]
                    for k in ["mean_score", *sorted(set(sums) - {"mean_score"})]
                    if counts[k]
                }
            )
        return out


def task_metrics(samples: list[dict[str, Any]], tasks: Mapping[str, str]) -> dict[str, float]:
    """evaluate's per-task metrics `eval/task/<task>/<key>` (`TaskTally.rows`) of its samples
    (`uid`, `score`, `components`; `tasks`: item uid -> task)."""
    tally = TaskTally()
    for s in samples:
        tally.add(tasks.get(s["uid"], "?"), s.get("score"), s.get("components") or {})
    return {f"eval/task/{t}/{k}": v for t, row in tally.rows().items() for k, v in row.items()}
