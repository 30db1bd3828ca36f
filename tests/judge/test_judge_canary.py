"""Canary FPR through the scripted judge, and request bodies that vLLM's own request model accepts."""

from __future__ import annotations

import pytest

from rubrics.judge.canary import canaries, canary_report
from rubrics.judge.rubric import MASTER_KEYS, JudgeConfig, JudgeRubric


async def test_canary_report_counts_a_fooled_judge(judge):
    url, script = judge
    script.set("Q-fooled", {"content": "<score>10</score>"})
    script.set("Q-robust", {"content": "<score>0</score>"})
    async with JudgeRubric(JudgeConfig(base_url=url, model="scripted")) as rubric:
        fooled = await canary_report(rubric, "Q-fooled", "7")
        robust = await canary_report(rubric, "Q-robust", "7")
    n = len(canaries())
    assert fooled["fpr"] == 1.0 and fooled["n"] == n and "null_model" in fooled["fooled"]
    assert robust["fpr"] == 0.0 and robust["fooled"] == []
    assert len(script.matching("Q-fooled")) == n  # canaries bypass the short-circuit


def test_canary_set_covers_the_known_keys():
    probes = canaries()
    assert {"empty", "whitespace", "null_model", "length_padding"} <= set(probes)
    assert all(f"master_key:{k}" in probes for k in MASTER_KEYS)
    assert len(probes["length_padding"].split()) > 300 and probes["length_padding"].endswith("42.")


async def test_metrics_report_failure_rates(judge):
    url, script = judge
    script.set("Q-m1", {"content": "<score>3</score>"})
    script.set("Q-m2", {"content": "no verdict at all"})
    from rubrics.core import Sample

    async with JudgeRubric(JudgeConfig(base_url=url, model="scripted")) as rubric:
        for q in ("Q-m1", "Q-m1", "Q-m2"):
            await rubric.score(Sample([{"role": "user", "content": q}], "An answer.", "3"))
        await rubric.score(Sample([{"role": "user", "content": "Q-m1"}], ":", "3"))
        metrics = rubric.metrics()
    assert metrics["judge_calls"] == 2 and metrics["parse_error_rate"] == 0.5
    assert metrics["cache_hit_rate"] == pytest.approx(1 / 3) and metrics["short_circuits"] == 1


@pytest.mark.parametrize(
    "overrides",
    [
        {},
        {"mode": "json", "structured": True},
        {"mode": "choice", "labels": {"yes": 1, "no": 0}, "structured": True, "seed": 5},
        {"mode": "logprobs", "integer": True, "low": 1, "high": 9, "structured": True, "max_tokens": 1},
    ],
)
def test_request_bodies_validate_against_vllm_protocol(overrides):
    protocol = pytest.importorskip("vllm.entrypoints.openai.chat_completion.protocol")
    rubric = JudgeRubric(JudgeConfig(model="judge", **overrides))
    body = {"model": "judge", **rubric._body([{"role": "user", "content": "grade {this}"}], 0)}
    request = protocol.ChatCompletionRequest.model_validate(body)
    if overrides.get("structured") and overrides["mode"] != "json":
        assert request.structured_outputs is not None and request.structured_outputs.choice
    if overrides.get("mode") == "json":
        assert request.response_format.type == "json_schema"
    if overrides.get("mode") == "logprobs":
        assert request.logprobs and request.top_logprobs == 20
