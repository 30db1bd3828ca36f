"""A toy multi-turn environment for the episode tests: guess a number from 1 to 8.

After each wrong guess the environment answers "higher" or "lower"; the episode stops when the
guess is right (`solved`) or turns run out. The reward is exact match of the last guess.
`fail_on_turn` makes the environment step raise at that turn (an environment outage).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from pydantic import Field

from environments.atropos_runtime.base import RubricEnv, RubricEnvConfig
from environments.atropos_runtime.episodes import EnvStep, EpisodeContext, MultiTurnTask
from environments.task import Item, Split
from rubrics.core import ExactMatchRubric, Rubric

TARGETS = [3, 6, 1, 8, 5, 2, 7, 4]


class GuessConfig(RubricEnvConfig):
    max_turns: int = Field(default=3, description="Guesses per episode")
    max_episode_tokens: int | None = Field(default=None, description="Token budget of one episode")
    fail_on_turn: int = Field(default=0, description="The environment step raises at this turn (0: never)")
    feedback_text: str = Field(default="", description="Extra text appended to each feedback message")
    feedback_role: str = Field(default="user", description="Role of the feedback message")


class GuessTask(MultiTurnTask):
    config: GuessConfig

    def rows(self, split: Split) -> Iterable[Mapping[str, Any]]:
        return [{"id": f"{split}-{i}", "target": t} for i, t in enumerate(TARGETS)]

    def item(self, row: Mapping[str, Any], index: int) -> Item:
        prompt = [
            {"role": "system", "content": "Guess the number from 1 to 8. Reply with the number only."},
            {"role": "user", "content": "Your guess?"},
        ]
        return Item(uid=row["id"], prompt=prompt, answer=str(row["target"]))

    def rubric(self) -> Rubric:
        return ExactMatchRubric()

    async def env_step(self, ctx: EpisodeContext) -> EnvStep:
        if ctx.turn == self.config.fail_on_turn:
            raise ConnectionError("environment backend is down")
        guess, target = int(ctx.answer.strip()), int(ctx.item.answer)
        ctx.state.setdefault("guesses", []).append(guess)
        if guess == target:
            return EnvStep(done=True, reason="solved", info={"solved": True})
        hint = "higher" if target > guess else "lower"
        return EnvStep(
            [{"role": self.config.feedback_role, "content": hint + self.config.feedback_text}],
            info={"solved": False},
        )


class GuessEnv(RubricEnv):
    name = "guess"
    env_config_cls = GuessConfig
    task_cls = GuessTask


def binary_search_policy(prompt_text: str, index: int) -> str:
    """Guesses by bisection over the hints in the conversation; choice `index` shifts the first guess."""
    low, high = 1, 8
    guesses = [int(g) for g in _assistant_turns(prompt_text)]
    for guess, hint in zip(guesses, _hints(prompt_text), strict=False):
        if hint.startswith("higher"):
            low = guess + 1
        else:
            high = guess - 1
    if not guesses:
        return str(1 + (index * 3) % 8)
    return str((low + high) // 2)


def _assistant_turns(text: str) -> list[str]:
    parts = text.split("<|im_start|>assistant\n")[1:]
    return [p.split("<|im_end|>")[0] for p in parts if "<|im_end|>" in p]


def _hints(text: str) -> list[str]:
    parts = text.split("<|im_start|>user\n")[2:]
    return [p.split("<|im_end|>")[0] for p in parts]


if __name__ == "__main__":
    GuessEnv.cli()
