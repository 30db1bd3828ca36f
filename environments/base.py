"""RubricEnv: the Atropos `BaseEnv` every environment subclasses (serve / process / evaluate).

A subclass only names its `Task` and config:

    class MathEnvConfig(RubricEnvConfig):
        dataset: str = "reasoning_gym:basic_arithmetic"

    class MathEnv(RubricEnv):
        name = "math"
        env_config_cls = MathEnvConfig
        task_cls = MathTask

    if __name__ == "__main__":
        MathEnv.cli()
"""

from __future__ import annotations

from typing import ClassVar

from atroposlib.envs.base import BaseEnv, BaseEnvConfig
from pydantic import Field

from environments.task import Task


class RubricEnvConfig(BaseEnvConfig):
    """BaseEnvConfig plus the generation settings every RubricEnv shares. Defaults work offline."""

    system_prompt: str | None = Field(default=None, description="Overrides the task's system prompt")
    max_tokens: int = Field(default=512, description="Completion budget per sample (tokens)")
    temperature: float = Field(default=1.0, description="Sampling temperature (sent to the trainer)")
    top_p: float = Field(default=1.0, description="Nucleus sampling")
    train_limit: int | None = Field(default=None, description="Use at most this many train items")
    eval_limit: int | None = Field(default=None, description="Use at most this many eval items")
    max_concurrent_groups: int = Field(default=16, description="Groups in flight in process mode")
    request_timeout_s: float = Field(default=120.0, description="Timeout of every inference call")


class RubricEnv(BaseEnv):
    """Shared serve/process/evaluate machinery over a `Task` (see module docstring)."""

    name: ClassVar[str | None] = None
    env_config_cls = RubricEnvConfig
    task_cls: ClassVar[type[Task]]
