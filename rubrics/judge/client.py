"""Async client for an OpenAI-compatible chat endpoint (vLLM's server by default), used by the judge.

Default endpoint: a local vLLM judge on 127.0.0.1:9002 (the policy server uses 9001, Atropos run-api 8000).

Contract:
* `JudgeClient.chat(body)` POSTs `body` (plus the endpoint's `model`) to `{base_url}/chat/completions`
  and returns a `JudgeReply` for the first choice, or raises `JudgeCallError` (`timeout=True` when the
  endpoint never answered in time). It never returns a partial or guessed reply.
* `timeout_s` is an overall deadline per attempt (connect, send, and the whole body): a judge that
  trickles bytes cannot hold an attempt open past it, and a reply completed after it is discarded,
  never scored.
* A body that is not an OpenAI chat completion (no choices, `message` null or a string, `logprobs`
  of the wrong shape, non-JSON) raises `MalformedReply` (a `JudgeCallError`, kind `malformed_reply`).
* Transient failures (connect errors, timeouts, HTTP 429 and 5xx) are retried up to `max_retries`
  times with exponential backoff and full jitter (honouring `Retry-After`, capped); other HTTP errors
  (4xx: bad request, auth) fail at once.
* At most `max_concurrency` requests per client are in flight. `shared_client(endpoint)` hands out
  one pooled client per endpoint and event loop, reference-counted: each `shared_client` is paired
  with one `release_client`, and the last release closes the connection pool.
* The API key is read from the environment variable named by `api_key_env` (never stored in config).
"""

from __future__ import annotations

import asyncio
import os
import random
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

import httpx
from pydantic import BaseModel, Field, ValidationError

from rubrics.aio import Limiter

TRANSIENT_HTTP = frozenset({408, 409, 425, 429, 500, 502, 503, 504})


@dataclass(frozen=True)
class JudgeEndpoint:
    """Where the judge lives and how hard to try. Hashable: it keys the shared client pool."""

    base_url: str = "http://127.0.0.1:9002/v1"
    model: str = "judge"
    api_key_env: str = "JUDGE_API_KEY"
    timeout_s: float = 60.0  # overall deadline per attempt
    max_retries: int = 3
    backoff_s: float = 0.5  # first backoff ceiling; doubles per retry (full jitter)
    backoff_max_s: float = 8.0
    max_concurrency: int = 64


@dataclass(frozen=True)
class TokenLogprob:
    """One generated token with its alternatives (`top`: token text -> logprob)."""

    token: str
    logprob: float
    top: Mapping[str, float] = field(default_factory=dict)


@dataclass(frozen=True)
class JudgeReply:
    """The first choice of a chat completion."""

    content: str
    finish_reason: str | None
    logprobs: tuple[TokenLogprob, ...] = ()
    refusal: str | None = None
    attempts: int = 1


class JudgeCallError(RuntimeError):
    """The endpoint gave no usable reply. `timeout` tells a deadline miss from other failures;
    `kind` is the failure kind counted in the judge's metrics."""

    kind = "judge_error"

    def __init__(
        self,
        message: str,
        *,
        timeout: bool = False,
        transient: bool = False,
        retry_after: float | None = None,
    ) -> None:
        super().__init__(message)
        self.timeout = timeout
        self.transient = transient
        self.retry_after = retry_after


class MalformedReply(JudgeCallError):
    """The endpoint answered 200 with a body that is not a usable chat completion."""

    kind = "malformed_reply"


class JudgeClient:
    """A pooled httpx client for one endpoint (see module docstring)."""

    def __init__(self, endpoint: JudgeEndpoint, *, rng: random.Random | None = None) -> None:
        self.endpoint = endpoint
        key = os.environ.get(endpoint.api_key_env, "")
        headers = {"Authorization": f"Bearer {key}"} if key else {}
        limits = httpx.Limits(max_connections=endpoint.max_concurrency, max_keepalive_connections=32)
        self._http = httpx.AsyncClient(
            base_url=endpoint.base_url.rstrip("/") + "/",
            headers=headers,
            timeout=httpx.Timeout(endpoint.timeout_s),
            limits=limits,
            trust_env=False,  # never route judge traffic through a proxy from the environment
        )
        self._gate = Limiter(endpoint.max_concurrency)
        self._rng = rng or random.Random()
        self.calls = 0  # HTTP attempts made (for metrics and tests)

    async def chat(self, body: Mapping[str, Any]) -> JudgeReply:
        payload = {"model": self.endpoint.model, **body}
        last: JudgeCallError | None = None
        for attempt in range(self.endpoint.max_retries + 1):
            if attempt:
                await asyncio.sleep(self._backoff(attempt, last))
            try:
                async with self._gate:
                    self.calls += 1
                    reply = await self._post(payload)
                return replace(reply, attempts=attempt + 1)
            except JudgeCallError as exc:
                if not exc.transient:
                    raise
                last = exc
        assert last is not None
        raise JudgeCallError(
            f"gave up after {self.endpoint.max_retries + 1} attempts: {last}",
            timeout=last.timeout,
            transient=True,
        )

    def _backoff(self, attempt: int, last: JudgeCallError | None) -> float:
        ceiling = min(self.endpoint.backoff_max_s, self.endpoint.backoff_s * 2 ** (attempt - 1))
        delay = self._rng.uniform(0, ceiling)
        if last is not None and last.retry_after is not None:
            delay = max(delay, min(last.retry_after, self.endpoint.backoff_max_s))
        return delay

    async def _post(self, payload: Mapping[str, Any]) -> JudgeReply:
        try:
            # wait_for bounds the whole exchange; httpx's own timeout only bounds each read
            resp = await asyncio.wait_for(
                self._http.post("chat/completions", json=payload), self.endpoint.timeout_s
            )
        except (httpx.TimeoutException, asyncio.TimeoutError) as exc:
            raise JudgeCallError(
                f"timeout after {self.endpoint.timeout_s}s", timeout=True, transient=True
            ) from exc
        except httpx.TransportError as exc:
            raise JudgeCallError(f"transport error: {type(exc).__name__}: {exc}", transient=True) from exc
        if resp.status_code != 200:
            raise JudgeCallError(
                f"HTTP {resp.status_code}: {resp.text[:200]}",
                transient=resp.status_code in TRANSIENT_HTTP,
                retry_after=_retry_after(resp),
            )
        try:
            body = resp.json()
        except ValueError as exc:
            raise MalformedReply(f"malformed completion body: not JSON ({resp.text[:80]!r})") from exc
        return parse_completion(body)

    async def aclose(self) -> None:
        await self._http.aclose()


def _retry_after(resp: httpx.Response) -> float | None:
    try:
        return max(0.0, float(resp.headers["retry-after"]))
    except (KeyError, ValueError):
        return None


class _Alternative(BaseModel):
    token: str
    logprob: float


class _TokenLogprobs(BaseModel):
    token: str
    logprob: float
    top_logprobs: list[_Alternative] | None = None


class _Logprobs(BaseModel):
    content: list[_TokenLogprobs] | None = None


class _Message(BaseModel):
    content: str | None = None
    refusal: str | None = None


class _Choice(BaseModel):
    message: _Message
    finish_reason: str | None = None
    logprobs: _Logprobs | None = None


class _Completion(BaseModel):
    choices: list[_Choice] = Field(min_length=1)


async def endpoint_problem(endpoint: JudgeEndpoint, timeout_s: float = 3.0) -> str | None:
    """None when `endpoint` answers `GET /models` and serves `endpoint.model` (or cannot list its
    models); else one line: unreachable (with the cause), an error status, a refused key, or the
    models it does serve."""
    url = endpoint.base_url.rstrip("/") + "/models"
    key = os.environ.get(endpoint.api_key_env, "")
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    try:
        async with httpx.AsyncClient(timeout=timeout_s, trust_env=False, headers=headers) as http:
            resp = await http.get(url)
    except httpx.HTTPError as exc:
        cause = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        return f"judge endpoint {endpoint.base_url} is unreachable ({cause})"
    if resp.status_code in (401, 403):
        return f"judge endpoint {endpoint.base_url} refused the API key (HTTP {resp.status_code}; ${endpoint.api_key_env})"
    if resp.status_code >= 500:
        return f"judge endpoint {endpoint.base_url} answered HTTP {resp.status_code} to GET /models"
    try:
        served = [m["id"] for m in resp.json()["data"]] if resp.status_code == 200 else None
    except (ValueError, KeyError, TypeError):
        served = None  # not an OpenAI model list: nothing to compare
    if served is not None and endpoint.model not in served:
        return f"judge endpoint {endpoint.base_url} does not serve model {endpoint.model!r} (it serves: {', '.join(served) or 'nothing'})"
    return None


def parse_completion(body: Any) -> JudgeReply:
    """The first choice of an OpenAI chat-completion body (`logprobs.content` kept when present);
    `MalformedReply` naming the first offending field otherwise."""
    try:
        choice = _Completion.model_validate(body).choices[0]
    except ValidationError as exc:
        err = exc.errors()[0]
        where = ".".join(str(p) for p in err["loc"]) or "body"
        raise MalformedReply(f"malformed completion body: {where}: {err['msg']}") from None
    logprobs = tuple(
        TokenLogprob(token=t.token, logprob=t.logprob, top={a.token: a.logprob for a in t.top_logprobs or []})
        for t in (choice.logprobs.content if choice.logprobs else None) or []
    )
    return JudgeReply(
        content=choice.message.content or "",
        finish_reason=choice.finish_reason,
        logprobs=logprobs,
        refusal=choice.message.refusal,
    )


# --- one pooled client per endpoint and event loop (httpx pools are bound to their loop) ---------

_POOL: dict[tuple[int, JudgeEndpoint], tuple[JudgeClient, int, asyncio.AbstractEventLoop]] = {}


def shared_client(endpoint: JudgeEndpoint) -> JudgeClient:
    """The pooled client for `endpoint` on the running loop; pair with `release_client`."""
    loop = asyncio.get_running_loop()
    key = (id(loop), endpoint)
    entry = _POOL.get(key)
    if entry is None or entry[2] is not loop:  # a dead loop's id may be reused: never share across loops
        entry = (JudgeClient(endpoint), 0, loop)
    _POOL[key] = (entry[0], entry[1] + 1, loop)
    return entry[0]


async def release_client(client: JudgeClient) -> None:
    """Drop one reference; the last one closes the pool. Unknown clients are closed directly."""
    for key, (pooled, refs, loop) in list(_POOL.items()):
        if pooled is client:
            if refs <= 1:
                del _POOL[key]
                await client.aclose()
            else:
                _POOL[key] = (pooled, refs - 1, loop)
            return
    await client.aclose()


def forget_client(client: JudgeClient) -> None:
    """Drop a pooled client whose event loop has ended (it cannot be closed from another loop)."""
    for key, (pooled, _refs, _loop) in list(_POOL.items()):
        if pooled is client:
            del _POOL[key]
