"""Reward-health summary of a batch of scored groups (log it per step; alert on the flags).

`reward_health(groups, lengths)` takes the `RewardResult`s of each group (and optionally the
completion length of each, in the same shape) and returns:
* `status.<name>`: share of samples per status; `unverified`: share with `score is None`;
* `failure.<kind>`: share of samples whose unverified reason starts with that kind (timeout,
  judge_error, parse_error, truncated, ...);
* `zero_variance_groups`: share of groups with no learning signal (see `rubrics.normalize`);
* `length_score_corr`: Pearson correlation of length and score over verified samples (a verbosity-bias
  signal for judges; None when undefined);
* `alerts`: human-readable lines for failure kinds above `alert_rate` (default 1%).
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Sequence
from typing import Any

from rubrics.core import RewardResult
from rubrics.normalize import batch_advantages, zero_variance_fraction


def pearson(xs: Sequence[float], ys: Sequence[float]) -> float | None:
    if len(xs) < 2:
        return None
    mx, my = math.fsum(xs) / len(xs), math.fsum(ys) / len(ys)
    sxy = math.fsum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True))
    sxx = math.fsum((x - mx) ** 2 for x in xs)
    syy = math.fsum((y - my) ** 2 for y in ys)
    return sxy / math.sqrt(sxx * syy) if sxx > 0 and syy > 0 else None


def reward_health(
    groups: Sequence[Sequence[RewardResult]],
    lengths: Sequence[Sequence[int]] | None = None,
    *,
    alert_rate: float = 0.01,
) -> dict[str, Any]:
    flat = [r for g in groups for r in g]
    n = len(flat) or 1
    out: dict[str, Any] = {}
    for status, count in Counter(r.status.value for r in flat).items():
        out[f"status.{status}"] = count / n
    unverified = [r for r in flat if r.score is None]
    out["unverified"] = len(unverified) / n
    kinds = Counter(r.reason.split(":", 1)[0].strip() or r.status.value for r in unverified)
    for kind, count in kinds.items():
        out[f"failure.{kind}"] = count / n
    out["zero_variance_groups"] = zero_variance_fraction(
        batch_advantages([[r.score for r in g] for g in groups])
    )
    out["length_score_corr"] = None
    if lengths is not None:
        pairs = [
            (float(ln), float(r.score))
            for g, lg in zip(groups, lengths, strict=True)
            for r, ln in zip(g, lg, strict=True)
            if r.score is not None
        ]
        out["length_score_corr"] = pearson([p[0] for p in pairs], [p[1] for p in pairs])
    out["alerts"] = [
        f"{kind}: {count / n:.1%} of samples (> {alert_rate:.0%})"
        for kind, count in sorted(kinds.items())
        if count / n > alert_rate
    ]
    return out
