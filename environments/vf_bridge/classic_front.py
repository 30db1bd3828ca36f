"""`load_environment()` support: a `Task` as a classic Verifiers (0.1.9.post2 .. 0.3.x) `SingleTurnEnv`.

The dataset, prompts and rubric are the ones the Atropos runtime uses, so a policy trained or
evaluated through `vf-eval` / prime-rl sees exactly what `serve` / `process` / `evaluate` see.
Malformed rows are skipped with a warning, as in the runtime.
"""

from __future__ import annotations

import logging
from typing import Any

from environments.task import Item, Task
from environments.vf_bridge import compat as vf_compat
from rubrics.adapters.verifiers import encode_answer, reward_function

log = logging.getLogger("rlvr")


def _dataset(items: list[Item]) -> Any:
    from datasets import Dataset

    return Dataset.from_list(
        [
            {
                "prompt": [dict(m) for m in it.prompt],
                "answer": encode_answer(it.answer),
                "info": {"uid": it.uid},
            }
            for it in items
        ]
    )


def task_splits(task: Task) -> dict[str, list]:
    """The task's usable train and eval items (bad rows logged and skipped); an error if both are empty."""
    splits = {}
    for split in ("train", "eval"):
        items, errors = task.items(split)
        for line in errors[:20]:
            log.warning("skipping bad row: %s", line)
        splits[split] = items
    if not splits["train"] and not splits["eval"]:
        raise ValueError(f"{type(task).__name__}: no usable rows in either split")
    return splits


def build_verifiers_env(task: Task, **env_kwargs: Any) -> Any:
    """A `verifiers.SingleTurnEnv` over the task's train and eval splits, scored by its rubric."""
    vf = vf_compat.require("classic")  # a clear ImportError on verifiers 0.4 (v1 only) or none
    splits = task_splits(task)
    rubric = vf.Rubric(funcs=[reward_function(task.rubric())], weights=[1.0])
    return vf.SingleTurnEnv(
        dataset=_dataset(splits["train"] or splits["eval"]),
        eval_dataset=_dataset(splits["eval"] or splits["train"]),
        rubric=rubric,
        **env_kwargs,
    )
