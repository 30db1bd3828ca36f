"""A 3-turn environment for the tiny random model (serve / process tests and the benchmark).

QA prompts; after each answer the environment asks again ("Not quite. Answer again."), so every
episode runs `max_turns` turns. Turns cut by `max_tokens` go on (`stop_on_truncation = False`): the
random model never stops by itself. The reward is the final answer's length modulo 3 (varies, so
serve does not drop the groups as identical).
"""

from __future__ import annotations

from pydantic import Field

from environments.atropos_runtime.base import RubricEnv
from environments.atropos_runtime.episodes import EnvStep, EpisodeContext, MultiTurnTask
from environments.qa_env import QAEnvConfig, QATask
from rubrics.core import Rubric
from tests.integration.varied_env import LengthModRubric


class RetryConfig(QAEnvConfig):
    max_turns: int = Field(default=3, description="Turns per episode")
    stop_on_truncation: bool = Field(default=False, description="End the episode at a truncated turn")


class RetryTask(MultiTurnTask, QATask):
    config: RetryConfig

    def rubric(self) -> Rubric:
        return LengthModRubric()

    async def env_step(self, ctx: EpisodeContext) -> EnvStep:
        return EnvStep([{"role": "user", "content": f"Not quite (attempt {ctx.turn}). Answer again."}])


class RetryEnv(RubricEnv):
    name = "retry"
    env_config_cls = RetryConfig
    task_cls = RetryTask


if __name__ == "__main__":
    RetryEnv.cli()
