"""The rlvr-envs environments of `env_overhead_bench.py`: math_env's task with a trivial or the real rubric,
single-turn (math_env's own runtime path) or multi-turn (`--env.max_turns`, the episode runtime).

    python benchmarks/overhead_envs.py {single|multi} serve|process ... [--env.rubric_kind trivial|math]

`trivial`: a constant reward computed inline (what the env costs without any rubric work); `math`:
math_env's `MathRubric` (math-verify in its CAS worker processes). Multi-turn episodes answer every
turn with "Not quite. Answer again." and go on after truncated turns, so each runs `max_turns` turns.
"""

import sys
from pathlib import Path
from typing import Literal

from pydantic import Field

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from environments.atropos_runtime.base import RubricEnv  # noqa: E402
from environments.atropos_runtime.episodes import EnvStep, EpisodeContext, MultiTurnTask  # noqa: E402
from environments.math_env import MathEnvConfig, MathTask  # noqa: E402
from rubrics.core import RewardResult, Rubric, Sample  # noqa: E402


class TrivialRubric(Rubric):
    name = "trivial"

    async def _score(self, sample: Sample) -> RewardResult:
        return RewardResult(score=1.0)


class BenchConfig(MathEnvConfig):
    rubric_kind: Literal["trivial", "math"] = Field(default="trivial", description="Which reward")
    max_turns: int = Field(default=3, description="Turns per episode (multi only)")
    stop_on_truncation: bool = Field(default=False, description="End an episode at a truncated turn")


class SingleTask(MathTask):
    config: BenchConfig

    def rubric(self) -> Rubric:
        return TrivialRubric() if self.config.rubric_kind == "trivial" else super().rubric()


class MultiTask(MultiTurnTask, SingleTask):
    async def env_step(self, ctx: EpisodeContext) -> EnvStep:
        return EnvStep([{"role": "user", "content": f"Not quite (attempt {ctx.turn}). Answer again."}])


class SingleEnv(RubricEnv):
    name = "bench_single"
    env_config_cls = BenchConfig
    task_cls = SingleTask


class MultiEnv(RubricEnv):
    name = "bench_multi"
    env_config_cls = BenchConfig
    task_cls = MultiTask


if __name__ == "__main__":
    kind = sys.argv.pop(1)
    {"single": SingleEnv, "multi": MultiEnv}[kind].cli()
