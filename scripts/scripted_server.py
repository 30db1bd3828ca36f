"""A scripted OpenAI-compatible chat server on loopback: the policy (and judge) whose answers a test chose.

    python scripts/scripted_server.py PORT SCRIPT.json [REQUESTS.jsonl]

SCRIPT.json = {"replies": {user text: reply}, "verdicts": {token: reply}, "default": reply}:
* a request whose last user message equals a `replies` key gets that reply (the policy's answer);
* else the first `verdicts` token found anywhere in the request's messages picks the reply (a judge
  grading a scripted answer sees that answer quoted in its prompt);
* else `default`.
Serves POST /v1/chat/completions (JSON, or SSE when `stream` is true, with a usage chunk when asked)
and GET /v1/models. Each request (X-Session-ID header, messages) is appended to REQUESTS.jsonl.
"""

from __future__ import annotations

import json
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import uvicorn
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, StreamingResponse


def text_of(content: Any) -> str:
    if isinstance(content, str):
        return content
    return " ".join(p.get("text", "") for p in content or [] if isinstance(p, dict))


def choose(script: dict[str, Any], messages: list[dict[str, Any]]) -> str:
    last_user = next((text_of(m.get("content")) for m in reversed(messages) if m.get("role") == "user"), "")
    if last_user in script.get("replies", {}):
        return script["replies"][last_user]
    whole = "\n".join(text_of(m.get("content")) for m in messages)
    for token, reply in script.get("verdicts", {}).items():
        if token in whole:
            return reply
    return script.get("default", "scripted: no answer for this prompt")


def make_app(script: dict[str, Any], log: Path | None) -> FastAPI:
    app = FastAPI()

    @app.get("/v1/models")
    async def models() -> dict[str, Any]:
        return {"object": "list", "data": [{"id": "scripted", "object": "model", "owned_by": "rlvr"}]}

    @app.post("/v1/chat/completions")
    async def chat(request: Request) -> Any:
        body = await request.json()
        messages = body.get("messages", [])
        if log is not None:
            with log.open("a") as f:
                f.write(
                    json.dumps({"session": request.headers.get("x-session-id"), "messages": messages}) + "\n"
                )
        content = choose(script, messages)
        cid, created, model = (
            f"chatcmpl-{uuid.uuid4().hex[:12]}",
            int(time.time()),
            body.get("model", "scripted"),
        )
        usage = {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15}
        if not body.get("stream"):
            message = {"role": "assistant", "content": content}
            choice = {"index": 0, "message": message, "finish_reason": "stop"}
            return JSONResponse(
                {
                    "id": cid,
                    "object": "chat.completion",
                    "created": created,
                    "model": model,
                    "choices": [choice],
                    "usage": usage,
                }  # fmt: skip
            )
        base = {"id": cid, "object": "chat.completion.chunk", "created": created, "model": model}
        deltas = [{"role": "assistant", "content": ""}, {"content": content}, {}]
        chunks = [
            {**base, "choices": [{"index": 0, "delta": d, "finish_reason": "stop" if not d else None}]}
            for d in deltas
        ]
        if (body.get("stream_options") or {}).get("include_usage"):
            chunks.append({**base, "choices": [], "usage": usage})

        def events():
            for chunk in chunks:
                yield f"data: {json.dumps(chunk)}\n\n"
            yield "data: [DONE]\n\n"

        return StreamingResponse(events(), media_type="text/event-stream")

    return app


def main(argv: list[str]) -> None:
    port, script = int(argv[0]), json.loads(Path(argv[1]).read_text())
    log = Path(argv[2]) if len(argv) > 2 else None
    uvicorn.run(make_app(script, log), host="127.0.0.1", port=port, log_level="warning")


if __name__ == "__main__":
    main(sys.argv[1:])
