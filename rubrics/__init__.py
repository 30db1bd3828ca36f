"""Reward layer: what a completion is worth (math, code, judge, PRM, combination)."""

from rubrics.core import (
    ExactMatchRubric,
    RewardResult,
    Rubric,
    Sample,
    Status,
    WeightedRubric,
)

__all__ = ["ExactMatchRubric", "RewardResult", "Rubric", "Sample", "Status", "WeightedRubric"]
