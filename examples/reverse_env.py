"""Reverse a word: a complete environment in one file (walked through in docs/guide.md).

    python examples/reverse_env.py process --env.total_steps 8 --env.tokenizer_name MODEL \
        --openai.base_url http://127.0.0.1:9001/v1 --openai.model_name MODEL
"""

from __future__ import annotations

import random
from collections.abc import Iterable, Mapping
from typing import Any

from environments.atropos_runtime.base import RubricEnv, RubricEnvConfig
from environments.task import Item, Split, Task, require
from rubrics.core import RewardResult, Rubric, Sample, Status

WORDS = ["rollout", "rubric", "sandbox", "verifier", "gradient", "tokenizer", "policy", "reward"]


class ReverseRubric(Rubric):
    """1.0 when the text inside the last <answer></answer> is the gold, else 0.0; no tags: no_answer."""

    name = "reverse"

    async def _score(self, sample: Sample) -> RewardResult:
        text = sample.completion_text
        if "<answer>" not in text or "</answer>" not in text.rsplit("<answer>", 1)[1]:
            return RewardResult.zero(Status.NO_ANSWER, "no <answer>...</answer>")
        answer = text.rsplit("<answer>", 1)[1].split("</answer>", 1)[0].strip()
        return RewardResult(score=float(answer == sample.answer), reason=f"answered {answer!r}")


class ReverseTask(Task):
    def rows(self, split: Split) -> Iterable[Mapping[str, Any]]:
        rng = random.Random(split)  # fixed rows per split; a real task reads a dataset (data_sources.py)
        return [{"word": rng.choice(WORDS)} for _ in range(32)]

    def item(self, row: Mapping[str, Any], index: int) -> Item:
        word = require(row, "word")  # a malformed row raises DatasetError: skipped and counted
        prompt = [{"role": "user", "content": f"Reverse the letters of {word}. Reply <answer>...</answer>."}]
        return Item(uid=str(index), prompt=prompt, answer=word[::-1])

    def rubric(self) -> Rubric:
        return ReverseRubric()


class ReverseEnv(RubricEnv):
    name = "reverse"
    env_config_cls = RubricEnvConfig
    task_cls = ReverseTask


if __name__ == "__main__":
    ReverseEnv.cli()  # serve | process | evaluate
