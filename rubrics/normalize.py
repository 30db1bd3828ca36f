"""Group-relative advantages (GRPO style), NaN-aware: unverified samples (`None`) never move a baseline.

Contract, matching TRL's `GRPOTrainer` (>= 1.7) on identical inputs:
* `advantage = (r - mean_g) / (std_g + eps)` with `eps = 1e-4`, where mean and std are taken over the
  VERIFIED scores of the group only and std is the unbiased (Bessel-corrected, n-1) sample standard
  deviation, as TRL's `nanstd` computes it. `scale="batch"` divides by the std of every verified score
  in the batch instead; `scale="none"` only centres (Dr. GRPO).
* An unverified sample gets advantage 0.0 and is excluded from its group's statistics; a group with no
  verified sample gets all zeros (TRL's "unscorable" rows).
* A group whose verified scores have zero spread (|std| <= 1e-8, TRL's `isclose(std, 0)`) is flagged
  `zero_variance`; its advantages are 0. A group with ONE verified sample is also flagged and gets 0
  (TRL would divide by a NaN std there; we choose the safe value and say so).
* Multi-reward combination (`combine`): `sum_then_normalize` sums weighted rewards per sample (a None
  part is skipped, as TRL's `nansum`; a sample with every part None stays None) and then normalises;
  `normalize_then_sum` normalises each reward per group first, sums the weighted advantages, then
  z-scores the sums over the batch (GDPO, as described for TRL's `multi_objective_aggregation`).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

EPS = 1e-4
Scale = Literal["group", "batch", "none"]


@dataclass(frozen=True)
class GroupStats:
    """Advantages of one group plus the statistics they came from."""

    advantages: tuple[float, ...]
    mean: float | None
    std: float | None
    n_verified: int
    zero_variance: bool


def _mean(xs: Sequence[float]) -> float:
    return math.fsum(xs) / len(xs)


def unbiased_std(xs: Sequence[float]) -> float:
    """Sample standard deviation (n-1); 0.0 for fewer than two values."""
    if len(xs) < 2:
        return 0.0
    m = _mean(xs)
    return math.sqrt(math.fsum((x - m) ** 2 for x in xs) / (len(xs) - 1))


def group_advantages(
    scores: Sequence[float | None],
    *,
    scale: Scale = "group",
    batch_std: float | None = None,
    eps: float = EPS,
) -> GroupStats:
    """Advantages of one group (see module docstring). `batch_std` is required for `scale="batch"`."""
    verified = [float(s) for s in scores if s is not None]
    if not verified:
        return GroupStats(tuple(0.0 for _ in scores), None, None, 0, True)
    mean = _mean(verified)
    std = unbiased_std(verified)
    zero = len(verified) < 2 or abs(std) <= 1e-8
    if scale == "group":
        denom = std + eps
    elif scale == "batch":
        if batch_std is None:
            raise ValueError('scale="batch" needs batch_std')
        denom = batch_std + eps
    else:
        denom = 1.0
    advantages = tuple(0.0 if s is None or zero else (float(s) - mean) / denom for s in scores)
    return GroupStats(advantages, mean, std, len(verified), zero)


def batch_advantages(groups: Sequence[Sequence[float | None]], *, scale: Scale = "group") -> list[GroupStats]:
    """`group_advantages` for every group; `scale="batch"` uses the std of all verified scores."""
    batch_std = None
    if scale == "batch":
        batch_std = unbiased_std([float(s) for g in groups for s in g if s is not None])
    return [group_advantages(g, scale=scale, batch_std=batch_std) for g in groups]


def weighted_sum(parts: Sequence[float | None], weights: Sequence[float]) -> float | None:
    """Σ wᵢ·rᵢ over the verified parts (TRL's nansum); None when no part is verified."""
    if len(parts) != len(weights):
        raise ValueError(f"{len(parts)} rewards for {len(weights)} weights")
    kept = [w * float(p) for p, w in zip(parts, weights, strict=True) if p is not None]
    return math.fsum(kept) if kept else None


def combine(
    groups: Sequence[Sequence[Sequence[float | None]]],
    weights: Sequence[float],
    *,
    mode: Literal["sum_then_normalize", "normalize_then_sum"] = "sum_then_normalize",
    scale: Scale = "group",
) -> list[list[float]]:
    """Advantages for `groups[g][i][f]` (group, sample, reward function), per the module docstring."""
    if mode == "sum_then_normalize":
        summed = [[weighted_sum(parts, weights) for parts in g] for g in groups]
        return [list(s.advantages) for s in batch_advantages(summed, scale=scale)]
    n_funcs = len(weights)
    per_func = []
    for f in range(n_funcs):
        func_groups = [[parts[f] for parts in g] for g in groups]
        per_func.append([s.advantages for s in batch_advantages(func_groups, scale=scale)])
    sums: list[list[float | None]] = []
    for gi, g in enumerate(groups):
        row: list[float | None] = []
        for i, parts in enumerate(g):
            if all(p is None for p in parts):
                row.append(None)
            else:
                row.append(math.fsum(weights[f] * per_func[f][gi][i] for f in range(n_funcs)))
        sums.append(row)
    flat = [x for row in sums for x in row if x is not None]
    if not flat:
        return [[0.0] * len(row) for row in sums]
    mean, std = _mean(flat), unbiased_std(flat)
    return [[0.0 if x is None else (x - mean) / (std + EPS) for x in row] for row in sums]


def zero_variance_fraction(stats: Sequence[GroupStats]) -> float:
    """Share of groups that carry no learning signal (a reward-health metric)."""
    return sum(s.zero_variance for s in stats) / len(stats) if stats else 0.0
