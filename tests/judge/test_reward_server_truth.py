"""The reward server says what it does: refused fields are named, the body is documented, readiness
reflects a judge that is down, and the command says where it listens and when it is ready."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import httpx

from environments.atropos_runtime.local_model import free_port
from rubrics.core import ExactMatchRubric, WeightedRubric
from rubrics.judge import JudgeConfig, JudgeRubric
from rubrics.server import create_app

ROOT = Path(__file__).resolve().parents[2]
ITEM = {"prompt": [{"role": "user", "content": "q"}], "completion": "Paris"}


async def test_an_unknown_field_is_a_422_that_names_it(serve):
    url = serve(create_app({"exact": ExactMatchRubric()}))
    async with httpx.AsyncClient(base_url=url) as http:
        one = await http.post("/score", json={"rubric": "exact", **ITEM, "gold": "Paris"})
        batch = await http.post(
            "/score_batch", json={"rubric": "exact", "items": [{**ITEM, "answers": ["x"]}]}
        )
        top = await http.post("/score_batch", json={"rubric": "exact", "items": [ITEM], "n": 2})
        fine = await http.post("/score", json={"rubric": "exact", **ITEM, "answer": "Paris"})
    assert one.status_code == 422 and one.json()["detail"][0]["loc"] == ["body", "gold"]
    assert batch.status_code == 422 and batch.json()["detail"][0]["loc"][-1] == "answers"
    assert top.status_code == 422 and top.json()["detail"][0]["loc"] == ["body", "n"]
    assert fine.status_code == 200 and fine.json()["score"] == 1.0


async def test_the_openapi_schema_documents_every_scoring_body(serve):
    url = serve(create_app({"exact": ExactMatchRubric()}))
    async with httpx.AsyncClient(base_url=url) as http:
        spec = (await http.get("/openapi.json")).json()
    schemas = spec["components"]["schemas"]
    for path, model in [
        ("/score", "ScoreRequest"),
        ("/score_batch", "BatchRequest"),
        ("/get_reward", "OpenRLHFRequest"),
    ]:
        body = spec["paths"][path]["post"]["requestBody"]["content"]["application/json"]["schema"]
        assert body["$ref"].endswith(f"/{model}")
    assert {"rubric", "completion", "answer", "prompt", "info", "id"} <= set(
        schemas["ScoreRequest"]["properties"]
    )
    assert schemas["ScoreRequest"]["required"] == ["completion", "rubric"]


async def test_readiness_follows_the_judge_endpoint(serve, judge):
    judge_url, _script = judge
    up = JudgeRubric(JudgeConfig(base_url=judge_url, model="scripted"))
    wrong_model = JudgeRubric(JudgeConfig(base_url=judge_url, model="judge"))
    down_url = f"http://127.0.0.1:{free_port()}/v1"  # nothing listens there
    down = JudgeRubric(JudgeConfig(base_url=down_url, model="scripted"))
    assert await up.unavailable() is None
    assert "does not serve model 'judge' (it serves: scripted)" in await wrong_model.unavailable()
    assert f"judge endpoint {down_url} is unreachable" in await down.unavailable()
    combined = WeightedRubric({"exact": ExactMatchRubric(), "judge": down})
    assert (await combined.unavailable()).startswith(f"judge: judge endpoint {down_url}")

    ready_url = serve(create_app({"judge": up, "exact": ExactMatchRubric()}))
    down_app_url = serve(create_app({"judge": down, "exact": ExactMatchRubric()}))
    async with httpx.AsyncClient() as http:
        ready = await _first(http, ready_url, lambda r: r.status_code == 200)
        not_ready = await _first(http, down_app_url, lambda r: r.json()["unavailable"])
    assert ready.json()["unavailable"] == {}
    assert not_ready.status_code == 503 and set(not_ready.json()["unavailable"]) == {"judge"}


async def _first(http: httpx.AsyncClient, url: str, done) -> httpx.Response:
    for _ in range(600):  # warm-up runs in the background: bounded wait for it
        r = await http.get(f"{url}/readyz")
        if done(r):
            return r
        await __import__("asyncio").sleep(0.01)
    raise AssertionError(f"{url}/readyz never reached the expected state: {r.json()}")


def test_the_command_says_where_it_listens_and_when_it_is_ready():
    port = free_port()
    cmd = [sys.executable, "-m", "rubrics.server.cli", "--rubric", "exact", "--port", str(port)]
    proc = subprocess.Popen(
        cmd, cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)}, stderr=subprocess.PIPE, text=True
    )
    try:
        first = proc.stderr.readline()
        second = proc.stderr.readline()  # printed by the server process once its rubrics warmed up
    finally:
        proc.terminate()
        proc.wait(30)
    assert first.startswith(f"rlvr-reward-server: listening on http://127.0.0.1:{port} (rubrics: exact;"), (
        first
    )
    assert second.startswith(f"rlvr-reward-server: ready on http://127.0.0.1:{port}"), second


def test_the_command_refuses_an_unknown_rubric_in_one_line():
    proc = subprocess.run([sys.executable, "-m", "rubrics.server.cli", "--rubric", "maths"], cwd=ROOT,
                          capture_output=True, text=True, env={**os.environ, "PYTHONPATH": str(ROOT)}, timeout=60)  # fmt: skip
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines()[-1] == (
        "rlvr-reward-server: error: unknown built-in rubric 'maths'; built-ins: code, exact, judge, math"
    )
    helptext = subprocess.run([sys.executable, "-m", "rubrics.server.cli", "--help"], cwd=ROOT, capture_output=True,
                              text=True, env={**os.environ, "PYTHONPATH": str(ROOT)}, timeout=60).stdout  # fmt: skip
    for needle in ("built-in rubrics", "math ", "judge ", "(default: 8008)", "(default: 256)", "examples:"):
        assert needle in helptext
