"""A QA environment whose reward varies on gibberish (for serve tests: serve drops identical groups).

The tiny random model never answers correctly, so exact match would give every group identical
scores. This rubric scores the completion's character count modulo 3, which differs across samples.
"""

from __future__ import annotations

from environments.qa_env import QAEnv, QATask
from rubrics.core import RewardResult, Rubric, Sample


class LengthModRubric(Rubric):
    name = "length_mod"

    async def _score(self, sample: Sample) -> RewardResult:
        return RewardResult(score=(len(sample.completion_text) % 3) / 2)


class VariedTask(QATask):
    def rubric(self) -> Rubric:
        return LengthModRubric()


class VariedEnv(QAEnv):
    name = "varied"
    task_cls = VariedTask


if __name__ == "__main__":
    VariedEnv.cli()
