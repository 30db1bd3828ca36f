"""`trace_result`: a v1 trace and its token session → the tri-state reward (no verifiers needed: the
trace and episode are duck-typed as v1 hands them over). Everything but a clean, fully scored trace
whose session matches it is unverified with a reason, never 0."""

from __future__ import annotations

from types import SimpleNamespace as NS

import pytest

from environments.vf_bridge.v1_endpoint import Session
from environments.vf_bridge.v1_env import trace_result


def trace(**kw):
    base = dict(ok=True, errors=[], stop_condition="agent_completed", last_reply="5 ",
                rewards={"exact": NS(score=1.0, weight=2.0), "fmt": NS(score=0.5, weight=1.0)},
                metrics={"chars": 2.0, "none": None})  # fmt: skip
    return NS(**{**base, **kw})


def session(**kw):
    s = Session("t1", messages=[{"role": "user", "content": "q"}, {"role": "assistant", "content": " 5"}],
                sampling=[{"temperature": 0.7, "top_p": 1.0, "max_tokens": 16}])  # fmt: skip
    for k, v in kw.items():
        setattr(s, k, v)
    return s


EPISODE = NS(ok=True, errors=[])
SAMPLING = {"temperature": 0.7, "top_p": 1.0, "max_tokens": 16}


def test_a_clean_trace_scores_its_weighted_rewards_with_metrics():
    result = trace_result(trace(), EPISODE, session(), SAMPLING)
    assert result.verified and result.score == 2.5
    assert result.components == {"reward/exact": 1.0, "reward/fmt": 0.5, "chars": 2.0}


@pytest.mark.parametrize(
    ("t", "ep", "s", "reason"),
    [
        (trace(errors=[NS(type="TaskError", message="scorer down")], ok=False), EPISODE, session(),
         "v1 TaskError: scorer down"),
        (trace(), NS(ok=False, errors=[NS(type="HarnessError", message="uv failed")]), session(),
         "v1 HarnessError: uv failed"),
        (trace(ok=False), EPISODE, session(), "v1 trace not ok"),
        (trace(rewards={"exact": None}), EPISODE, session(), "without a score: ['exact']"),
        (trace(rewards={}), EPISODE, session(), "none defined"),
        (trace(), EPISODE, None, "never called the model"),
        (trace(), EPISODE, session(failure="history differs"), "endpoint session: history differs"),
        (trace(last_reply="6"), EPISODE, session(), "not the recorded last turn"),
        (trace(), EPISODE, session(sampling=[{"temperature": 1.0, "top_p": 1.0}]), "temperature=1.0, not 0.7"),
    ],
)  # fmt: skip
def test_anything_else_is_unverified_with_its_reason(t, ep, s, reason):
    result = trace_result(t, ep, s, SAMPLING)
    assert result.score is None and result.status.value == "error" and reason in result.reason
