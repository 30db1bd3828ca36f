"""`grpo_verified`: a veRL advantage estimator that keeps unverified samples out of training.

veRL has no notion of an unverified reward: a float is a float. Pair this estimator with
`VerlReward(..., fallback=math.nan)` so an unverified sample reaches veRL as a NaN score, then:

* group statistics (mean, std) are taken over the group's verified samples only;
* an unverified sample gets advantage 0 (no gradient), and so does every sample of a group with
  fewer than two verified samples (no baseline to compare against);
* the NaNs are replaced by 0 in `token_level_rewards` in place, so veRL's reward metrics stay finite
  (when the KL penalty is applied in the reward, `token_level_scores` is a separate tensor and keeps
  its NaN: count unverified samples with the `verified` key of `reward_extra_info` instead).

Enable it with `VERL_USE_EXTERNAL_MODULES=rubrics.adapters.verl_advantage` (veRL imports the module,
which registers the estimator) and `algorithm.adv_estimator=grpo_verified`. `norm_adv_by_std_in_grpo`
is read from the algorithm config as for veRL's own GRPO.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any

import torch

NAME = "grpo_verified"


def grpo_verified_advantage(
    token_level_rewards: torch.Tensor,
    response_mask: torch.Tensor,
    index: Any,
    epsilon: float = 1e-6,
    norm_adv_by_std_in_grpo: bool | None = None,
    config: Any = None,
    **kwargs: Any,
) -> tuple[torch.Tensor, torch.Tensor]:
    """(advantages, returns), both (batch, response_length), as veRL's GRPO but NaN-aware."""
    if norm_adv_by_std_in_grpo is None:
        getter = getattr(config, "get", None)
        norm_adv_by_std_in_grpo = bool(getter("norm_adv_by_std_in_grpo", True)) if getter else True
    with torch.no_grad():
        scores = token_level_rewards.sum(dim=-1)
        verified = ~torch.isnan(scores)
        groups: dict[Any, list[int]] = defaultdict(list)
        for i in range(scores.shape[0]):
            if verified[i]:
                groups[index[i]].append(i)
        advantage = torch.zeros_like(scores)
        for members in groups.values():
            if len(members) < 2:
                continue
            group = scores[members]
            centred = group - group.mean()
            if norm_adv_by_std_in_grpo:
                centred = centred / (group.std() + epsilon)
            advantage[members] = centred
        token_level_rewards.nan_to_num_(nan=0.0)
        advantages = advantage.unsqueeze(-1) * response_mask
    return advantages, advantages


def register() -> bool:
    """Register the estimator with veRL's registry; False when veRL is not installed."""
    try:
        from verl.trainer.ppo.core_algos import ADV_ESTIMATOR_REGISTRY, register_adv_est
    except ImportError:
        return False
    if ADV_ESTIMATOR_REGISTRY.get(NAME) is not grpo_verified_advantage:
        register_adv_est(NAME)(grpo_verified_advantage)
    return True


register()
