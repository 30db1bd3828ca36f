"""A loopback OpenAI-compatible chat endpoint backed by the policy's token server, recording every
turn of every session with its exact token ids, mask and logprobs (the v1 Verifiers bridge's model).

A verifiers v1 harness runs as its own program and calls `POST {base_url}/chat/completions` (through
v1's interception server) with header `X-Session-ID` = the trace id, the same on every turn of a
rollout. This endpoint (`ChatEndpoint`, FastAPI on 127.0.0.1, a free port) turns each request into
one token-in/token-out sample of the policy (`episodes.sample_tokens`: the ServerManager's
`tokens_and_logprobs_completion`, i.e. ManagedServer's call; `servers.VLLMTokenServer` on stock vLLM):

* the **first** request of a session renders its messages with the chat template
  (`ChatTokens.prompt`, with the offered tools);
* every **later** request must repeat the session's recorded conversation exactly (the messages sent
  so far and the assistant replies this endpoint returned, compared by role, text and tool calls: `plain_message`) and add only
  new user/tool messages; those are rendered alone and appended to the exact previous ids
  (`ChatTokens.env_turn`), never re-tokenising earlier turns. A request whose history differs (an
  edited or dropped turn, a forged assistant message) is refused (HTTP 409) and the session is marked
  failed: its rollout is unverified, never trained on.
* the context is capped by the session's token budget (a turn's `max_tokens` is cut to what is left;
  a context that is already full is refused and the session fails with `token_budget`).

`SessionStore.pop(id)` hands the bridge a session's record (`Session`: messages, segments, turns,
failure) once its rollout ended; the bridge matches it to the trace by that id (identity). A
request whose inference fails changes nothing recorded (HTTP 503), so the harness may retry it.
A session no request has touched for `idle_ttl_s` (default max(600 s, 4 x the request timeout)) is
dropped and counted in `evicted`: what bounds the store when a retried trace is never popped.
Tools (a v1 Toolset's MCP tools, offered by the harness in `tools`): with a tool parser
(`SessionStore(tool_parser=...)`, `environments.vf_bridge.tool_calls`, the classic bridge's parser) the first
request renders them through the chat template (`tools=`), each sampled text is parsed into OpenAI
`tool_calls` (ids minted here; finish_reason `tool_calls`; a malformed call becomes one call with the
raw text as `arguments`, as in the classic path, which the harness answers with its own JSON
error) and the next request must repeat that assistant message exactly (content and tool calls as
returned) and add `tool` messages answering those calls' ids, rendered after the exact ids (masked
out). Every request of a session must offer the same tools. Without a parser, requests offering tools are refused (HTTP 400). `stream: true` is
answered as server-sent events (one content chunk, then the finish chunk and an optional usage chunk).
The body's `model` selects the split (`MODEL_EVAL` samples on the eval servers); `temperature`,
`top_p` and `max_tokens` come from the body (the bridge sends its own generation parameters there
and checks each recorded turn's).
"""

from __future__ import annotations

import asyncio
import json
import logging
import socket
import time
import uuid
from collections.abc import AsyncIterator, Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

import uvicorn
from fastapi import FastAPI, Header, Request
from fastapi.responses import JSONResponse, StreamingResponse

from environments.atropos_runtime.episodes import TurnRecord, sample_tokens
from environments.atropos_runtime.turn_tokens import ChatTokens, Segment
from environments.vf_bridge.tool_calls import ToolCallParser

log = logging.getLogger(__name__)

MODEL_TRAIN = "rlvr-policy"
MODEL_EVAL = "rlvr-policy-eval"
SAMPLING_KEYS = ("temperature", "top_p")


class SessionError(Exception):
    """A request that cannot extend its session (HTTP `status`; the session fails when `fatal`)."""

    def __init__(self, status: int, message: str, fatal: bool = True) -> None:
        super().__init__(message)
        self.status, self.fatal = status, fatal


@dataclass
class Session:
    """One rollout's model calls. `messages` is the conversation as the harness must repeat it
    (messages as sent, assistant replies as returned); `segments` the exact ids of the sequence;
    `sampling` each turn's temperature / top_p / max_tokens; `failure` why the session cannot be
    trusted (None while it is fine), `stop_reason` set with it; `inference_errors` the model calls
    that failed (HTTP 503, nothing recorded)."""

    id: str
    messages: list[dict[str, Any]] = field(default_factory=list)
    segments: list[Segment] = field(default_factory=list)
    turns: list[TurnRecord] = field(default_factory=list)
    sampling: list[dict[str, Any]] = field(default_factory=list)
    failure: str | None = None
    stop_reason: str = ""
    inference_errors: list[str] = field(default_factory=list)  # failed (retryable) model calls
    split: str = "train"
    tools: list[dict[str, Any]] | None = None  # the tools every request of the session offers
    lock: asyncio.Lock = field(default_factory=asyncio.Lock, repr=False)
    last_used: float = 0.0  # the store's clock at its latest request

    @property
    def tokens(self) -> list[int]:
        return [t for seg in self.segments for t in seg.ids]


def plain_message(message: Mapping[str, Any]) -> dict[str, Any]:
    """A chat message as `{role, content}` with text content (content parts joined, None as ""),
    plus an assistant's `tool_calls` (`{id, type, function: {name, arguments}}` only) and a tool
    result's `tool_call_id` / `name`: the one form history is compared in. Raises `SessionError` for
    what this endpoint cannot represent exactly (images)."""
    role = message.get("role")
    if role not in ("system", "user", "assistant", "tool", "developer"):
        raise SessionError(400, f"unsupported message role {role!r}")
    out: dict[str, Any] = {"role": role, "content": _text(message.get("content"))}
    if message.get("tool_calls"):
        if role != "assistant":
            raise SessionError(400, f"tool_calls on a {role!r} message")
        out["tool_calls"] = [_call(c) for c in message["tool_calls"]]
    if role == "tool":
        out["tool_call_id"] = str(message.get("tool_call_id") or "")
        if message.get("name"):
            out["name"] = str(message["name"])
    return out


def _call(call: Any) -> dict[str, Any]:
    function = call.get("function") if isinstance(call, Mapping) else None
    if not isinstance(function, Mapping):
        raise SessionError(400, f"malformed tool call in history: {str(call)[:80]!r}")
    arguments = function.get("arguments")
    return {
        "id": str(call.get("id") or ""),
        "type": "function",
        "function": {
            "name": str(function.get("name") or ""),
            "arguments": arguments if isinstance(arguments, str) else json.dumps(arguments),
        },
    }


def _text(content: Any) -> str:
    if isinstance(content, list):
        texts = []
        for part in content:
            if not isinstance(part, Mapping) or part.get("type") != "text":
                kind = part.get("type") if isinstance(part, Mapping) else type(part).__name__
                raise SessionError(400, f"content part of type {kind!r} is not supported (text only)")
            texts.append(str(part.get("text") or ""))
        return "".join(texts)
    if content is None:
        return ""
    if not isinstance(content, str):
        raise SessionError(400, f"message content must be text, got {type(content).__name__}")
    return content


class SessionStore:
    """The sessions of one endpoint, and how a request extends one (see module docstring)."""

    def __init__(
        self,
        chat: ChatTokens,
        server: Any,
        token_budget: int,
        request_timeout_s: float = 300.0,
        tool_parser: ToolCallParser | None = None,
        idle_ttl_s: float | None = None,
        clock: Callable[[], float] = time.monotonic,
    ):
        self.chat, self.server, self.tool_parser = chat, server, tool_parser
        self.token_budget = token_budget
        self.request_timeout_s = request_timeout_s
        self.sessions: dict[str, Session] = {}
        self.requests = 0
        # a session nobody asked for in this long is dropped (a retried trace the bridge was never told
        # of, verifiers 0.3.1): far longer than any model call, so a live rollout never loses its record
        self.idle_ttl_s = idle_ttl_s if idle_ttl_s is not None else max(600.0, 4 * request_timeout_s)
        self.clock = clock
        self.evicted = 0
        self._next_sweep = clock() + self.idle_ttl_s / 4

    def pop(self, session_id: str) -> Session | None:
        """The finished session's record (None when the rollout never called the model)."""
        return self.sessions.pop(session_id, None)

    def _evict_idle(self, now: float) -> None:
        """Drop the sessions idle for over `idle_ttl_s` (never one with a call in progress)."""
        stale = [
            k for k, s in self.sessions.items() if now - s.last_used > self.idle_ttl_s and not s.lock.locked()
        ]
        for key in stale:
            del self.sessions[key]
        if stale:
            self.evicted += len(stale)
            log.warning("v1 endpoint: dropped %d session(s) idle for over %.0f s (%d so far)",
                        len(stale), self.idle_ttl_s, self.evicted)  # fmt: skip
        self._next_sweep = now + self.idle_ttl_s / 4

    def fail(self, session: Session, reason: str, stop_reason: str = "endpoint_error") -> None:
        if session.failure is None:
            session.failure, session.stop_reason = reason, stop_reason

    async def complete(
        self, session_id: str, body: Mapping[str, Any]
    ) -> tuple[dict[str, Any], str, int, int]:
        """One model call of session `session_id`: (the OpenAI assistant message, finish_reason,
        prompt_tokens, completion_tokens). Raises `SessionError` (recorded on the session when fatal)."""
        self.requests += 1
        now = self.clock()
        if now >= self._next_sweep:
            self._evict_idle(now)
        session = self.sessions.setdefault(session_id, Session(session_id))
        session.last_used = now
        async with session.lock:
            try:
                return await self._complete(session, body)
            except SessionError as exc:
                if exc.status == 503:
                    session.inference_errors.append(str(exc))
                if exc.fatal:
                    self.fail(session, str(exc), "token_budget" if exc.status == 413 else "endpoint_error")
                raise

    async def _complete(
        self, session: Session, body: Mapping[str, Any]
    ) -> tuple[dict[str, Any], str, int, int]:
        if session.failure is not None:
            raise SessionError(409, f"session already failed: {session.failure}")
        tools = self._tools(session, body)
        if int(body.get("n") or 1) != 1:
            raise SessionError(400, "n > 1 is not supported (one sample per request)")
        messages = [plain_message(m) for m in body.get("messages") or []]
        if not messages:
            raise SessionError(400, "no messages")
        context, pending = self._extend(session, messages, tools)
        left = self.token_budget - len(context)
        if left <= 0:
            raise SessionError(413, f"the context ({len(context)} tokens) fills the token budget")
        sampling = {k: float(body[k]) for k in SAMPLING_KEYS if body.get(k) is not None}
        asked = body.get("max_tokens") or body.get("max_completion_tokens")
        sampling["max_tokens"] = min(int(asked), left) if asked else left
        split = "eval" if body.get("model") == MODEL_EVAL else "train"
        try:
            sampled = (await sample_tokens(self.server, context, 1, sampling, split, self.request_timeout_s))[
                0
            ]
        except Exception as exc:  # noqa: BLE001 - nothing recorded: the harness may retry this call
            what = "timed out" if isinstance(exc, asyncio.TimeoutError) else f"{type(exc).__name__}: {exc}"
            raise SessionError(503, f"inference failed: {what}", fatal=False) from exc
        segment = self.chat.assistant(sampled.ids or [], sampled.logprobs or [])
        content = self.chat.content(segment)
        message = self.tool_parser.parse(content, tools).message() if tools and self.tool_parser else None
        finish = "tool_calls" if message and message.get("tool_calls") else sampled.finish_reason
        pending()
        session.split, session.tools = split, tools
        session.segments.append(segment)
        session.messages.append(plain_message(message or {"role": "assistant", "content": content}))
        session.sampling.append(sampling)
        session.turns.append(TurnRecord(content, finish, segment, [], None, {}))
        return message or {"role": "assistant", "content": content}, finish, len(context), len(segment.ids)

    def _tools(self, session: Session, body: Mapping[str, Any]) -> list[dict[str, Any]] | None:
        """The request's tools (None for none): refused without a tool parser, and on a later turn
        unless they are the session's own."""
        tools = [dict(t) for t in body.get("tools") or []] or None
        if tools and self.tool_parser is None:
            names = [t.get("function", {}).get("name") for t in tools]
            raise SessionError(400, f"tools {names} offered: this endpoint does not parse tool calls "
                                    "(the taskset declares no v1 tools)")  # fmt: skip
        if session.segments and tools != session.tools:
            raise SessionError(409, "the request offers other tools than the session's first request")
        return tools

    def _extend(
        self, session: Session, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None
    ) -> tuple[list[int], Any]:
        """The context ids for `messages` and a commit function that records the new prompt or
        environment turn on the session (called only once the sample succeeded)."""
        if not session.segments:
            try:
                prompt = self.chat.prompt(messages, tools)
            except Exception as exc:  # noqa: BLE001 - the template refuses the messages
                raise SessionError(400, f"prompt cannot be tokenised: {type(exc).__name__}: {exc}") from exc

            def commit_prompt() -> None:
                session.messages, session.segments = list(messages), [prompt]

            return list(prompt.ids), commit_prompt
        known = session.messages
        if messages[: len(known)] != known:
            at = next(
                (k for k, (a, b) in enumerate(zip(messages, known, strict=False)) if a != b), len(messages)
            )
            raise SessionError(409, f"history differs from the recorded session at message {at}: "
                                    f"{str(messages[at] if at < len(messages) else None)[:80]!r} "
                                    f"!= {str(known[at])[:80]!r}")  # fmt: skip
        new = messages[len(known) :]
        if not new:
            raise SessionError(409, "the request adds no message after the last assistant turn")
        if any(m["role"] == "assistant" for m in new):
            raise SessionError(409, "the request adds an assistant message the policy never sampled")
        previous, last = session.segments[-1], known[-1]
        issued = {c["id"] for c in last.get("tool_calls") or []}
        stray = [m["tool_call_id"] for m in new if m["role"] == "tool" and m["tool_call_id"] not in issued]
        if stray:
            raise SessionError(409, f"tool results for calls the policy never made: {stray[:3]}")
        try:  # a tool call's results render after the real assistant message (the template needs it)
            env_segment, clean = self.chat.env_turn(
                previous, new, assistant_message=last if last.get("tool_calls") else None, tools=tools
            )
        except Exception as exc:  # noqa: BLE001 - the template refuses the messages
            raise SessionError(400, f"new messages cannot be tokenised: {type(exc).__name__}: {exc}") from exc

        def commit_env() -> None:
            session.messages.extend(new)
            session.segments.append(env_segment)
            session.turns[-1] = replace(session.turns[-1], env_messages=clean, env=env_segment)

        return session.tokens + list(env_segment.ids), commit_env


class ChatEndpoint:
    """`SessionStore` served as `/v1/chat/completions` on 127.0.0.1 (start with `async with`)."""

    def __init__(self, store: SessionStore, host: str = "127.0.0.1") -> None:
        self.store, self.host = store, host
        self._sock = socket.socket()
        self._sock.bind((host, 0))
        self.port = self._sock.getsockname()[1]
        self.base_url = f"http://{host}:{self.port}/v1"
        config = uvicorn.Config(self.app(), host=host, port=self.port, log_level="warning", lifespan="off")
        self._server = uvicorn.Server(config)
        self._task: asyncio.Task | None = None

    def app(self) -> FastAPI:
        app = FastAPI()

        @app.get("/v1/models")
        async def models() -> dict[str, Any]:
            data = [{"id": m, "object": "model", "owned_by": "rlvr"} for m in (MODEL_TRAIN, MODEL_EVAL)]
            return {"object": "list", "data": data}

        @app.post("/v1/chat/completions")
        async def chat(request: Request, x_session_id: str | None = Header(default=None)) -> Any:
            body = await request.json()
            try:
                if not x_session_id:
                    raise SessionError(400, "X-Session-ID header required (the v1 trace id)")
                message, finish, n_prompt, n_out = await self.store.complete(x_session_id, body)
            except SessionError as exc:
                return JSONResponse({"error": {"message": str(exc), "type": "rlvr_session"}}, exc.status)
            usage = {"prompt_tokens": n_prompt, "completion_tokens": n_out, "total_tokens": n_prompt + n_out}
            reply = completion_body(message, finish, str(body.get("model") or MODEL_TRAIN), usage)
            if not body.get("stream"):
                return reply
            with_usage = bool((body.get("stream_options") or {}).get("include_usage"))
            return StreamingResponse(sse_chunks(reply, with_usage), media_type="text/event-stream")

        return app

    async def __aenter__(self) -> ChatEndpoint:
        self._task = asyncio.create_task(self._server.serve(sockets=[self._sock]))
        while not self._server.started:
            if self._task.done():
                self._task.result()  # raises the startup error
                raise RuntimeError("the chat endpoint stopped during startup")
            await asyncio.sleep(0.01)  # readiness poll of the server task in this loop
        return self

    async def __aexit__(self, *exc: object) -> None:
        self._server.should_exit = True
        if self._task is not None:
            await self._task
        self._sock.close()


def completion_body(
    message: dict[str, Any], finish: str, model: str, usage: dict[str, int]
) -> dict[str, Any]:
    return {
        "id": f"chatcmpl-{uuid.uuid4().hex[:12]}",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": model,
        "choices": [{"index": 0, "message": message, "finish_reason": finish}],
        "usage": usage,
    }


async def sse_chunks(reply: dict[str, Any], with_usage: bool) -> AsyncIterator[bytes]:
    base = {k: reply[k] for k in ("id", "created", "model")} | {"object": "chat.completion.chunk"}
    choice = reply["choices"][0]
    message = choice["message"]
    delta: dict[str, Any] = {"role": "assistant", "content": message["content"]}
    if message.get("tool_calls"):
        delta["tool_calls"] = [{"index": k, **call} for k, call in enumerate(message["tool_calls"])]
    deltas = [
        {"index": 0, "delta": delta, "finish_reason": None},
        {"index": 0, "delta": {}, "finish_reason": choice["finish_reason"]},
    ]
    for delta in deltas:
        yield f"data: {json.dumps({**base, 'choices': [delta]})}\n\n".encode()
    if with_usage:
        yield f"data: {json.dumps({**base, 'choices': [], 'usage': reply['usage']})}\n\n".encode()
    yield b"data: [DONE]\n\n"
