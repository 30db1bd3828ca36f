"""HTTP reward server (FastAPI) over named rubrics. Start it with `rlvr-reward-server` (see
`rubrics.server.cli`) or build the app with `create_app(rubrics, config)`.

Endpoints:
* `POST /score` `{rubric, prompt, completion, answer?, info?, id?}` -> one result;
  `POST /score_batch` `{rubric, items: [...]}` -> `{results: [...]}` (scored as one group, so rubrics
  can batch and de-duplicate). A result is `RewardResult.to_dict()` plus `id`, `latency_s` and
  `cache_hit`; `score` is null exactly when the result is unverified.
* `POST /get_reward` (OpenRLHF remote RM) `{query, prompts, labels?}` -> `{rewards, scores, extra_logs}`.
  The response is `query` minus its prompt (prefix match, else after the last occurrence of the
  prompt) minus trailing special tokens. OpenRLHF needs numbers, so unverified items get
  `openrlhf_fallback` and are counted in `extra_logs["unverified"]`.
* `GET /healthz` (alive), `GET /readyz` (200 once every rubric has warmed up, e.g. its CAS pool is
  started, so the first request pays no start-up; 503 before and while draining), `GET /metrics`
  (Prometheus, see `rubrics.server.metrics`).

Guarantees:
* Admission, per rubric: at most `max_inflight` items (`rubric_inflight[name]` if set) are scored
  at once; further items wait in a FIFO queue (a batch larger than that is scored in slices). 429
  with `Retry-After` only under real overload: when a rubric's items in flight and queued would
  exceed its window + `max_queued`. An idle server admits any request up to `max_batch` items (a
  larger one is 413). A small window for a CPU rubric keeps the tail short: with the math rubric,
  cheap checks would otherwise overtake the CAS-bound ones without bound (a trainer waits for the
  slowest item of its batch), see `benchmarks/results/server_bench.md`.
* Every request has an enforced deadline (`item_timeout_s`, queueing included); items still
  unscored then come back `timeout` (unverified).
* Verified results of deterministic rubrics (`Rubric.deterministic`) are kept in a bounded LRU
  cache (`cache_size` entries) and identical items in flight share one scoring (single flight).
  Unverified results are never cached.
* Bad input is a 4xx with a reason, never a 500: JSON with lone surrogates (`"\\ud800"`) is accepted,
  the surrogates replaced by U+FFFD; responses are ASCII-escaped JSON. Unknown rubrics are 404.
* `/score` and `/score_batch` skip FastAPI's per-request machinery (`RewardApp`: same handlers,
  same answers and errors, FastAPI's routes and docs kept for everything else).
The server binds wherever uvicorn is told to; run it on 127.0.0.1.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import hashlib
import json
import logging
import os
import sys
import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any

from fastapi import FastAPI, HTTPException, Request
from fastapi.responses import JSONResponse, Response
from pydantic import BaseModel, ConfigDict, Field, ValidationError
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.requests import ClientDisconnect
from starlette.types import Receive, Scope, Send

from rubrics.aio import Limiter
from rubrics.core import RewardResult, Rubric, Sample, Status
from rubrics.server.metrics import ServerMetrics

log = logging.getLogger(__name__)
_timeout = getattr(asyncio, "timeout", None)  # Python 3.11+


class ServerConfig(BaseModel):
    max_inflight: int = Field(default=256, ge=1, description="Items scored at once per rubric")
    rubric_inflight: dict[str, int] = Field(default_factory=dict, description="Per-rubric max_inflight")
    max_queued: int = Field(default=4096, ge=0, description="Items waiting for a slot; beyond -> 429")
    max_batch: int = Field(default=4096, ge=1, description="Items in one request; more -> 413")
    item_timeout_s: float = Field(default=300.0, gt=0, description="Deadline of one request's scoring")
    retry_after_s: int = Field(default=1, ge=0)
    cache_size: int = Field(default=100_000, ge=0, description="Cached verified results (LRU); 0: off")
    openrlhf_rubric: str | None = Field(default=None, description="Rubric behind /get_reward")
    openrlhf_fallback: float = Field(default=0.0, description="/get_reward value for unverified items")
    special_tokens: tuple[str, ...] = ("<|im_end|>", "<|endoftext|>", "</s>", "<|eot_id|>", "<eos>")


class Item(BaseModel):
    """One sample to score. Unknown fields are refused (422 naming them): a misspelt `gold` for
    `answer` must not score against no gold."""

    model_config = ConfigDict(extra="forbid")

    prompt: list[dict[str, Any]] | str = ""
    completion: list[dict[str, Any]] | str
    answer: Any = None
    info: dict[str, Any] = Field(default_factory=dict)
    id: str | None = None

    def sample(self) -> Sample:
        return Sample(prompt=self.prompt, completion=self.completion, answer=self.answer, info=self.info)


class ScoreRequest(Item):
    """`POST /score`: one sample and the name of the rubric that scores it."""

    rubric: str


class BatchRequest(BaseModel):
    """`POST /score_batch`: several samples for one rubric (one group shares its work)."""

    model_config = ConfigDict(extra="forbid")

    rubric: str
    items: list[Item]


class OpenRLHFRequest(BaseModel):
    """`POST /get_reward`: OpenRLHF's remote reward contract (query = prompt + response)."""

    model_config = ConfigDict(extra="forbid")

    query: list[str]
    prompts: list[str]
    labels: list[Any] | None = None


def strip_prompt(query: str, prompt: str, special_tokens: Sequence[str]) -> str:
    """The response part of an OpenRLHF `query` (prompt + response, special tokens kept)."""
    if query.startswith(prompt):
        response = query[len(prompt) :]
    elif prompt and prompt in query:
        response = query[query.rindex(prompt) + len(prompt) :]
    else:
        response = query
    changed = True
    while changed:
        changed = False
        response = response.rstrip()
        for token in special_tokens:
            if response.endswith(token):
                response, changed = response[: -len(token)], True
    return response.strip()


# --- request parsing and responses ------------------------------------------------------------


def _clean(value: Any) -> Any:
    """`value` with lone surrogates (valid JSON escapes, invalid Unicode) replaced by U+FFFD."""
    if isinstance(value, str):
        try:
            value.encode("utf-8")
            return value
        except UnicodeEncodeError:
            return value.encode("utf-16", "surrogatepass").decode("utf-16", "replace")
    if isinstance(value, list):
        return [_clean(v) for v in value]
    if isinstance(value, dict):
        return {_clean(k): _clean(v) for k, v in value.items()}
    return value


def _parse(body: bytes, model: type[BaseModel]) -> Any:
    try:
        data = json.loads(body)
    except (ValueError, UnicodeDecodeError) as exc:
        raise HTTPException(400, f"body is not JSON: {exc}") from None
    if b"\\ud" in body or b"\\uD" in body:  # only escapes can carry a lone surrogate
        data = _clean(data)
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        errors = exc.errors(include_url=False, include_context=False)
        for error in errors:  # FastAPI's shape, so both paths answer alike: the field under "body"
            error["loc"] = ("body", *error["loc"])
        raise HTTPException(422, errors) from None


def _json(content: Any, status_code: int = 200, headers: Mapping[str, str] | None = None) -> Response:
    body = json.dumps(content, ensure_ascii=True, allow_nan=False, separators=(",", ":"))
    return Response(body, status_code=status_code, headers=headers, media_type="application/json")


# --- scoring: cache, single flight, admission, deadline ----------------------------------------


def sample_key(rubric: str, sample: Sample) -> bytes:
    canon = [rubric, sample.prompt, sample.completion, sample.answer, sample.info]
    return hashlib.sha256(
        json.dumps(canon, sort_keys=True, ensure_ascii=True, default=repr).encode()
    ).digest()


class Overloaded(Exception):
    """A rubric's window and queue are full: the request is refused (429) before any work."""


class Scorer:
    """Scores items for the app: see the module doc's guarantees. One event loop (the server's)."""

    def __init__(self, rubrics: Mapping[str, Rubric], cfg: ServerConfig, metrics: ServerMetrics) -> None:
        self.rubrics, self.cfg, self.metrics = rubrics, cfg, metrics
        self.slots = {name: Limiter(cfg.rubric_inflight.get(name, cfg.max_inflight)) for name in rubrics}
        self.queued = dict.fromkeys(rubrics, 0)
        self.cache: OrderedDict[bytes, RewardResult] = OrderedDict()
        self.flights: dict[bytes, asyncio.Future[RewardResult]] = {}
        metrics.inflight.set_function(lambda: sum(s.held for s in self.slots.values()))
        metrics.queued.set_function(lambda: sum(self.queued.values()))
        metrics.cache_entries.set_function(lambda: len(self.cache))

    def rubric(self, name: str) -> Rubric:
        if name not in self.rubrics:
            raise HTTPException(404, f"unknown rubric {name!r}; known: {sorted(self.rubrics)}")
        return self.rubrics[name]

    async def score(self, name: str, samples: Sequence[Sample]) -> tuple[list[RewardResult], list[bool]]:
        """(results, cache_hit per item). Raises `Overloaded` (-> 429) before doing any work."""
        rubric = self.rubric(name)
        n = len(samples)
        results: list[RewardResult | None] = [None] * n
        hits = [False] * n
        shared: list[tuple[int, asyncio.Future[RewardResult]]] = []
        todo: dict[Any, list[int]] = {}
        cacheable = self.cfg.cache_size > 0 and rubric.deterministic
        count = (
            self.metrics.of(self.metrics.cache, name, "hit"),
            self.metrics.of(self.metrics.cache, name, "shared"),
        )
        for i, sample in enumerate(samples):
            if not cacheable:
                todo[i] = [i]
                continue
            key = sample_key(name, sample)
            hit = self.cache.get(key)
            if hit is not None:
                self.cache.move_to_end(key)
                results[i], hits[i] = hit, True
                count[0].inc()
            elif key in self.flights:
                shared.append((i, self.flights[key]))
                count[1].inc()
            elif key in todo:
                todo[key].append(i)
                count[1].inc()
            else:
                todo[key] = [i]
        slots, queued = self.slots[name], self.queued[name]
        if todo and (slots.held or queued):
            if slots.held + queued + len(todo) > slots.capacity + self.cfg.max_queued:
                raise Overloaded
        if cacheable and todo:
            self.metrics.of(self.metrics.cache, name, "miss").inc(len(todo))
        if todo:
            await self._own(name, samples, todo, results, cacheable)
        for i, future in shared:
            results[i] = await self._deadline(asyncio.shield(future), None)
        for r in results:
            self.metrics.of(self.metrics.items, name, r.status.value).inc()  # type: ignore[union-attr]
        return results, hits  # type: ignore[return-value]

    async def _own(
        self,
        name: str,
        samples: Sequence[Sample],
        todo: dict[Any, list[int]],
        results: list[RewardResult | None],
        cacheable: bool,
    ) -> None:
        """Score the distinct items this request brought (`todo`: key -> its indices), publishing
        each result to identical requests in flight and to the cache."""
        flights = {}
        if cacheable:
            loop = asyncio.get_running_loop()
            for key in todo:
                flights[key] = self.flights[key] = loop.create_future()
        scored = [RewardResult.unverified(Status.ERROR, "scoring was cancelled")] * len(todo)
        try:
            scored = await self._deadline(
                self._run(name, [samples[ix[0]] for ix in todo.values()]), len(todo)
            )
        finally:
            for (key, indices), result in zip(todo.items(), scored, strict=True):
                for i in indices:
                    results[i] = result
                if key in flights:
                    self.flights.pop(key, None)
                    flights[key].set_result(result)
                    if result.verified:
                        self._remember(key, result)

    async def _deadline(self, work: Any, n: int | None) -> Any:
        try:
            if _timeout is None:  # Python 3.10
                return await asyncio.wait_for(work, self.cfg.item_timeout_s)
            async with _timeout(self.cfg.item_timeout_s):  # no task per request, unlike wait_for
                return await work
        except asyncio.TimeoutError:
            result = RewardResult.unverified(
                Status.TIMEOUT, f"timeout: scoring exceeded {self.cfg.item_timeout_s}s"
            )
            return result if n is None else [result] * n

    async def _run(self, name: str, samples: list[Sample]) -> list[RewardResult]:
        cap = self.slots[name].capacity
        if len(samples) <= cap:  # the usual case: no task for a lone slice
            return await self._slice(name, samples)
        slices = [samples[i : i + cap] for i in range(0, len(samples), cap)]
        parts = await asyncio.gather(*(self._slice(name, s) for s in slices))
        return [r for part in parts for r in part]

    async def _slice(self, name: str, samples: list[Sample]) -> list[RewardResult]:
        slots = self.slots[name]
        self.queued[name] += len(samples)
        try:
            await slots.acquire(len(samples))
        finally:
            self.queued[name] -= len(samples)
        try:
            return await self.rubrics[name].score_group(samples)
        finally:
            slots.release(len(samples))

    def _remember(self, key: bytes, result: RewardResult) -> None:
        self.cache[key] = result
        while len(self.cache) > self.cfg.cache_size:
            self.cache.popitem(last=False)


# --- the app -----------------------------------------------------------------------------------

Handler = Callable[[bytes], Awaitable[Response]]


class RewardApp(FastAPI):
    """FastAPI with a lean path for the hot routes (`/score`, `/score_batch`): a POST there goes
    straight from ASGI to its handler (body bytes in, `Response` out), skipping FastAPI's
    middleware stack, routing and dependency solving (about a fifth of a cheap request's CPU). The
    same handlers also back the ordinary FastAPI routes, which keep serving the OpenAPI docs and
    any request the lean path does not take (another method, a `root_path`, or once middleware
    was added with `add_middleware`, which the lean path would skip). Errors are answered by the
    app's own exception handlers, exactly as the ordinary route answers them."""

    hot: dict[str, Handler]

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        handler = None
        if scope["type"] == "http" and scope["method"] == "POST" and not self.user_middleware:
            handler = self.hot.get(scope["path"]) if not scope.get("root_path") else None
        if handler is None:
            return await super().__call__(scope, receive, send)
        try:
            body = await _body(receive)
        except ClientDisconnect:
            return None
        try:
            response = await handler(body)
        except StarletteHTTPException as exc:
            kind = next(k for k in type(exc).__mro__ if k in self.exception_handlers)
            response = await self.exception_handlers[kind](Request(scope, receive), exc)
        return await response(scope, receive, send)


async def _body(receive: Receive) -> bytes:
    """The request body, as Starlette's `Request.body()` reads it (ClientDisconnect included) without
    building a `Request` per call: on the lean path that object measured 5-15% of a cheap request's
    server CPU (`benchmarks/server_asgi_bench.py --checker exact`)."""
    chunks = []
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            raise ClientDisconnect
        chunks.append(message.get("body", b""))
        if not message.get("more_body", False):
            return b"".join(chunks)


def _body_doc(model: type[BaseModel]) -> dict[str, Any]:
    """The OpenAPI request body of a route that reads its raw body: `model`, as JSON."""
    ref = {"$ref": f"#/components/schemas/{model.__name__}"}
    return {"requestBody": {"required": True, "content": {"application/json": {"schema": ref}}}}


def _document_models(app: FastAPI, models: Sequence[type[BaseModel]]) -> None:
    """Add `models` (and the models they use) to the app's OpenAPI components."""
    build = app.openapi

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            schema = build()
            components = schema.setdefault("components", {}).setdefault("schemas", {})
            for model in models:
                doc = model.model_json_schema(ref_template="#/components/schemas/{model}")
                components.update(doc.pop("$defs", {}))
                components[model.__name__] = doc
        return app.openapi_schema or build()

    app.openapi = openapi  # type: ignore[method-assign]


def create_app(
    rubrics: Mapping[str, Rubric],
    config: ServerConfig | None = None,
    *,
    owns_rubrics: bool = False,
    announce: str | None = None,
) -> RewardApp:
    """A FastAPI app serving `rubrics` by name. Rubrics warm up in the background at start-up
    (`/readyz` says when); with `owns_rubrics` the app closes them at shutdown. With `announce` (the
    URL it serves on) it prints one line to stderr when it is ready, or why warm-up failed."""
    cfg = config or ServerConfig()
    metrics = ServerMetrics()
    scorer = Scorer(rubrics, cfg, metrics)
    state: dict[str, Any] = {"ready": False, "draining": False, "error": None}

    async def warm_up() -> None:
        try:
            await asyncio.gather(*(r.warm_up() for r in rubrics.values()))
            gc.collect()
            gc.freeze()  # start-up objects never need collecting: full GC passes stay short
            state["ready"] = bool(rubrics)
            if announce:
                print(
                    f"rlvr-reward-server: ready on {announce} (pid {os.getpid()})",
                    file=sys.stderr,
                    flush=True,
                )
        except Exception as exc:  # noqa: BLE001 - reported by /readyz, never a crash of the server
            log.exception("rubric warm-up failed")
            state["error"] = f"warm-up failed: {type(exc).__name__}: {exc}"
            if announce:
                print(f"rlvr-reward-server: not ready: {state['error']}", file=sys.stderr, flush=True)

    @contextlib.asynccontextmanager
    async def lifespan(_app: FastAPI):
        warming = asyncio.create_task(warm_up())
        try:
            yield
        finally:
            state["draining"] = True
            warming.cancel()
            if owns_rubrics:
                await asyncio.gather(*(r.aclose() for r in rubrics.values()), return_exceptions=True)

    app = RewardApp(title="rlvr reward server", lifespan=lifespan)

    async def scored(
        name: str, endpoint: str, samples: list[Sample]
    ) -> tuple[list[RewardResult], list[bool]]:
        if len(samples) > cfg.max_batch:
            raise HTTPException(413, f"{len(samples)} items in one request; the limit is {cfg.max_batch}")
        try:
            return await scorer.score(name, samples)
        except Overloaded:
            metrics.rejected.inc()
            raise HTTPException(
                429, "reward server overloaded", headers={"Retry-After": str(cfg.retry_after_s)}
            ) from None

    def payload(result: RewardResult, item_id: str | None, latency: float, hit: bool) -> dict[str, Any]:
        return {**result.to_dict(), "id": item_id, "latency_s": latency, "cache_hit": hit}

    async def score_body(body: bytes) -> Response:
        start = time.perf_counter()
        req = _parse(body, ScoreRequest)
        (result,), (hit,) = await scored(req.rubric, "score", [req.sample()])
        latency = time.perf_counter() - start
        metrics.of(metrics.latency, req.rubric, "score").observe(latency)
        return _json(payload(result, req.id, latency, hit))

    async def score_batch_body(body: bytes) -> Response:
        start = time.perf_counter()
        req = _parse(body, BatchRequest)
        results, hits = await scored(req.rubric, "score_batch", [i.sample() for i in req.items])
        latency = time.perf_counter() - start
        metrics.of(metrics.latency, req.rubric, "score_batch").observe(latency)
        rows = [payload(r, i.id, latency, h) for r, i, h in zip(results, req.items, hits, strict=True)]
        return _json({"results": rows})

    app.hot = {"/score": score_body, "/score_batch": score_batch_body}

    # The handlers parse the raw body themselves (one path for the lean and the ordinary route, lone
    # surrogates cleaned); `_body_doc` puts each body's model in the OpenAPI schema.
    @app.post("/score", openapi_extra=_body_doc(ScoreRequest))
    async def score(request: Request) -> Response:
        return await score_body(await request.body())

    @app.post("/score_batch", openapi_extra=_body_doc(BatchRequest))
    async def score_batch(request: Request) -> Response:
        return await score_batch_body(await request.body())

    @app.post("/get_reward", openapi_extra=_body_doc(OpenRLHFRequest))
    async def get_reward(request: Request) -> Response:
        start = time.perf_counter()
        req = _parse(await request.body(), OpenRLHFRequest)
        if cfg.openrlhf_rubric is None:
            raise HTTPException(404, "no rubric configured for /get_reward")
        if len(req.query) != len(req.prompts) or (
            req.labels is not None and len(req.labels) != len(req.query)
        ):
            raise HTTPException(422, "query, prompts and labels must have the same length")
        labels = req.labels or [None] * len(req.query)
        samples = [
            Sample(prompt=p, completion=strip_prompt(q, p, cfg.special_tokens), answer=label)
            for q, p, label in zip(req.query, req.prompts, labels, strict=True)
        ]
        results, _ = await scored(cfg.openrlhf_rubric, "get_reward", samples)
        rewards = [cfg.openrlhf_fallback if r.score is None else float(r.score) for r in results]
        unverified = sum(r.score is None for r in results)
        metrics.of(metrics.latency, cfg.openrlhf_rubric, "get_reward").observe(time.perf_counter() - start)
        share = unverified / len(results) if results else 0.0
        return _json(
            {"rewards": rewards, "scores": rewards, "extra_logs": {"unverified": [share] * len(results)}}
        )

    @app.get("/healthz")
    async def healthz() -> dict[str, str]:
        return {"status": "ok"}

    @app.get("/readyz")
    async def readyz() -> JSONResponse:
        """Ready once every rubric warmed up, until shutdown, while none depends on something down
        (e.g. a judge endpoint: `unavailable` names the rubric and the cause)."""
        problems = await asyncio.gather(*(r.unavailable() for r in rubrics.values()))
        down = {name: p for name, p in zip(rubrics, problems, strict=True) if p}
        ready = state["ready"] and not state["draining"] and not down
        body = {"ready": ready, "rubrics": sorted(rubrics), "error": state["error"], "unavailable": down}
        return JSONResponse(body, status_code=200 if ready else 503)

    @app.get("/metrics")
    async def prometheus() -> Response:
        return Response(metrics.text(), media_type="text/plain; version=0.0.4")

    _document_models(app, (ScoreRequest, BatchRequest, OpenRLHFRequest))
    app.state.metrics = metrics
    app.state.scorer = scorer
    app.state.readiness = state
    return app
