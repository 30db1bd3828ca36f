"""Coalesce concurrent token-id completion calls into one `/v1/completions` request.

Every sampling call of the runtime (a group's first turn with `n` choices, each later turn of a
multi-turn episode with one) is one token-id prompt. vLLM's OpenAI server takes a *list* of
token-id prompts in one request and answers with `len(prompts) * n` choices, choice `i * n + j`
being sample `j` of prompt `i`. A request has a fixed cost on both sides (HTTP, JSON, scheduling),
so on a CPU-bound host one request with 8 prompts serves far more completions per second than 8
requests with one (see `benchmarks/multiturn_bench.py`).

Contract of `CompletionBatcher.complete(prompt, params)`:

* Calls for one sample (`n == 1`) with identical sampling parameters that are waiting in the same
  event-loop turn are sent together, at most `max_prompts` prompts per request. Nothing waits on a
  timer: the batch leaves on the loop's next turn, so a lone call pays no added latency.
* A call for several samples (a group's first turn, `n > 1`) is a batch already and goes alone:
  streaming `n` x prompts choices costs vLLM more than the requests it would save (measured with
  the tiny model: single-turn `process` 25% slower when 16 groups' `n=8` calls shared requests).
* Each caller gets its own prompt's samples as soon as they are complete (the sender streams a
  batch, so a prompt that samples a long answer does not hold back its batch-mates: episodes of a
  group stay independent). Which samples belong to which prompt is the sender's job (by choice
  index, checked against the prompt ids the server echoes).
* A failed request with several prompts still undelivered (e.g. one prompt over the context length:
  vLLM answers 400 for the whole request) is retried one prompt per request, so the error reaches
  only the caller whose prompt caused it; the others get their samples.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

Samples = tuple[list[list[int]], list[list[float]], list[str]]
"""The `n` choices of one prompt: sampled ids, their logprobs, finish reasons."""

Deliver = Callable[[int, Samples], None]
"""Called by a sender with (prompt index, its samples) once that prompt's choices are complete."""

Send = Callable[[list[list[int]], Mapping[str, Any], Deliver], Awaitable[None]]
"""Sends one request for `prompts`, delivering each prompt's samples as they complete; raises if the
request fails (prompts not delivered by then get the error, or a retry)."""


@dataclass(eq=False)
class _Batch:
    key: str
    params: Mapping[str, Any]
    prompts: list[list[int]] = field(default_factory=list)
    futures: list[asyncio.Future[Samples]] = field(default_factory=list)


class CompletionBatcher:
    """Coalesces concurrent calls per sampling-parameter set (see the module docstring)."""

    def __init__(self, send: Send, max_prompts: int = 32) -> None:
        if max_prompts < 1:
            raise ValueError("max_prompts must be >= 1")
        self._send = send
        self.max_prompts = max_prompts
        self._open: dict[str, _Batch] = {}  # per key, the batch new calls join
        self._tasks: set[asyncio.Task[None]] = set()  # requests in flight (kept referenced)
        self.requests = 0  # requests sent (metrics / benchmarks)
        self.prompts = 0  # prompts sent

    async def complete(self, prompt: list[int], params: Mapping[str, Any]) -> Samples:
        """`params["n"]` samples of `prompt` (ids, logprobs, finish reasons), sent with other calls."""
        loop = asyncio.get_running_loop()
        future: asyncio.Future[Samples] = loop.create_future()
        if self.max_prompts == 1 or int(params.get("n", 1)) > 1:
            await self._request([list(prompt)], [future], params)
            return await future
        key = json.dumps(params, sort_keys=True, default=str)
        batch = self._open.get(key)
        if batch is None:
            batch = self._open[key] = _Batch(key, params)
            loop.call_soon(self._send_batch, batch)
        batch.prompts.append(list(prompt))
        batch.futures.append(future)
        if len(batch.prompts) >= self.max_prompts:
            self._send_batch(batch)
        return await future

    def _send_batch(self, batch: _Batch) -> None:
        """Close `batch` to new calls and send it (a second call for the same batch does nothing)."""
        if self._open.get(batch.key) is not batch:
            return
        del self._open[batch.key]
        task = asyncio.ensure_future(self._request(batch.prompts, batch.futures, batch.params))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _request(
        self, prompts: list[list[int]], futures: list[asyncio.Future[Samples]], params: Mapping[str, Any]
    ) -> None:
        """One request; on failure, each prompt still undelivered alone (or the error, if alone)."""
        delivered = [False] * len(prompts)

        def deliver(index: int, samples: Samples) -> None:
            if not delivered[index]:
                delivered[index] = True
                _settle(futures[index], result=samples)

        self.requests += 1
        self.prompts += len(prompts)
        try:
            await self._send(prompts, params, deliver)
            if not all(delivered):
                raise RuntimeError(f"the server answered {sum(delivered)} of {len(prompts)} prompts")
        except Exception as exc:  # noqa: BLE001 - handed to the callers below
            left = [i for i, done in enumerate(delivered) if not done]
            if len(prompts) == 1 or len(left) == 0:
                for i in left:
                    _settle(futures[i], exc=exc)
                return
            await asyncio.gather(*(self._request([prompts[i]], [futures[i]], params) for i in left))


def _settle(
    future: asyncio.Future[Samples], result: Samples | None = None, exc: BaseException | None = None
) -> None:
    if future.done():  # the caller was cancelled (timeout): nobody is waiting
        return
    if exc is not None:
        future.set_exception(exc)
    else:
        future.set_result(result)  # type: ignore[arg-type]
