"""The reward server's lean path for `/score` and `/score_batch` answers exactly as its FastAPI routes do."""

from __future__ import annotations

import asyncio
import json

import httpx
import pytest

from rubrics.core import ExactMatchRubric
from rubrics.server.app import ServerConfig, create_app


class Seen:
    """A pass-through ASGI middleware that records the paths it saw (it forces the FastAPI route)."""

    def __init__(self, app, paths: list[str]) -> None:
        self.app, self.paths = app, paths

    async def __call__(self, scope, receive, send):
        if scope["type"] == "http":
            self.paths.append(scope["path"])
        await self.app(scope, receive, send)


GOOD = {"rubric": "exact", "prompt": "q", "completion": "Paris", "answer": "Paris", "id": "a"}
ITEM = {k: v for k, v in GOOD.items() if k != "rubric"}  # a batch names its rubric once
BODIES = {
    "score": ("/score", json.dumps(GOOD)),
    "extra field refused": ("/score", json.dumps({**GOOD, "extra": [1, 2]})),
    "chat prompt": ("/score", json.dumps({**GOOD, "prompt": [{"role": "user", "content": "q"}]})),
    "lone surrogates": (
        "/score",
        '{"rubric":"exact","completion":"Paris\\ud800","answer":"Paris","id":"\\udc00"}',
    ),
    "not JSON": ("/score", "{not json"),
    "not UTF-8": ("/score", b'{"rubric": "exact", "completion": "\xff"}'),
    "empty body": ("/score", ""),
    "wrong type": ("/score", json.dumps({**GOOD, "completion": 3})),
    "missing field": ("/score", json.dumps({"rubric": "exact"})),
    "not an object": ("/score", "[1, 2]"),
    "unknown rubric": ("/score", json.dumps({**GOOD, "rubric": "nope"})),
    "batch": (
        "/score_batch",
        json.dumps({"rubric": "exact", "items": [ITEM, {**ITEM, "completion": "Rome"}]}),
    ),
    "batch wrong type": ("/score_batch", json.dumps({"rubric": "exact", "items": {"a": 1}})),
    "batch too large": ("/score_batch", json.dumps({"rubric": "exact", "items": [ITEM] * 3})),
}


def _comparable(response: httpx.Response) -> tuple:
    headers = {k: v for k, v in response.headers.items() if k not in ("date", "server")}
    try:
        body = response.json()
    except ValueError:
        return response.status_code, headers, response.text
    rows = body.get("results", [body]) if isinstance(body, dict) else []
    for row in rows:
        if isinstance(row, dict) and "latency_s" in row:
            assert row.pop("latency_s") >= 0
    headers.pop("content-length", None)  # the latency's digits vary
    return response.status_code, headers, body


async def test_lean_path_answers_as_the_fastapi_routes(serve):
    config = ServerConfig(max_batch=2)
    lean = create_app({"exact": ExactMatchRubric()}, config)
    routed = create_app({"exact": ExactMatchRubric()}, config)
    seen: list[str] = []
    routed.add_middleware(Seen, paths=seen)
    lean_url, routed_url = serve(lean), serve(routed)
    statuses = {}
    async with httpx.AsyncClient() as http:
        for name, (path, body) in BODIES.items():
            headers = {"content-type": "application/json"}
            a = await http.post(lean_url + path, content=body, headers=headers)
            b = await http.post(routed_url + path, content=body, headers=headers)
            assert _comparable(a) == _comparable(b), name
            statuses[name] = a.status_code
        docs = (await http.get(lean_url + "/openapi.json")).json()
        metrics = (await http.get(lean_url + "/metrics")).text
    assert seen.count("/score") == 11 and seen.count("/score_batch") == 3  # middleware never skipped
    assert statuses == {
        "score": 200, "extra field refused": 422, "chat prompt": 200, "lone surrogates": 200,
        "not JSON": 400, "not UTF-8": 400, "empty body": 400, "wrong type": 422, "missing field": 422,
        "not an object": 422, "unknown rubric": 404, "batch": 200, "batch wrong type": 422,
        "batch too large": 413,
    }  # fmt: skip
    assert {"/score", "/score_batch"} <= set(docs["paths"])
    # 3 scored on the lean path: score, chat prompt, lone surrogates (an extra field is refused)
    assert 'rlvr_reward_request_seconds_count{endpoint="score",rubric="exact"} 3.0' in metrics
    assert 'rlvr_reward_items_total{rubric="exact",status="ok"} 5.0' in metrics


async def _asgi(app, scope: dict, messages: list[dict]) -> list[dict]:
    inbox = list(messages)
    sent: list[dict] = []

    async def receive():
        if inbox:
            return inbox.pop(0)
        await asyncio.Event().wait()

    async def send(message):
        sent.append(message)

    await app(scope, receive, send)
    return sent


def _scope(path: str, method: str = "POST", **extra) -> dict:
    scope = {"type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1", "method": method}
    scope.update(scheme="http", path=path, raw_path=path.encode(), query_string=b"", root_path="")
    scope.update(headers=[(b"content-type", b"application/json")], client=("127.0.0.1", 1), server=None)
    return {**scope, **extra}


class Refuse:
    async def __call__(self, scope, receive, send):
        raise AssertionError(f"the FastAPI stack saw {scope['path']}")


@pytest.mark.parametrize(
    "chunks", [[json.dumps(GOOD).encode()], [b'{"rubric": "exact", ', json.dumps(GOOD)[1:].encode()]]
)
async def test_lean_path_skips_the_fastapi_stack_and_reads_chunked_bodies(chunks):
    app = create_app({"exact": ExactMatchRubric()})
    app.middleware_stack = Refuse()  # anything routed through FastAPI fails the test
    messages = [
        {"type": "http.request", "body": c, "more_body": i < len(chunks) - 1} for i, c in enumerate(chunks)
    ]
    sent = await _asgi(app, _scope("/score"), messages)
    assert sent[0]["status"] == 200 and json.loads(sent[1]["body"])["score"] == 1.0
    gone = await _asgi(app, _scope("/score"), [{"type": "http.disconnect"}])
    assert gone == []  # the client left before its body arrived: nothing scored, nothing sent
    for scope in (_scope("/score", method="GET"), _scope("/score", root_path="/api"), _scope("/healthz")):
        with pytest.raises(AssertionError, match="FastAPI stack"):  # not a hot route: FastAPI's
            await _asgi(app, scope, [{"type": "http.request", "body": b""}])
