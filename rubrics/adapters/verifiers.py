"""A `Rubric` as a Verifiers (0.1.9 classic API) reward function.

Verifiers turns any exception in a reward function into 0.0, so an infrastructure failure would
silently become a wrong answer. This adapter returns NaN instead for unverified results (and
records the status in `state["rlvr_reward"]`): NaN propagates into the group's advantages, which
keeps the sample out of training rather than teaching the policy that it was wrong.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from typing import Any

from rubrics.core import Rubric, Sample


def decode_answer(answer: Any) -> Any:
    """Golds travel through HF datasets as JSON strings (see `encode_answer`)."""
    if isinstance(answer, str):
        try:
            return json.loads(answer)
        except json.JSONDecodeError:
            return answer
    return answer


def encode_answer(answer: Any) -> str:
    return json.dumps(answer, ensure_ascii=False)


def reward_function(rubric: Rubric) -> Callable[..., Any]:
    """An async Verifiers reward function `f(prompt, completion, answer, state, info) -> float`."""

    async def reward(prompt: Any, completion: Any, answer: Any, state: Any = None, info: Any = None) -> float:
        info = json.loads(info) if isinstance(info, str) else (info or {})
        result = await rubric.score(
            Sample(prompt=prompt, completion=completion, answer=decode_answer(answer), info=info)
        )
        if isinstance(state, dict):
            state["rlvr_reward"] = result.to_dict()
        return math.nan if result.score is None else float(result.score)

    reward.__name__ = f"{rubric.name}_reward"
    return reward
