"""HTTP reward server (FastAPI) over named rubrics.

Endpoints:
* `POST /score` `{rubric, prompt, completion, answer?, info?, id?}` -> one result;
  `POST /score_batch` `{rubric, items: [...]}` -> `{results: [...]}` (scored as one group, so rubrics
  can batch and de-duplicate). A result is `RewardResult.to_dict()` plus `id` and `latency_s`;
  `score` is null exactly when the result is unverified.
* `POST /get_reward` (OpenRLHF remote RM) `{query, prompts, labels?}` -> `{rewards, scores, extra_logs}`.
  The response is `query` minus its prompt (prefix match, else after the last occurrence of the
  prompt) minus trailing special tokens. OpenRLHF needs numbers, so unverified items get
  `openrlhf_fallback` and are counted in `extra_logs["unverified"]`.
* `GET /healthz` (alive), `GET /readyz` (rubrics loaded, not draining), `GET /metrics` (Prometheus
  text: requests and latency per rubric and status, in-flight items, rejections).

Guarantees: every request has an enforced deadline (`item_timeout_s`; items still unscored then come
back `timeout`); at most `max_inflight` items are admitted at once and a request that would exceed it
gets 429 with `Retry-After`; unknown rubrics are 404. The server binds wherever uvicorn is told to;
run it on 127.0.0.1.
"""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from collections.abc import Mapping, Sequence
from typing import Any

from fastapi import FastAPI, HTTPException
from fastapi.responses import JSONResponse, PlainTextResponse
from pydantic import BaseModel, Field

from rubrics.core import RewardResult, Rubric, Sample, Status


class ServerConfig(BaseModel):
    max_inflight: int = Field(default=256, ge=1, description="Items admitted at once; more -> 429")
    item_timeout_s: float = Field(default=300.0, gt=0, description="Deadline of one request's scoring")
    retry_after_s: int = Field(default=1, ge=0)
    openrlhf_rubric: str | None = Field(default=None, description="Rubric behind /get_reward")
    openrlhf_fallback: float = Field(default=0.0, description="/get_reward value for unverified items")
    special_tokens: tuple[str, ...] = ("<|im_end|>", "<|endoftext|>", "</s>", "<|eot_id|>", "<eos>")


class Item(BaseModel):
    prompt: list[dict[str, Any]] | str = ""
    completion: list[dict[str, Any]] | str
    answer: Any = None
    info: dict[str, Any] = Field(default_factory=dict)
    id: str | None = None


class ScoreRequest(Item):
    rubric: str


class BatchRequest(BaseModel):
    rubric: str
    items: list[Item]


class OpenRLHFRequest(BaseModel):
    query: list[str]
    prompts: list[str]
    labels: list[Any] | None = None


class _Metrics:
    def __init__(self) -> None:
        self.requests: Counter[tuple[str, str]] = Counter()
        self.latency_sum: Counter[str] = Counter()
        self.latency_count: Counter[str] = Counter()
        self.rejected = 0
        self.inflight = 0

    def text(self) -> str:
        lines = [
            "# TYPE rlvr_reward_items_total counter",
            *(
                f'rlvr_reward_items_total{{rubric="{r}",status="{s}"}} {n}'
                for (r, s), n in self.requests.items()
            ),
            "# TYPE rlvr_reward_latency_seconds summary",
            *(
                f'rlvr_reward_latency_seconds_sum{{rubric="{r}"}} {v:.6f}'
                for r, v in self.latency_sum.items()
            ),
            *(
                f'rlvr_reward_latency_seconds_count{{rubric="{r}"}} {n}'
                for r, n in self.latency_count.items()
            ),
            "# TYPE rlvr_reward_inflight gauge",
            f"rlvr_reward_inflight {self.inflight}",
            "# TYPE rlvr_reward_rejected_total counter",
            f"rlvr_reward_rejected_total {self.rejected}",
        ]
        return "\n".join(lines) + "\n"


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


def create_app(rubrics: Mapping[str, Rubric], config: ServerConfig | None = None) -> FastAPI:
    """A FastAPI app serving `rubrics` by name. The caller owns the rubrics (and closes them)."""
    cfg = config or ServerConfig()
    metrics = _Metrics()
    state = {"ready": True}
    app = FastAPI(title="rlvr reward server")

    def rubric_for(name: str) -> Rubric:
        if name not in rubrics:
            raise HTTPException(404, f"unknown rubric {name!r}; known: {sorted(rubrics)}")
        return rubrics[name]

    async def score_items(name: str, samples: list[Sample]) -> list[RewardResult]:
        rubric = rubric_for(name)
        if metrics.inflight + len(samples) > cfg.max_inflight:
            metrics.rejected += 1
            raise HTTPException(
                429, "reward server saturated", headers={"Retry-After": str(cfg.retry_after_s)}
            )
        metrics.inflight += len(samples)
        start = time.perf_counter()
        try:
            results = await asyncio.wait_for(rubric.score_group(samples), cfg.item_timeout_s)
        except asyncio.TimeoutError:
            reason = f"timeout: scoring exceeded {cfg.item_timeout_s}s"
            results = [RewardResult.unverified(Status.TIMEOUT, reason) for _ in samples]
        finally:
            metrics.inflight -= len(samples)
        elapsed = time.perf_counter() - start
        metrics.latency_sum[name] += elapsed
        metrics.latency_count[name] += 1
        for r in results:
            metrics.requests[(name, r.status.value)] += 1
        return results

    def payload(result: RewardResult, item_id: str | None, latency: float) -> dict[str, Any]:
        return {**result.to_dict(), "id": item_id, "latency_s": latency}

    @app.post("/score")
    async def score(req: ScoreRequest) -> dict[str, Any]:
        start = time.perf_counter()
        sample = Sample(prompt=req.prompt, completion=req.completion, answer=req.answer, info=req.info)
        (result,) = await score_items(req.rubric, [sample])
        return payload(result, req.id, time.perf_counter() - start)

    @app.post("/score_batch")
    async def score_batch(req: BatchRequest) -> dict[str, Any]:
        start = time.perf_counter()
        samples = [
            Sample(prompt=i.prompt, completion=i.completion, answer=i.answer, info=i.info) for i in req.items
        ]
        results = await score_items(req.rubric, samples)
        latency = time.perf_counter() - start
        return {"results": [payload(r, i.id, latency) for r, i in zip(results, req.items, strict=True)]}

    @app.post("/get_reward")
    async def get_reward(req: OpenRLHFRequest) -> dict[str, Any]:
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
        results = await score_items(cfg.openrlhf_rubric, samples)
        rewards = [cfg.openrlhf_fallback if r.score is None else float(r.score) for r in results]
        unverified = sum(r.score is None for r in results)
        return {
            "rewards": rewards,
            "scores": rewards,
            "extra_logs": {"unverified": [unverified / len(results) if results else 0.0] * len(results)},
        }

    @app.get("/healthz")
    async def healthz() -> dict[str, str]:
        return {"status": "ok"}

    @app.get("/readyz")
    async def readyz() -> JSONResponse:
        ready = state["ready"] and bool(rubrics)
        return JSONResponse({"ready": ready, "rubrics": sorted(rubrics)}, status_code=200 if ready else 503)

    @app.get("/metrics")
    async def prometheus() -> PlainTextResponse:
        return PlainTextResponse(metrics.text(), media_type="text/plain; version=0.0.4")

    app.state.metrics = metrics
    app.state.readiness = state
    return app
