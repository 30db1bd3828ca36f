"""Group advantages: NaN-aware, and numerically equal to TRL's GRPO formula on identical inputs."""

from __future__ import annotations

import math
import random

import pytest
import torch

from rubrics.normalize import (
    batch_advantages,
    combine,
    group_advantages,
    unbiased_std,
    weighted_sum,
    zero_variance_fraction,
)


def trl_reference(rows: list[list[float | None]], scale: str = "group") -> list[list[float]]:
    """TRL GRPOTrainer's advantage computation (>= 1.7), re-stated in torch on float32 tensors:
    NaN for unscorable rows, nanmean / Bessel-corrected nanstd per group, (r - mean) / (std + 1e-4),
    unscorable advantages forced to 0."""
    g = len(rows[0])
    rewards = torch.tensor([[math.nan if x is None else x for x in row] for row in rows], dtype=torch.float32)
    flat = rewards.view(-1)

    def nanstd(t: torch.Tensor) -> torch.Tensor:
        variance = torch.nanmean((t - torch.nanmean(t, keepdim=True)) ** 2)
        count = torch.sum(~torch.isnan(t))
        return torch.sqrt(variance * count / (count - 1))

    mean = torch.nanmean(rewards, dim=1).repeat_interleave(g)
    if scale == "group":
        std = torch.stack([nanstd(r) for r in rewards]).repeat_interleave(g)
    else:
        std = nanstd(flat).expand_as(flat)
    adv = flat - mean
    if scale != "none":
        adv = adv / (std + 1e-4)
    adv[torch.isnan(flat)] = 0.0
    return adv.view(-1, g).tolist()


def random_groups(seed: int, n_groups: int = 6, size: int = 8) -> list[list[float | None]]:
    rng = random.Random(seed)
    groups = []
    for _ in range(n_groups):
        row = [rng.choice([0.0, 1.0, rng.random() * 3 - 1]) for _ in range(size)]
        for i in rng.sample(range(size), rng.randint(0, size - 2)):  # keep >= 2 verified per group
            row[i] = None
        groups.append(row)
    return groups


@pytest.mark.parametrize("scale", ["group", "batch", "none"])
@pytest.mark.parametrize("seed", range(5))
def test_matches_trl_formula(seed, scale):
    groups = random_groups(seed)
    ours = [list(s.advantages) for s in batch_advantages(groups, scale=scale)]
    expected = trl_reference(groups, scale)
    for got_row, exp_row in zip(ours, expected, strict=True):
        assert got_row == pytest.approx(exp_row, abs=1e-4, rel=1e-4)


def test_known_values_unbiased_std():
    stats = group_advantages([1.0, 0.0, 0.0, 1.0])
    std = math.sqrt(1 / 3)  # unbiased: Σ(x-0.5)² = 1, / (4-1)
    assert stats.std == pytest.approx(std)
    a = 0.5 / (std + 1e-4)
    assert stats.advantages == pytest.approx((a, -a, -a, a))
    assert unbiased_std([2.0]) == 0.0


def test_unverified_samples_are_excluded_and_get_zero():
    with_none = group_advantages([1.0, None, 0.0, None])
    without = group_advantages([1.0, 0.0])
    assert with_none.advantages[0] == without.advantages[0]
    assert with_none.advantages[1] == with_none.advantages[3] == 0.0
    assert with_none.n_verified == 2 and with_none.mean == 0.5


def test_degenerate_groups_are_flagged_with_zero_advantages():
    stats = batch_advantages([[None, None], [0.7, 0.7, 0.7], [None, 1.0], [1.0, 0.0]])
    assert [s.zero_variance for s in stats] == [True, True, True, False]
    assert all(a == 0.0 for s in stats[:3] for a in s.advantages)
    assert stats[0].mean is None and stats[0].n_verified == 0
    assert zero_variance_fraction(stats) == 0.75


def test_weighted_sum_is_nan_aware():
    assert weighted_sum([1.0, None, 0.5], [1.0, 2.0, 2.0]) == 2.0
    assert weighted_sum([None, None], [1.0, 1.0]) is None
    with pytest.raises(ValueError):
        weighted_sum([1.0], [1.0, 2.0])


def test_sum_then_normalize_matches_trl_on_summed_rewards():
    groups = [[[1.0, 0.5], [0.0, None], [None, None], [1.0, 1.0]]]
    adv = combine(groups, [1.0, 0.5])
    expected = trl_reference([[1.25, 0.0, None, 1.5]])
    assert adv[0] == pytest.approx(expected[0], abs=1e-4)
    assert adv[0][2] == 0.0


def test_normalize_then_sum_by_hand():
    groups = [[[1.0, 0.0], [0.0, 1.0]], [[1.0, 1.0], [0.0, 1.0]]]
    adv = combine(groups, [1.0, 1.0], mode="normalize_then_sum")
    a = 0.5 / (math.sqrt(0.5) + 1e-4)  # per-function group advantage magnitude for a {1, 0} pair
    sums = [a - a, -a + a, a + 0.0, -a + 0.0]  # function 2 has zero variance in group 2
    mean, std = sum(sums) / 4, unbiased_std(sums)
    assert [x for row in adv for x in row] == pytest.approx([(s - mean) / (std + 1e-4) for s in sums])
