"""The reward server over real HTTP on loopback: contracts, deadlines, backpressure, OpenRLHF, metrics."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx
import pytest

from rubrics.core import ExactMatchRubric, RewardResult, Rubric, Sample
from rubrics.judge.rubric import JudgeConfig, JudgeRubric
from rubrics.math import MathRubric
from rubrics.server.app import ServerConfig, create_app, strip_prompt
from rubrics.server.cli import build_rubrics

ROOT = Path(__file__).resolve().parents[2]


def free_port() -> int:
    from environments.atropos_runtime.local_model import free_port as pick

    return pick()


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


async def test_queue_then_429_only_under_real_overload(serve):
    gate = Gate(expect=2)
    config = ServerConfig(max_inflight=2, max_queued=1, retry_after_s=3)
    app = create_app({"gate": gate}, config)
    url = serve(app)
    async with httpx.AsyncClient(base_url=url, timeout=30) as http:
        first = asyncio.create_task(
            http.post("/score_batch", json={"rubric": "gate", "items": [item("a"), item("b")]})
        )
        assert await asyncio.to_thread(gate.entered.wait, 30)
        waiting = asyncio.create_task(http.post("/score", json={"rubric": "gate", **item("c")}))
        while app.state.scorer.queued["gate"] < 1:  # the third item waits for a slot, no 429
            await asyncio.sleep(0.005)
        queued_metrics = (await http.get("/metrics")).text
        rejected = await http.post("/score", json={"rubric": "gate", **item("d")})  # 2 + 1 + 1 > 2 + 1
        gate.open.set()
        accepted, late = await first, await waiting
        metrics = (await http.get("/metrics")).text
    assert "rlvr_reward_queued 1.0" in queued_metrics and "rlvr_reward_inflight 2.0" in queued_metrics
    assert rejected.status_code == 429 and rejected.headers["retry-after"] == "3"
    assert [r["score"] for r in accepted.json()["results"]] == [1.0, 1.0] and late.json()["score"] == 1.0
    assert "rlvr_reward_rejected_total 1.0" in metrics
    assert 'rlvr_reward_items_total{rubric="gate",status="ok"} 3.0' in metrics


class Peak(Rubric):
    """Exact match that records how many items it was scoring at once."""

    name = "peak"

    def __init__(self) -> None:
        self.now = self.peak = 0

    async def _score_group(self, samples):
        self.now += len(samples)
        self.peak = max(self.peak, self.now)
        await asyncio.sleep(0.01)
        self.now -= len(samples)
        return [RewardResult(score=1.0) for _ in samples]

    async def _score(self, sample):
        return (await self._score_group([sample]))[0]


async def test_idle_server_scores_a_batch_larger_than_max_inflight_in_slices(serve):
    rubric = Peak()
    url = serve(create_app({"peak": rubric}, ServerConfig(max_inflight=4, max_queued=0, max_batch=20)))
    async with httpx.AsyncClient(base_url=url, timeout=30) as http:
        big = await http.post(
            "/score_batch", json={"rubric": "peak", "items": [item(str(i)) for i in range(10)]}
        )
        too_big = await http.post("/score_batch", json={"rubric": "peak", "items": [item("x")] * 21})
    assert big.status_code == 200 and [r["score"] for r in big.json()["results"]] == [1.0] * 10
    assert rubric.peak <= 4  # never more than max_inflight at once
    assert too_big.status_code == 413
    narrow = Peak()
    url = serve(create_app({"peak": narrow}, ServerConfig(max_inflight=4, rubric_inflight={"peak": 2})))
    async with httpx.AsyncClient(base_url=url, timeout=30) as http:
        sliced = await http.post(
            "/score_batch", json={"rubric": "peak", "items": [item(str(i)) for i in range(7)]}
        )
    assert sliced.status_code == 200 and narrow.peak <= 2  # the rubric's own window wins


async def test_lone_surrogates_and_bad_bodies_are_not_500(serve):
    url = serve(create_app({"exact": ExactMatchRubric()}))
    raw = '{"rubric": "exact", "prompt": "q", "completion": "Paris\\ud800", "answer": "Paris", "id": "x\\udc00y"}'
    async with httpx.AsyncClient(base_url=url) as http:
        lone = await http.post("/score", content=raw, headers={"content-type": "application/json"})
        batch = await http.post(
            "/score_batch",
            content='{"rubric": "exact", "items": [{"completion": "a", "id": "\\ud83d"}]}',
        )
        garbage = await http.post("/score", content=b"{not json")
        invalid = await http.post("/score", json={"rubric": "exact"})
    assert lone.status_code == 200, lone.text
    assert lone.json()["id"] == "x\ufffdy" and lone.json()["status"] == "ok"
    assert batch.status_code == 200 and batch.json()["results"][0]["id"] == "\ufffd"
    assert garbage.status_code == 400 and invalid.status_code == 422


async def test_results_cache_is_bounded_and_skips_unverified_and_stochastic(serve, judge):
    judge_url, script = judge
    script.set("Q-cache", {"content": "<score>5</score>"})
    stochastic = JudgeRubric(JudgeConfig(base_url=judge_url, model="scripted", temperature=1.0))
    app = create_app({"exact": ExactMatchRubric(), "sampled": stochastic}, ServerConfig(cache_size=3))
    url = serve(app)
    async with httpx.AsyncClient(base_url=url) as http:
        first = (await http.post("/score", json={"rubric": "exact", **item("Paris", "Paris")})).json()
        again = (await http.post("/score", json={"rubric": "exact", **item("Paris", "Paris")})).json()
        for i in range(5):
            await http.post("/score", json={"rubric": "exact", **item(f"x{i}", "Paris")})
        await http.post("/score", json={"rubric": "exact", **item("no gold")})  # unverified: not cached
        q = [{"role": "user", "content": "Q-cache"}]
        for _ in range(2):
            await http.post(
                "/score", json={"rubric": "sampled", "prompt": q, "completion": "c", "answer": "r"}
            )
        metrics = (await http.get("/metrics")).text
    assert (first["cache_hit"], again["cache_hit"]) == (False, True) and again["score"] == 1.0
    assert len(app.state.scorer.cache) == 3 and "rlvr_reward_cache_entries 3.0" in metrics
    assert 'rlvr_reward_cache_total{outcome="hit",rubric="exact"} 1.0' in metrics
    assert len(script.matching("Q-cache")) == 2  # temperature > 0: judged every time
    assert 'rlvr_reward_request_seconds_bucket{endpoint="score",le="0.005",rubric="exact"}' in metrics


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
        r = (await http.post("/score_batch", json={"rubric": "judge", "items": items})).json()
    assert [x["score"] for x in r["results"]] == [0.5] * 5
    assert len(script.matching("Q-server")) == 1  # 5 identical items -> one judge call


class SlowWarmUp(Rubric):
    name = "slow_warm_up"

    def __init__(self) -> None:
        self.go = threading.Event()

    async def warm_up(self) -> None:
        await asyncio.to_thread(self.go.wait, 30)

    async def _score(self, sample):
        return RewardResult(score=1.0)


async def _ready(http: httpx.AsyncClient) -> httpx.Response:
    for _ in range(3000):  # the warm-up runs in the background: wait for it, bounded
        r = await http.get("/readyz")
        if r.status_code == 200:
            return r
        await asyncio.sleep(0.01)
    raise AssertionError("never ready")


async def test_ready_only_after_every_rubric_warmed_up(serve):
    slow, math = SlowWarmUp(), MathRubric(workers=1)
    url = serve(create_app({"slow": slow, "math": math}, owns_rubrics=True))
    async with httpx.AsyncClient(base_url=url) as http:
        before = await http.get("/readyz")
        alive = await http.get("/healthz")
        slow.go.set()
        ready = await _ready(http)
        assert math._pool is not None and math._pool.usable  # CAS workers started before ready
        scored = (await http.post("/score", json={"rubric": "math", **item("\\boxed{2}", "2")})).json()
    assert before.status_code == 503 and alive.status_code == 200
    assert ready.json()["rubrics"] == ["math", "slow"] and scored["score"] == 1.0


def test_console_command_and_app_factory(tmp_path):
    rubrics = build_rubrics(["exact", "mine=rubrics.core:ExactMatchRubric"])
    assert set(rubrics) == {"exact", "mine"} and isinstance(rubrics["mine"], ExactMatchRubric)
    with pytest.raises(ValueError):
        build_rubrics(["nope"])
    port = free_port()
    cmd = [
        sys.executable,
        "-m",
        "rubrics.server.cli",
        "--rubric",
        "exact",
        "--port",
        str(port),
        "--max-inflight",
        "8",
    ]
    proc = subprocess.Popen(cmd, cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)})
    try:
        with httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=5) as http:
            for _ in range(600):
                try:
                    if http.get("/readyz").status_code == 200:
                        break
                except httpx.TransportError:
                    pass
                time.sleep(0.05)
            r = http.post("/score", json={"rubric": "exact", **item("Paris", "Paris")}).json()
        assert r["score"] == 1.0
    finally:
        proc.terminate()
        proc.wait(30)
