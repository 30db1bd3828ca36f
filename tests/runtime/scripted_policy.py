"""A scripted policy on 127.0.0.1: an OpenAI-compatible server (vLLM's token shape) whose answers a
test writes as a function of the conversation the policy sees.

`/v1/completions` takes the prompt as token ids and returns `token_ids`, per-token `logprobs`,
`prompt_token_ids` and `finish_reason` like stock vLLM with `return_token_ids` (the answer text is
tokenised with the real tokenizer, the end-of-turn id appended, cut at `max_tokens` with
`finish_reason: length`); `/v1/chat/completions` serves text-only clients. Every request waits a
random latency and the `n` choices come back in shuffled order (their `index` says which is which),
so tests see responses in random order.

`answer(prompt_text, choice_index) -> str` decides what the policy says; `prompt_text` is the decoded
context (special tokens kept), i.e. exactly what a real model would condition on.
"""

from __future__ import annotations

import asyncio
import random
import socket
import threading
import time
from collections.abc import Callable
from typing import Any

import uvicorn
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse

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
            await asyncio.sleep(self.rng.uniform(*self.latency_s))
            prompt_ids = [int(t) for t in body["prompt"]]
            text = self.tokenizer.decode(prompt_ids)
            await self._gate(text)
            if self.fail_when is not None and self.fail_when(text):
                return JSONResponse({"error": "scripted outage"}, status_code=500)
            choices = [
                self._choice(text, i, prompt_ids, int(body["max_tokens"])) for i in range(body.get("n", 1))
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
