"""A scripted OpenAI-compatible judge server on 127.0.0.1 (FastAPI + uvicorn in a thread).

Tests script behaviours by a marker string that appears in the judge prompt (usually the question):
`script.set(marker, b1, b2, ...)` answers matching requests with b1, b2, ... in arrival order (the
last one repeats). A behaviour is a dict (`content`, `finish_reason`, `status`, `retry_after`,
`logprobs`, `refusal`, `hang`, `body`, `trickle_s`: send the reply one byte per that many seconds)
or a callable taking the request body and returning one.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import socket
import threading
from collections.abc import Callable
from typing import Any

import pytest
import uvicorn
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, PlainTextResponse, StreamingResponse

Behaviour = dict[str, Any] | Callable[[dict[str, Any]], dict[str, Any]]


class Script:
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.rules: dict[str, list[Behaviour]] = {}
        self.requests: list[dict[str, Any]] = []
        self.loop: asyncio.AbstractEventLoop | None = None
        self.release: asyncio.Event | None = None

    def set(self, marker: str, *behaviours: Behaviour) -> None:
        with self.lock:
            self.rules[marker] = list(behaviours)

    def reset(self) -> None:
        with self.lock:
            self.rules.clear()
            self.requests.clear()

    def matching(self, marker: str) -> list[dict[str, Any]]:
        with self.lock:
            return [r for r in self.requests if marker in _text(r)]

    def next(self, body: dict[str, Any]) -> Behaviour | None:
        text = _text(body)
        with self.lock:
            self.requests.append(body)
            for marker, queue in self.rules.items():
                if marker in text:
                    return queue.pop(0) if len(queue) > 1 else queue[0]
        return None


def _text(body: dict[str, Any]) -> str:
    return "\n".join(str(m.get("content", "")) for m in body.get("messages", []))


def completion(
    content: str, finish_reason: str = "stop", logprobs: list | None = None, refusal: str | None = None
) -> dict[str, Any]:
    choice: dict[str, Any] = {
        "index": 0,
        "message": {"role": "assistant", "content": content, "refusal": refusal},
        "finish_reason": finish_reason,
    }
    if logprobs is not None:
        choice["logprobs"] = {"content": logprobs}
    return {"id": "cmpl-test", "object": "chat.completion", "model": "scripted", "choices": [choice]}


async def _trickle(data: bytes, every_s: float):
    for i in range(len(data)):
        yield data[i : i + 1]
        await asyncio.sleep(every_s)  # the behaviour under test: a judge that keeps the socket busy


def build_app(script: Script) -> FastAPI:
    @contextlib.asynccontextmanager
    async def lifespan(_app: FastAPI):
        script.loop = asyncio.get_running_loop()
        script.release = asyncio.Event()
        yield

    app = FastAPI(lifespan=lifespan)

    @app.get("/v1/models")
    async def models():
        return {"object": "list", "data": [{"id": "scripted", "object": "model"}]}

    @app.post("/v1/chat/completions")
    async def chat(request: Request):
        body = await request.json()
        behaviour = script.next(body)
        if behaviour is None:
            return JSONResponse({"error": "no script matches this prompt"}, status_code=400)
        if callable(behaviour):
            behaviour = behaviour(body)
        if behaviour.get("hang"):
            assert script.release is not None
            await script.release.wait()  # released at teardown; the client times out first
        status = behaviour.get("status", 200)
        if status != 200:
            headers = {}
            if behaviour.get("retry_after") is not None:
                headers["Retry-After"] = str(behaviour["retry_after"])
            return JSONResponse({"error": f"scripted {status}"}, status_code=status, headers=headers)
        if "body" in behaviour:
            return PlainTextResponse(behaviour["body"])
        reply = completion(
            behaviour.get("content", ""),
            behaviour.get("finish_reason", "stop"),
            behaviour.get("logprobs"),
            behaviour.get("refusal"),
        )
        if behaviour.get("trickle_s"):
            return StreamingResponse(_trickle(json.dumps(reply).encode(), behaviour["trickle_s"]))
        return reply

    return app


class LoopbackServer:
    """Any ASGI app served by uvicorn on a free 127.0.0.1 port in a background thread."""

    def __init__(self, app) -> None:
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self.sock.getsockname()[1]}"
        self.server = uvicorn.Server(uvicorn.Config(app, log_level="warning", lifespan="on"))
        started = threading.Event()
        original_startup = self.server.startup

        async def startup(sockets=None):
            await original_startup(sockets=sockets)
            started.set()

        self.server.startup = startup  # type: ignore[method-assign]
        self.thread = threading.Thread(target=self.server.run, kwargs={"sockets": [self.sock]}, daemon=True)
        self.thread.start()
        assert started.wait(timeout=30), "loopback server did not start"

    def stop(self) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=30)
        self.sock.close()


@pytest.fixture
def serve():
    """`serve(app) -> base URL`; every server started this way is stopped after the test."""
    servers: list[LoopbackServer] = []

    def start(app) -> str:
        servers.append(LoopbackServer(app))
        return servers[-1].url

    yield start
    for server in servers:
        server.stop()


@pytest.fixture(scope="session")
def judge_server():
    """(base_url, script) of a scripted judge on a free loopback port, for the whole session."""
    script = Script()
    server = LoopbackServer(build_app(script))
    yield f"{server.url}/v1", script
    if script.loop is not None and script.release is not None:
        script.loop.call_soon_threadsafe(script.release.set)
    server.stop()


@pytest.fixture
def judge(judge_server):
    """The session server with a clean script for this test."""
    url, script = judge_server
    script.reset()
    return url, script
