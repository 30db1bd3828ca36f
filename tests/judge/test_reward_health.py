"""Reward-health summary: statuses, failure kinds, zero-variance groups, length correlation, alerts."""

from __future__ import annotations

import pytest

from rubrics.core import RewardResult, Status
from rubrics.health import pearson, reward_health


def ok(x: float) -> RewardResult:
    return RewardResult(score=x)


def test_health_summary():
    groups = [
        [ok(1.0), ok(0.0), RewardResult.unverified(Status.ERROR, "parse_error: no <score>")],
        [ok(0.5), ok(0.5), RewardResult.unverified(Status.TIMEOUT, "timeout: 60s")],
        [RewardResult.zero(Status.HACK, "master key"), ok(1.0), ok(1.0)],
    ]
    lengths = [[300, 10, 5], [100, 100, 7], [1, 500, 400]]
    h = reward_health(groups, lengths)
    assert h["unverified"] == pytest.approx(2 / 9)
    assert h["status.ok"] == pytest.approx(6 / 9) and h["status.hack"] == pytest.approx(1 / 9)
    assert h["failure.parse_error"] == pytest.approx(1 / 9) and h["failure.timeout"] == pytest.approx(1 / 9)
    assert h["zero_variance_groups"] == pytest.approx(1 / 3)  # group 2: two equal verified scores
    assert h["length_score_corr"] > 0.5  # longer answers scored higher here: a verbosity signal
    assert len(h["alerts"]) == 2 and h["alerts"][0].startswith("parse_error")


def test_pearson_edge_cases():
    assert pearson([1.0], [2.0]) is None
    assert pearson([1.0, 1.0], [0.0, 1.0]) is None
    assert pearson([1.0, 2.0, 3.0], [2.0, 4.0, 6.0]) == pytest.approx(1.0)
    assert reward_health([[ok(1.0), ok(0.0)]], alert_rate=0.01)["alerts"] == []
