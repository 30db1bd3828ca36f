"""A scripted policy on 127.0.0.1: an OpenAI-compatible server (vLLM's token shape) whose answers a
test writes as a function of the conversation the policy sees.

`/v1/completions` takes the prompt as token ids (or a list of token-id prompts, as vLLM does: choice
`i * n + j` is sample `j` of prompt `i`; one failing prompt fails the whole request;
`stream: true` streams each prompt's choices as that prompt is answered) and returns `token_ids`, per-token `logprobs`,
`prompt_token_ids` and `finish_reason` like stock vLLM with `return_token_ids` (the answer text is
tokenised with the real tokenizer, the end-of-turn id appended, cut at `max_tokens` with
`finish_reason: length`); `/v1/chat/completions` serves text-only clients. Every request waits a
random latency and the `n` choices come back in shuffled order (their `index` says which is which),
so tests see responses in random order. `peak_in_flight` is the most prompts it held at once.

`answer(prompt_text, choice_index) -> str` decides what the policy says; `prompt_text` is the decoded
context (special tokens kept), i.e. exactly what a real model would condition on.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import random
import socket
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import uvicorn
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, StreamingResponse

Answer = Callable[[str, int], str]


class ScriptedPolicy:
    def __init__(
        self,
        tokenizer: Any,
        answer: Answer,
        model: str = "scripted",
        latency_s: tuple[float, float] = (0.0, 0.03),
        seed: int = 0,
    ) -> None:
        self.tokenizer, self.answer, self.model = tokenizer, answer, model
        self.latency_s = latency_s
        self.rng = random.Random(seed)
        self.eos = tokenizer.convert_tokens_to_ids("<|im_end|>")
        self.requests: list[dict[str, Any]] = []
        self.in_flight = self.peak_in_flight = 0  # prompts received and not yet answered
        self.fail_when: Callable[[str], bool] | None = None  # answer HTTP 500 to matching contexts
        self.holds: list[list[Any]] = []  # [held, until, event]: see hold()
        sock = socket.socket()
        sock.bind(("127.0.0.1", 0))
        self.port = sock.getsockname()[1]
        sock.close()
        self.base_url = f"http://127.0.0.1:{self.port}/v1"
        self._server = uvicorn.Server(
            uvicorn.Config(self._app(), host="127.0.0.1", port=self.port, log_level="warning", lifespan="off")
        )
        self._thread = threading.Thread(target=self._server.run, daemon=True)

    def _app(self) -> FastAPI:
        app = FastAPI()

        @app.get("/v1/models")
        async def models() -> dict[str, Any]:
            return {"object": "list", "data": [{"id": self.model, "object": "model"}]}

        @app.post("/v1/completions")
        async def completions(request: Request) -> Any:
            body = await request.json()
            self.requests.append(body)
            prompt = body["prompt"]
            batch = [prompt] if not prompt or isinstance(prompt[0], int) else prompt  # one or a list
            prompts = [[int(t) for t in p] for p in batch]
            texts = [self.tokenizer.decode(p) for p in prompts]
            if self.fail_when is not None and any(self.fail_when(text) for text in texts):
                return JSONResponse({"error": "scripted outage"}, status_code=500)
            n, max_tokens = body.get("n", 1), int(body["max_tokens"])
            if body.get("stream"):
                return StreamingResponse(
                    self._stream(texts, prompts, n, max_tokens), media_type="text/event-stream"
                )
            with self._serving(len(prompts)):
                await asyncio.sleep(self.rng.uniform(*self.latency_s))
                await asyncio.gather(*(self._gate(text) for text in texts))
            choices = [
                dict(self._choice(text, j, ids, max_tokens), index=i * n + j)
                for i, (text, ids) in enumerate(zip(texts, prompts, strict=True))
                for j in range(n)
            ]
            self.rng.shuffle(choices)
            return {"id": "cmpl", "object": "text_completion", "model": self.model, "choices": choices}

        @app.post("/v1/chat/completions")
        async def chat(request: Request) -> Any:
            body = await request.json()
            self.requests.append(body)
            await asyncio.sleep(self.rng.uniform(*self.latency_s))
            text = self.tokenizer.apply_chat_template(
                body["messages"], tokenize=False, add_generation_prompt=True
            )
            choices = [
                {
                    "index": i,
                    "message": {"role": "assistant", "content": self.answer(text, i)},
                    "finish_reason": "stop",
                }
                for i in range(body.get("n", 1))
            ]
            return {
                "id": "chat",
                "object": "chat.completion",
                "created": 0,
                "model": self.model,
                "choices": choices,
            }

        return app

    def hold(self, held: Callable[[str], bool], until: Callable[[str], bool]) -> None:
        """Answer requests whose context matches `held` only after a request matching `until` arrived
        (an event, no timing): proves that the `until` request is sent while the held one waits."""
        self.holds.append([held, until, None])

    async def _gate(self, text: str) -> None:
        for hold in self.holds:
            if hold[2] is None:
                hold[2] = asyncio.Event()
            if hold[1](text):
                hold[2].set()
        for held, _, event in self.holds:
            if held(text):
                await event.wait()

    @contextlib.contextmanager
    def _serving(self, prompts: int) -> Iterator[None]:
        """Counts `prompts` as in flight (and the peak) while the block runs."""
        self.in_flight += prompts
        self.peak_in_flight = max(self.peak_in_flight, self.in_flight)
        try:
            yield
        finally:
            self.in_flight -= prompts

    async def _stream(self, texts: list[str], prompts: list[list[int]], n: int, max_tokens: int) -> Any:
        """vLLM's streamed shape: each prompt answers on its own (its own latency and gate), each of
        its choices in two chunks (the echoed prompt ids in the first, the finish reason in the last)."""
        queue: asyncio.Queue[dict[str, Any] | None] = asyncio.Queue()

        async def answer(i: int) -> None:
            with self._serving(1):
                await asyncio.sleep(self.rng.uniform(*self.latency_s))
                await self._gate(texts[i])
            choices = [
                dict(self._choice(texts[i], j, prompts[i], max_tokens), index=i * n + j) for j in range(n)
            ]
            self.rng.shuffle(choices)
            for choice in choices:
                half = len(choice["token_ids"]) // 2
                lps = choice["logprobs"]["token_logprobs"]
                first = dict(choice, token_ids=choice["token_ids"][:half], finish_reason=None,
                             logprobs={"token_logprobs": lps[:half]})  # fmt: skip
                last = dict(choice, token_ids=choice["token_ids"][half:], prompt_token_ids=None,
                            logprobs={"token_logprobs": lps[half:]})  # fmt: skip
                for part in (first, last):
                    await queue.put({"id": "cmpl", "object": "text_completion", "choices": [part]})

        async def all_answers() -> None:
            await asyncio.gather(*(answer(i) for i in range(len(prompts))))
            await queue.put(None)

        task = asyncio.create_task(all_answers())
        while (chunk := await queue.get()) is not None:
            yield f"data: {json.dumps(chunk)}\n\n"
        await task
        yield "data: [DONE]\n\n"

    def _choice(self, text: str, index: int, prompt_ids: list[int], max_tokens: int) -> dict[str, Any]:
        ids = list(self.tokenizer.encode(self.answer(text, index), add_special_tokens=False)) + [self.eos]
        finish = "stop"
        if len(ids) > max_tokens:
            ids, finish = ids[:max_tokens], "length"
        logprobs = [-round(self.rng.uniform(0.01, 3.0), 4) for _ in ids]
        return {
            "index": index,
            "text": self.tokenizer.decode(ids, skip_special_tokens=True),
            "token_ids": ids,
            "prompt_token_ids": prompt_ids,
            "logprobs": {"token_logprobs": logprobs, "tokens": [f"token_id:{i}" for i in ids]},
            "finish_reason": finish,
        }

    def __enter__(self) -> ScriptedPolicy:
        self._thread.start()
        deadline = time.monotonic() + 20
        while not self._server.started:
            if time.monotonic() > deadline or not self._thread.is_alive():
                raise RuntimeError("scripted policy server did not start")
            time.sleep(0.01)  # readiness poll of a server thread
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.should_exit = True
        self._thread.join(timeout=10)
