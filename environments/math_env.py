r"""Math word problems scored by `rubrics.math.MathRubric` (answer in `\boxed{}`).

Datasets (`--env.dataset`):
* `reasoning_gym` (default, offline): problems from reasoning-gym generators (`--env.rg_tasks`), whose
  own answers are the golds. Deterministic (`--env.data_seed`); train and eval use different seeds and
  every eval question is removed from train, so the splits are disjoint.
* hub names, through `datasets.load_dataset`: `gsm8k` (openai/gsm8k, `#### 72` answers), `math500`
  (HuggingFaceH4/MATH-500), `dapo` (BytedTsinghua-SIA/DAPO-Math-17k, `reward_model.ground_truth`),
  `numina` (AI-MO/NuminaMath-CoT, last `\boxed{}` of the solution), or any other hub name.
* local JSONL/JSON/Parquet files in any of those layouts (or `question`/`answer` rows).

Answer fields are mapped per layout (`--env.dataset_format`, default `auto` = detected per row). A row
whose gold cannot be found (e.g. a Numina proof) is a `DatasetError` and is skipped and counted.

    python environments/math_env.py process --env.total_steps 8 --openai.base_url http://127.0.0.1:9001/v1
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping
from typing import Any, Literal

from pydantic import Field

from environments.atropos_runtime.base import RubricEnv, RubricEnvConfig
from environments.atropos_runtime.config_types import JsonObject, NameList
from environments.data_sources import DataSourceError, cached_rows, load_rows, split_rows
from environments.task import DatasetError, Item, Split, Task, require
from environments.vf_bridge import compat as vf_compat
from rubrics.core import Rubric

SYSTEM_PROMPT = (
    "Solve the math problem. Reason step by step, then give the final answer on its own at the end, "
    "inside \\boxed{}, e.g. \\boxed{42}. Put exactly one answer in the box."
)
DEFAULT_RG_TASKS = (
    "basic_arithmetic",
    "chain_sum",
    "fraction_simplification",
    "gcd",
    "lcm",
    "simple_equations",
    "products",
    "count_primes",
    "leg_counting",
)
# tasks whose gold must be matched in lowest terms (a per-item policy override for the rubric)
_RG_POLICY = {"fraction_simplification": {"unreduced_fractions": False}}
HUB_ALIASES = {
    "gsm8k": ("openai/gsm8k", "main"),
    "math500": ("HuggingFaceH4/MATH-500", None),
    "dapo": ("BytedTsinghua-SIA/DAPO-Math-17k", None),
    "numina": ("AI-MO/NuminaMath-CoT", None),
}
Format = Literal["auto", "gsm8k", "math", "dapo", "numina", "qa"]


class MathEnvConfig(RubricEnvConfig):
    dataset: str = Field(
        default="reasoning_gym", description="reasoning_gym, a hub name/alias, or a local file"
    )
    dataset_config: str | None = Field(default=None, description="Hub dataset config name")
    dataset_format: Format = Field(default="auto", description="Row layout (answer field mapping)")
    train_split: str = Field(default="train", description="Hub split used for training")
    eval_split: str = Field(default="test", description="Hub split used for eval (else carved off train)")
    eval_fraction: float = Field(
        default=0.1, description="Eval share of a single-file or single-split dataset"
    )
    rg_tasks: NameList = Field(
        default=list(DEFAULT_RG_TASKS),
        description="reasoning-gym generators (comma-separated on the command line)",
    )
    rg_config: JsonObject = Field(
        default_factory=dict,
        description="Generator options per reasoning-gym task, e.g. "
        '{"basic_arithmetic": {"max_terms": 2, "max_digits": 1, "operators": ["+"]}}',
    )
    rg_train_size: int = Field(default=2000, description="reasoning-gym train items (spread over tasks)")
    rg_eval_size: int = Field(default=200, description="reasoning-gym eval items")
    data_seed: int = Field(default=1234, description="Seed of the reasoning-gym generators")
    format_weight: float = Field(default=0.0, description="Reward weight of answering inside \\boxed{}")
    cas_workers: int = Field(default=2, description="CAS worker processes of the rubric")


# ----------------------------------------------------------------------------- answer mapping


def last_boxed(text: str) -> str | None:
    """Content of the last `\\boxed{…}` in a reference solution (brace matched)."""
    from rubrics.math.extract import find_boxes

    boxes, bad = find_boxes(text)
    return boxes[-1] if boxes and not bad else None


def detect_format(row: Mapping[str, Any]) -> str:
    if isinstance(row.get("reward_model"), Mapping):
        return "dapo"
    if "problem" in row and ("solution" in row or "answer" in row):
        return "math"
    if isinstance(row.get("answer"), str) and "####" in row["answer"]:
        return "gsm8k"
    return "qa"


_DAPO_HEAD = re.compile(r"^Solve the following math problem.*?\n\n", re.DOTALL)
_DAPO_TAIL = re.compile(r"\n\nRemember to put your answer on its own line after \"Answer:\"\.?\s*$")


def map_row(row: Mapping[str, Any], fmt: str) -> tuple[str, str]:
    """`(question, gold)` of one row in layout `fmt`; DatasetError when either is missing."""
    fmt = detect_format(row) if fmt == "auto" else fmt
    if fmt == "gsm8k":
        question, answer = require(row, "question"), require(row, "answer")
        if "####" not in answer:
            raise DatasetError("gsm8k answer has no '####' line")
        return question, answer.rsplit("####", 1)[1].strip().replace(",", "")
    if fmt in ("math", "numina"):
        question = require(row, "problem")
        answer = row.get("answer")
        if (
            isinstance(answer, str | int | float)
            and str(answer).strip()
            and str(answer).strip().lower() not in ("proof", "notfound", "none")
        ):
            return question, str(answer).strip()
        gold = last_boxed(str(row.get("solution") or ""))
        if not gold:
            raise DatasetError("no answer field and no \\boxed{} in the solution")
        return question, gold
    if fmt == "dapo":
        prompt = row.get("prompt")
        if isinstance(prompt, list) and prompt and isinstance(prompt[-1], Mapping):
            question = str(prompt[-1].get("content") or "")
        elif isinstance(prompt, str):
            question = prompt
        else:
            raise DatasetError("dapo row has no prompt")
        question = _DAPO_TAIL.sub("", _DAPO_HEAD.sub("", question)).strip()
        truth = (row.get("reward_model") or {}).get("ground_truth")
        if not question or truth is None or not str(truth).strip():
            raise DatasetError("dapo row has no question or no reward_model.ground_truth")
        return question, str(truth).strip()
    question = row.get("question", row.get("problem"))
    if not isinstance(question, str) or not question.strip():
        raise DatasetError(f"missing field 'question' (fields: {sorted(row)})")
    answer = require(row, "answer", (str, int, float))
    return question, str(answer).strip()


# ----------------------------------------------------------------------------- task


class MathTask(Task):
    config: MathEnvConfig

    def rows(self, split: Split) -> Iterable[Mapping[str, Any]]:
        if self.config.dataset == "reasoning_gym":
            return self._rg_rows(split)
        name, config = HUB_ALIASES.get(self.config.dataset, (self.config.dataset, self.config.dataset_config))
        if self.config.dataset_config:
            config = self.config.dataset_config
        if name.endswith((".jsonl", ".json", ".parquet")) or not _looks_remote(name):
            return split_rows(load_rows(name, split, config), split, self.config.eval_fraction)
        wanted = self.config.train_split if split == "train" else self.config.eval_split
        try:
            return load_rows(name, wanted, config)
        except DataSourceError:
            if split == "train":
                raise
            return split_rows(
                load_rows(name, self.config.train_split, config), "eval", self.config.eval_fraction
            )

    def _rg_rows(self, split: Split) -> list[dict[str, Any]]:
        cache = self.__dict__.setdefault("_rg_cache", {})
        if "eval" not in cache:
            cache["eval"] = _rg_generate(
                self.config.rg_tasks,
                self.config.rg_eval_size,
                self.config.data_seed + 1,
                self.config.rg_config,
            )
        if split == "eval":
            return cache["eval"]
        if "train" not in cache:
            seen = {r["question"] for r in cache["eval"]}
            train = _rg_generate(
                self.config.rg_tasks, self.config.rg_train_size, self.config.data_seed, self.config.rg_config
            )
            cache["train"] = [r for r in train if r["question"] not in seen]
        return cache["train"]

    def item(self, row: Mapping[str, Any], index: int) -> Item:
        question, gold = map_row(row, "qa" if "rg_task" in row else self.config.dataset_format)
        system = self.config.system_prompt or SYSTEM_PROMPT
        prompt = [{"role": "system", "content": system}, {"role": "user", "content": question}]
        info: dict[str, Any] = {"dataset": self.config.dataset}
        if "rg_task" in row:
            info["rg_task"] = row["rg_task"]
            if row["rg_task"] in _RG_POLICY:
                info["math_policy"] = dict(_RG_POLICY[row["rg_task"]])
        uid = str(row.get("id", row.get("unique_id", f"{self.config.dataset}-{index}")))
        return Item(uid=uid, prompt=prompt, answer=gold, info=info)

    def rubric(self) -> Rubric:
        from rubrics.math import MathRubric

        return MathRubric(workers=self.config.cas_workers, format_weight=self.config.format_weight)

    def node_rubric(self, slots: int) -> Rubric:
        from rubrics.remote.node import MathNodeRubric

        return MathNodeRubric(self.config.format_weight)(slots)


def _looks_remote(name: str) -> bool:
    from pathlib import Path

    return not Path(name).exists() and "/" in name or name.startswith("hf:")


def _rg_generate(
    tasks: list[str], size: int, seed: int, options: Mapping[str, Mapping[str, Any]] | None = None
) -> list[dict[str, Any]]:
    """`size` problems spread round-robin over `tasks` (each generator built with its `options`),
    deterministic in `seed` (and so cached on disk per reasoning-gym version: importing
    reasoning_gym takes seconds, its rows never change). An option the generator does not take is a
    DataSourceError naming the task."""
    from importlib.metadata import version

    if not tasks or size <= 0:
        return []
    unknown = sorted(set(options or {}) - set(tasks))
    if unknown:
        raise DataSourceError(f"rg_config names tasks that are not in rg_tasks: {unknown}")
    options = {task: dict(options[task]) for task in tasks if options and options.get(task)}
    key = json.dumps(
        ["reasoning-gym", version("reasoning-gym"), list(tasks), size, seed, options], sort_keys=True
    )
    return cached_rows(key, lambda: _rg_build(tasks, size, seed, options))


def _rg_build(
    tasks: list[str], size: int, seed: int, options: Mapping[str, Mapping[str, Any]] | None = None
) -> list[dict[str, Any]]:
    import reasoning_gym

    options = options or {}
    per_task = [size // len(tasks) + (1 if i < size % len(tasks) else 0) for i in range(len(tasks))]
    rows = []
    for k, (task, n) in enumerate(zip(tasks, per_task, strict=True)):
        if n == 0:
            continue
        try:
            dataset = reasoning_gym.create_dataset(
                task, size=n, seed=seed * 1000 + k, **options.get(task, {})
            )
        except (TypeError, AssertionError, ValueError) as e:
            raise DataSourceError(
                f"reasoning-gym task {task!r} rejects its rg_config {options.get(task)}: {e}"
            ) from e
        for j, entry in enumerate(dataset):
            rows.append(
                {
                    "id": f"rg-{task}-{seed}-{j}",
                    "question": entry["question"],
                    "answer": str(entry["answer"]),
                    "rg_task": task,
                }
            )
    return rows


class MathEnv(RubricEnv):
    name = "math"
    env_config_cls = MathEnvConfig
    task_cls = MathTask


def load_environment(**kwargs: Any) -> Any:
    """The same dataset, prompt and rubric as a Verifiers environment."""
    from environments.vf_bridge.classic_front import build_verifiers_env

    return build_verifiers_env(MathTask(MathEnvConfig(**kwargs)))


__all__ = ["MathEnv", "MathEnvConfig", "MathTask", "load_environment"]
if vf_compat.has_v1():  # the v1 front door: `vf-eval rlvr-math ...` on verifiers 0.3.1 .. 0.4.x
    from environments.vf_bridge.v1_front import taskset_class

    MathTaskset = taskset_class(MathTask, MathEnvConfig, "Math")
    __all__ += ["MathTaskset"]
else:  # reading MathTaskset here raises a VerifiersAPIError saying which verifiers it needs
    __getattr__ = vf_compat.missing_v1_exports(__name__, ("MathTaskset",))


if __name__ == "__main__":
    MathEnv.cli()
