"""Open-ended questions graded by an LLM judge against a reference answer and/or criteria.

Rows: `{"question": str, "reference"?: str, "criteria"?: str | [str, ...], "id"?: str}` with at least
one of reference / criteria. The offline default is `environments/data/judge_default.jsonl` (30 rows);
`--env.dataset` takes any local JSONL/JSON/Parquet file or hub dataset with those fields.

The judge is its own OpenAI-compatible endpoint (`--env.judge_base_url`, `--env.judge_model`, key in
the env var named by `--env.judge_api_key_env`); its calls never go through the policy's server
manager. Length and format components can be mixed in with `--env.length_weight` /
`--env.format_weight` (a `WeightedRubric`); a judge failure makes the whole sample unverified.

    python environments/judge_env.py process --env.total_steps 8 \\
        --openai.base_url http://127.0.0.1:9001/v1 --env.judge_base_url http://127.0.0.1:9002/v1
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any, Literal

from pydantic import Field

from environments.atropos_runtime.base import RubricEnv, RubricEnvConfig
from environments.data_sources import load_rows, split_rows
from environments.task import DatasetError, Item, Split, Task, require
from environments.vf_bridge import compat as vf_compat
from rubrics.core import Component, Rubric, WeightedRubric
from rubrics.judge.rubric import JudgeConfig, JudgeRubric
from rubrics.shape import FormatRubric, LengthRubric

DEFAULT_DATA = str(Path(__file__).parent / "data" / "judge_default.jsonl")
SYSTEM_PROMPT = "Answer the question helpfully, accurately and concisely."
DEFAULT_JUDGE_URL = os.environ.get("RLVR_JUDGE_BASE_URL", "http://127.0.0.1:9002/v1")
DEFAULT_JUDGE_MODEL = os.environ.get(
    "RLVR_JUDGE_MODEL", os.environ.get("RLVR_MODEL", "Qwen/Qwen2.5-1.5B-Instruct")
)


class JudgeEnvConfig(RubricEnvConfig):
    dataset: str = Field(default=DEFAULT_DATA, description="Local file or hub dataset name")
    dataset_config: str | None = Field(default=None, description="Hub dataset config name")
    eval_fraction: float = Field(default=0.25, description="Share of a single-file dataset used for eval")
    judge_base_url: str = Field(default=DEFAULT_JUDGE_URL, description="Judge endpoint (OpenAI-compatible)")
    judge_model: str = Field(default=DEFAULT_JUDGE_MODEL, description="Judge model name")
    judge_api_key_env: str = Field(default="JUDGE_API_KEY", description="Env var with the judge's API key")
    judge_mode: Literal["tag", "json", "choice", "logprobs"] = "tag"
    judge_timeout_s: float = Field(default=60.0, description="Per-attempt judge timeout")
    judge_max_retries: int = 3
    judge_max_tokens: int = Field(default=1024, description="Judge completion budget")
    judge_temperature: float = 0.0
    judge_samples: int = Field(default=1, description="Judge draws per completion (mean)")
    judge_max_concurrency: int = 64
    judge_weight: float = 1.0
    length_weight: float = Field(default=0.0, description="Weight of the length component (0: off)")
    length_limit_chars: int = Field(default=2000, description="Answers longer than this lose length score")
    format_weight: float = Field(default=0.0, description="Weight of the format component (0: off)")


class JudgeTask(Task):
    config: JudgeEnvConfig

    def rows(self, split: Split) -> Iterable[Mapping[str, Any]]:
        rows = load_rows(self.config.dataset, split, self.config.dataset_config)
        return split_rows(rows, split, self.config.eval_fraction)

    def item(self, row: Mapping[str, Any], index: int) -> Item:
        question = require(row, "question")
        answer: dict[str, Any] = {}
        if row.get("reference") is not None:
            answer["reference"] = require(row, "reference")
        if row.get("criteria") is not None:
            criteria = require(row, "criteria", (str, list))
            if isinstance(criteria, list) and not (
                criteria and all(isinstance(c, str) and c.strip() for c in criteria)
            ):
                raise DatasetError("field 'criteria' must be a non-empty list of non-empty strings")
            answer["criteria"] = criteria
        if not answer:
            raise DatasetError("row needs a 'reference' or 'criteria' for the judge")
        prompt = [{"role": "system", "content": SYSTEM_PROMPT}, {"role": "user", "content": question}]
        return Item(uid=str(row.get("id", index)), prompt=prompt, answer=answer)

    def judge_config(self) -> JudgeConfig:
        c = self.config
        return JudgeConfig(
            base_url=c.judge_base_url,
            model=c.judge_model,
            api_key_env=c.judge_api_key_env,
            mode=c.judge_mode,
            timeout_s=c.judge_timeout_s,
            max_retries=c.judge_max_retries,
            max_tokens=c.judge_max_tokens,
            temperature=c.judge_temperature,
            samples=c.judge_samples,
            max_concurrency=c.judge_max_concurrency,
            **({"integer": True, "low": 1, "high": 9} if c.judge_mode in ("choice", "logprobs") else {}),
        )

    def rubric(self) -> Rubric:
        c = self.config
        judge = JudgeRubric(self.judge_config())
        if not c.length_weight and not c.format_weight:
            return judge
        parts: dict[str, Component] = {"judge": Component(judge, weight=c.judge_weight)}
        if c.length_weight:
            parts["length"] = Component(LengthRubric(c.length_limit_chars), weight=c.length_weight)
        if c.format_weight:
            parts["format"] = Component(FormatRubric(), weight=c.format_weight)
        return WeightedRubric(parts)


class JudgeEnv(RubricEnv):
    name = "judge"
    rubric_flags = "set --env.judge_base_url and --env.judge_model to a running judge"
    env_config_cls = JudgeEnvConfig
    task_cls = JudgeTask


def load_environment(**kwargs: Any) -> Any:
    """The same dataset, prompt and judge rubric as a Verifiers environment."""
    from environments.vf_bridge.classic_front import build_verifiers_env

    return build_verifiers_env(JudgeTask(JudgeEnvConfig(**kwargs)))


__all__ = ["JudgeEnv", "JudgeEnvConfig", "JudgeTask", "load_environment"]
if vf_compat.has_v1():  # the v1 front door: `vf-eval rlvr-judge ...` on verifiers 0.3.1 .. 0.4.x
    from environments.vf_bridge.v1_front import taskset_class

    JudgeTaskset = taskset_class(JudgeTask, JudgeEnvConfig, "Judge")
    __all__ += ["JudgeTaskset"]
else:  # reading JudgeTaskset here raises a VerifiersAPIError saying which verifiers it needs
    __getattr__ = vf_compat.missing_v1_exports(__name__, ("JudgeTaskset",))


if __name__ == "__main__":
    JudgeEnv.cli()
