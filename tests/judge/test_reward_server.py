"""The reward server over real HTTP on loopback: contracts, deadlines, backpressure, OpenRLHF, metrics."""

from __future__ import annotations

import asyncio
import threading

import httpx
import pytest

from rubrics.core import ExactMatchRubric, RewardResult, Rubric, Sample
from rubrics.judge import JudgeConfig, JudgeRubric
from rubrics.server import ServerConfig, create_app, strip_prompt


class Hang(Rubric):
    name = "hang"

    async def _score(self, sample: Sample) -> RewardResult:
        await asyncio.Event().wait()
        raise AssertionError("unreachable")


class Gate(Rubric):
    """Blocks every item until the test opens the gate; tells the test when `expect` items are in."""

    name = "gate"

    def __init__(self, expect: int) -> None:
        self.expect, self.entered_n = expect, 0
        self.entered, self.open = threading.Event(), threading.Event()

    async def _score(self, sample: Sample) -> RewardResult:
        self.entered_n += 1
        if self.entered_n >= self.expect:
            self.entered.set()
        await asyncio.to_thread(self.open.wait, 30)
        return RewardResult(score=1.0)


def item(completion: str, answer=None, **kw) -> dict:
    return {"prompt": [{"role": "user", "content": "q"}], "completion": completion, "answer": answer, **kw}


async def test_score_and_batch_contracts(serve):
    url = serve(create_app({"exact": ExactMatchRubric()}))
    async with httpx.AsyncClient(base_url=url) as http:
        one = (await http.post("/score", json={"rubric": "exact", **item("Paris", "Paris", id="a1")})).json()
        batch = (await http.post("/score_batch", json={"rubric": "exact", "items": [
            item("Paris", "Paris", id="b1"), item("Rome", "Paris", id="b2"), item("x", None, id="b3")]})).json()  # fmt: skip
        unknown = await http.post("/score", json={"rubric": "nope", **item("x")})
    assert one["score"] == 1.0 and one["status"] == "ok" and one["id"] == "a1" and one["latency_s"] >= 0
    assert [r["score"] for r in batch["results"]] == [1.0, 0.0, None]
    assert [r["id"] for r in batch["results"]] == ["b1", "b2", "b3"]
    assert batch["results"][2]["status"] == "error"
    assert unknown.status_code == 404


async def test_deadline_turns_into_timeout_status(serve):
    url = serve(create_app({"hang": Hang()}, ServerConfig(item_timeout_s=0.1)))
    async with httpx.AsyncClient(base_url=url) as http:
        r = (await http.post("/score_batch", json={"rubric": "hang", "items": [item("a"), item("b")]})).json()
    assert [x["status"] for x in r["results"]] == ["timeout", "timeout"]
    assert all(x["score"] is None for x in r["results"])


async def test_saturation_gets_429_with_retry_after(serve):
    gate = Gate(expect=2)
    url = serve(create_app({"gate": gate}, ServerConfig(max_inflight=2, retry_after_s=3)))
    async with httpx.AsyncClient(base_url=url, timeout=30) as http:
        first = asyncio.create_task(
            http.post("/score_batch", json={"rubric": "gate", "items": [item("a"), item("b")]})
        )
        assert await asyncio.to_thread(gate.entered.wait, 30)
        rejected = await http.post("/score", json={"rubric": "gate", **item("c")})
        gate.open.set()
        accepted = await first
        metrics = (await http.get("/metrics")).text
    assert rejected.status_code == 429 and rejected.headers["retry-after"] == "3"
    assert [r["score"] for r in accepted.json()["results"]] == [1.0, 1.0]
    assert "rlvr_reward_rejected_total 1" in metrics
    assert 'rlvr_reward_items_total{rubric="gate",status="ok"} 2' in metrics


async def test_openrlhf_get_reward_strips_prompt_and_special_tokens(serve):
    config = ServerConfig(openrlhf_rubric="exact", openrlhf_fallback=-1.0)
    url = serve(create_app({"exact": ExactMatchRubric()}, config))
    prompt = "<|im_start|>user\nCapital of France?<|im_end|>\n<|im_start|>assistant\n"
    body = {
        "query": [
            prompt + "Paris<|im_end|>",
            prompt + "Rome<|im_end|><|endoftext|>",
            "<s>" + prompt + "x</s>",
        ],
        "prompts": [prompt, prompt, prompt],
        "labels": ["Paris", "Paris", None],
    }
    async with httpx.AsyncClient(base_url=url) as http:
        r = (await http.post("/get_reward", json=body)).json()
        bad = await http.post("/get_reward", json={"query": ["a"], "prompts": []})
    assert r["rewards"] == r["scores"] == [1.0, 0.0, -1.0]
    assert r["extra_logs"]["unverified"] == [pytest.approx(1 / 3)] * 3
    assert bad.status_code == 422


def test_strip_prompt_cases():
    tokens = ("<|im_end|>", "<|endoftext|>")
    assert strip_prompt("PROMPT answer<|im_end|>", "PROMPT", tokens) == "answer"
    assert strip_prompt("<bos>PROMPT answer", "PROMPT", tokens) == "answer"  # BOS left in front
    assert strip_prompt("no prompt here<|endoftext|>", "PROMPT", tokens) == "no prompt here"


async def test_health_readiness_and_judge_single_flight(serve, judge):
    judge_url, script = judge
    script.set("Q-server", {"content": "<score>5</score>"})
    rubric = JudgeRubric(JudgeConfig(base_url=judge_url, model="scripted"))
    url = serve(create_app({"judge": rubric}))
    items = [{"prompt": [{"role": "user", "content": "Q-server"}], "completion": "same", "answer": "x"}] * 5
    async with httpx.AsyncClient(base_url=url) as http:
        assert (await http.get("/healthz")).json() == {"status": "ok"}
        assert (await http.get("/readyz")).json()["rubrics"] == ["judge"]
        r = (await http.post("/score_batch", json={"rubric": "judge", "items": items})).json()
    assert [x["score"] for x in r["results"]] == [0.5] * 5
    assert len(script.matching("Q-server")) == 1  # 5 identical items -> one judge call
