"""Short-answer QA scored by normalised exact match (`rubrics.core.ExactMatchRubric`).

Rows: `{"question": str, "answer": str | [str, ...], "id"?: str}`. The offline default is a small
general-knowledge set shipped in `environments/data/qa_default.jsonl`; `--env.dataset` takes any
local JSONL/JSON/Parquet file or a hub dataset name with the same fields
(`--env.question_field` / `--env.answer_field` rename them).

    python environments/qa_env.py process --env.total_steps 8 --openai.base_url http://127.0.0.1:9001/v1
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from pydantic import Field

from environments.atropos_runtime.base import RubricEnv, RubricEnvConfig
from environments.data_sources import load_rows, split_rows
from environments.task import DatasetError, Item, Split, Task, require
from environments.vf_bridge import compat as vf_compat
from rubrics.core import ExactMatchRubric, Rubric

DEFAULT_DATA = str(Path(__file__).parent / "data" / "qa_default.jsonl")
SYSTEM_PROMPT = "Answer the question with a short answer inside <answer></answer> tags, and nothing else."


class QAEnvConfig(RubricEnvConfig):
    dataset: str = Field(default=DEFAULT_DATA, description="Local file or hub dataset name")
    dataset_config: str | None = Field(default=None, description="Hub dataset config name")
    question_field: str = "question"
    answer_field: str = "answer"
    eval_fraction: float = Field(default=0.25, description="Share of a single-file dataset used for eval")


class QATask(Task):
    config: QAEnvConfig

    def rows(self, split: Split) -> Iterable[Mapping[str, Any]]:
        rows = load_rows(self.config.dataset, split, self.config.dataset_config)
        return split_rows(rows, split, self.config.eval_fraction)

    def item(self, row: Mapping[str, Any], index: int) -> Item:
        question = require(row, self.config.question_field)
        answer = require(row, self.config.answer_field, (str, list, int, float))
        if isinstance(answer, list) and not all(isinstance(a, str | int | float) for a in answer):
            raise DatasetError(f"field {self.config.answer_field!r} must hold strings")
        prompt = [{"role": "system", "content": SYSTEM_PROMPT}, {"role": "user", "content": question}]
        return Item(uid=str(row.get("id", index)), prompt=prompt, answer=answer)

    def rubric(self) -> Rubric:
        return ExactMatchRubric()


class QAEnv(RubricEnv):
    name = "qa"
    env_config_cls = QAEnvConfig
    task_cls = QATask


def load_environment(**kwargs: Any) -> Any:
    """The same dataset, prompt and rubric as a Verifiers environment."""
    from environments.vf_bridge.classic_front import build_verifiers_env

    return build_verifiers_env(QATask(QAEnvConfig(**kwargs)))


__all__ = ["QAEnv", "QAEnvConfig", "QATask", "load_environment"]
if vf_compat.has_v1():  # the v1 front door: `vf-eval rlvr-qa ...` on verifiers 0.3.1 .. 0.4.x
    from environments.vf_bridge.v1_front import taskset_class

    QATaskset = taskset_class(QATask, QAEnvConfig, "QA")
    __all__ += ["QATaskset"]
else:  # reading QATaskset here raises a VerifiersAPIError saying which verifiers it needs
    __getattr__ = vf_compat.missing_v1_exports(__name__, ("QATaskset",))


if __name__ == "__main__":
    QAEnv.cli()
