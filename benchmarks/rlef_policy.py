"""The RLEF learning experiment's policy: a one-parameter code-repair policy served on loopback in
stock vLLM's `/v1/completions` token-id wire format (`benchmarks/rlef_learn.py` trains it).

Problems (`write_problems`): "read x, print f(x)" for distinct quadratics f. Each has three input
classes (`neg` x < 0, `zero` x == 0, `big` x > 5), one public test per class in a per-problem order,
and seven private tests (two per class and clean inputs). The policy's attempts for a problem come
from a family of 8 programs: the correct one plus a bug (a wrong offset) for each subset of classes.

The policy, conditioned only on the decoded context it is sent (what a real model sees):
* first turn: a program from the family, each class's bug present with probability `bug_rate(f)`
  (a per-problem prior between 0.35 and 0.65);
* repair turn: first token `yes` (use the feedback) with probability sigmoid(theta), else `no`;
  - `yes`: read the test the last feedback names (`Input:` line) and change the previous program's
    behaviour on that input's class (a real policy takes the feedback at its word: the named test
    failed, so it flips what it does there). Under real feedback that removes a bug; under random
    feedback, which names a test whether or not it fails, it may add one; with no test named it
    resubmits the previous program;
  - `no`: a fresh attempt from the family, ignoring the conversation.
Randomness is a function of the seed and the request, never of arrival order: the k-th request
for a given context text draws from `Random((seed, context, k))`. Identical contexts are exchangeable,
so concurrent episodes that race each other still produce the same set of samples on every run.
Token ids are the tiny tokenizer's; each `logprobs` entry is the policy's true conditional logprob of
that token (the program tokens' over the family's trie, 0 where the continuation is determined), at
the request's temperature (processed logprobs, as vLLM's `processed_logprobs` mode).
"""

from __future__ import annotations

import hashlib
import json
import math
import random
import re
import threading
import time
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import uvicorn
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, StreamingResponse
from starlette.requests import ClientDisconnect

CLASSES = ("neg", "zero", "big")
BUG = {"neg": ("x < 0", 1), "zero": ("x == 0", 2), "big": ("x > 5", 3)}
PUBLIC = {"neg": -3, "zero": 0, "big": 7}
PRIVATE = [-8, -1, 0, 6, 9, 1, 3]
USE_WORD, IGNORE_WORD = "yes", "no"  # the first token of a repair turn


def input_class(x: int) -> str | None:
    return "neg" if x < 0 else "zero" if x == 0 else "big" if x > 5 else None


def bug_rate(expr: str) -> float:
    """The policy's per-problem prior: each bug is present in a first attempt with this probability."""
    return 0.35 + 0.3 * (zlib.crc32(expr.encode()) % 1000) / 999


def problems(n: int) -> list[dict[str, Any]]:
    """`n` distinct problems as stdio rows (the code env's `public_tests` / `private_tests` shape)."""
    rows, seen, k = [], set(), 0
    while len(rows) < n:
        a, b, c = 1 + k % 4, k // 4 % 7 - 3, k // 28 % 11 - 5
        k += 1
        expr = f"{a} * x * x + {b} * x + {c}".replace("+ -", "- ")
        if expr in seen:
            continue
        seen.add(expr)
        order = list(CLASSES)
        random.Random(expr).shuffle(order)  # which class's test comes first in the public suite

        def block(xs: list[int], expr: str = expr) -> dict[str, list[str]]:
            return {"input": [f"{x}\n" for x in xs], "output": [f"{eval(expr, {'x': x})}\n" for x in xs]}

        name = f"p{len(rows):03d}"
        rows.append({"name": name, "description": f"Problem {name}. Read an integer x and print f(x) = {expr}.",
                     "public_tests": block([PUBLIC[c] for c in order]), "private_tests": block(PRIVATE)})  # fmt: skip
    return rows


def write_problems(path: Path, n: int) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in problems(n)))
    return path


def program(expr: str, bugs: frozenset[str]) -> str:
    lines = ["x = int(input())", f"r = {expr}"]
    lines += [f"if {BUG[b][0]}:\n    r = r + {BUG[b][1]}  # bug {b}" for b in CLASSES if b in bugs]
    return "```python\n" + "\n".join([*lines, "print(r)"]) + "\n```"


def bugs_of(answer: str) -> frozenset[str]:
    return frozenset(re.findall(r"# bug (\w+)", answer))


class RepairPolicy:
    """The policy: `theta` is the logit of using the feedback (mutable, read at every sample)."""

    def __init__(self, tokenizer: Any, theta: float = 0.0, seed: int | str = 0) -> None:
        self.tok, self.theta = tokenizer, theta
        self.eos = tokenizer.convert_tokens_to_ids("<|im_end|>")
        self.use_id, self.ignore_id = (self._one_token(w) for w in (USE_WORD, IGNORE_WORD))
        self._families: dict[tuple[str, str], list[tuple[list[int], float]]] = {}
        self.lock = threading.Lock()
        self.reseed(seed)

    def reseed(self, seed: int | str) -> None:
        """Start the random streams afresh: the same seed and requests give the same samples."""
        with self.lock:
            self.seed, self._requests = seed, {}

    def _rng(self, text: str) -> random.Random:
        key = hashlib.sha256(text.encode()).digest()
        k = self._requests.get(key, 0)
        self._requests[key] = k + 1  # a count per distinct context, not a global sequence
        return random.Random(f"{self.seed}|{key.hex()}|{k}")

    def _one_token(self, word: str) -> int:
        ids = self.tok.encode(word, add_special_tokens=False)
        if len(ids) != 1:
            raise ValueError(f"{word!r} is not one token of this tokenizer: {ids}")
        return ids[0]

    def p_use(self, temperature: float = 1.0) -> float:
        if temperature <= 0:
            return 1.0 if self.theta > 0 else 0.0
        return 1.0 / (1.0 + math.exp(-self.theta / temperature))

    def family(self, expr: str, lead: str) -> list[tuple[list[int], float]]:
        """(token ids, probability) of each first attempt, tokenised after `lead`."""
        key = (expr, lead)
        if key not in self._families:
            q, out = bug_rate(expr), []
            for mask in range(1 << len(CLASSES)):
                bugs = frozenset(c for i, c in enumerate(CLASSES) if mask >> i & 1)
                ids = self.tok.encode(lead + program(expr, bugs), add_special_tokens=False) + [self.eos]
                out.append((ids, math.prod(q if c in bugs else 1 - q for c in CLASSES)))
            self._families[key] = out
        return self._families[key]

    def complete(self, prompt_text: str, temperature: float) -> tuple[list[int], list[float]]:
        """One completion of the decoded context: (token ids, their logprobs)."""
        with self.lock:  # theta is read once per completion; the trainer updates it under this lock
            return self._complete(prompt_text, temperature, self._rng(prompt_text))

    def _complete(self, text: str, temperature: float, rng: random.Random) -> tuple[list[int], list[float]]:
        found = re.search(r"f\(x\) = (.+?)\.", text)
        if found is None:
            ids = self.tok.encode("I cannot read this problem.", add_special_tokens=False) + [self.eos]
            return ids, [0.0] * len(ids)
        expr = found.group(1)
        answers = [a.split("<|im_end|>")[0] for a in text.split("<|im_start|>assistant\n")[1:-1]]
        if not answers:
            return self._sample(self.family(expr, ""), temperature, rng)
        p = self.p_use(temperature)
        use = rng.random() < p
        first = (self.use_id, _log(p)) if use else (self.ignore_id, _log(1 - p))
        if not use:
            ids, lps = self._sample(self.family(expr, "\n"), temperature, rng)
            return [first[0], *ids], [first[1], *lps]
        bugs = bugs_of(answers[-1])
        feedback = text.split("<|im_start|>user\n")[-1]
        named = re.search(r"Input:\n(-?\d+)\n", feedback)
        cls = input_class(int(named.group(1))) if named else None
        if cls is not None:
            bugs = bugs ^ {cls}  # the named test failed (it says so): change what the program does there
        ids = self.tok.encode("\n" + program(expr, bugs), add_special_tokens=False) + [self.eos]
        return [first[0], *ids], [first[1]] + [0.0] * len(ids)  # determined by the context: probability 1

    def _sample(
        self, family: list[tuple[list[int], float]], temperature: float, rng: random.Random
    ) -> tuple[list[int], list[float]]:
        """A program from `family`, token by token over its trie: each token's probability is the
        family mass that continues with it, tempered at `temperature` and renormalised."""
        alive, ids, lps = list(family), [], []
        for i in range(max(len(seq) for seq, _ in family)):
            mass: dict[int, float] = {}
            for seq, w in alive:
                mass[seq[i]] = mass.get(seq[i], 0.0) + w
            if temperature <= 0:
                token, lp = max(mass, key=lambda t: (mass[t], -t)), 0.0
            else:
                scaled = {t: m ** (1.0 / temperature) for t, m in mass.items()}
                total, pick, token = sum(scaled.values()), rng.random(), None
                acc = 0.0
                for t, s in sorted(scaled.items()):
                    acc += s / total
                    if pick < acc:
                        token = t
                        break
                token = t if token is None else token
                lp = math.log(scaled[token] / total)
            ids.append(token)
            lps.append(lp)
            alive = [(seq, w) for seq, w in alive if seq[i] == token]
            if token == self.eos:
                break
        return ids, lps


def _log(p: float) -> float:
    return math.log(p) if p > 0 else -1e9


class PolicyServer:
    """`policy` on 127.0.0.1 as a stock vLLM OpenAI server: `POST /v1/completions` with token-id
    prompts (one or a list; `n`; `stream`), answering `token_ids`, `logprobs.token_logprobs`,
    `prompt_token_ids` and `finish_reason` per choice (choice `i * n + j`: sample `j` of prompt `i`);
    `GET /v1/models`, `GET /health`."""

    def __init__(self, policy: RepairPolicy, model: str = "rlef-policy") -> None:
        import socket

        self.policy, self.model = policy, model
        sock = socket.socket()
        sock.bind(("127.0.0.1", 0))
        self.port = sock.getsockname()[1]
        sock.close()
        self.base_url = f"http://127.0.0.1:{self.port}/v1"
        config = uvicorn.Config(
            self._app(), host="127.0.0.1", port=self.port, log_level="warning", lifespan="off"
        )
        self._server = uvicorn.Server(config)
        self._thread = threading.Thread(target=self._server.run, daemon=True)

    def _app(self) -> Any:
        app = FastAPI()

        @app.get("/health")
        async def health() -> dict[str, str]:
            return {"status": "ok"}

        @app.get("/v1/models")
        async def models() -> dict[str, Any]:
            return {"object": "list", "data": [{"id": self.model, "object": "model"}]}

        @app.post("/v1/completions")
        async def completions(request: Request) -> Any:
            try:
                body = await request.json()
            except ClientDisconnect:  # the env stopped (end of a run) while sending
                return JSONResponse({"error": "client disconnected"}, status_code=499)
            prompt = body.get("prompt")
            if not isinstance(prompt, list) or not prompt:
                return JSONResponse({"error": "prompt must be token ids"}, status_code=400)
            batch = [prompt] if isinstance(prompt[0], int) else prompt
            prompts = [[int(t) for t in p] for p in batch]
            n, max_tokens = int(body.get("n", 1)), int(body.get("max_tokens", 256))
            temperature = float(body.get("temperature", 1.0))
            choices = [
                dict(self._choice(p, temperature, max_tokens), index=i * n + j)
                for i, p in enumerate(prompts)
                for j in range(n)
            ]
            if not body.get("stream"):
                return {"id": "cmpl", "object": "text_completion", "model": self.model, "choices": choices}

            def events() -> Iterator[str]:
                for choice in choices:  # each choice in one chunk (vLLM with a large stream_interval)
                    yield f"data: {json.dumps({'id': 'cmpl', 'object': 'text_completion', 'choices': [choice]})}\n\n"
                yield "data: [DONE]\n\n"

            return StreamingResponse(events(), media_type="text/event-stream")

        return app

    def _choice(self, prompt: list[int], temperature: float, max_tokens: int) -> dict[str, Any]:
        text = self.policy.tok.decode(prompt)
        ids, lps = self.policy.complete(text, temperature)
        finish = "stop"
        if len(ids) > max_tokens:
            ids, lps, finish = ids[:max_tokens], lps[:max_tokens], "length"
        return {
            "text": self.policy.tok.decode(ids, skip_special_tokens=True),
            "token_ids": ids,
            "prompt_token_ids": prompt,
            "logprobs": {"token_logprobs": lps, "tokens": [f"token_id:{i}" for i in ids]},
            "finish_reason": finish,
        }

    def __enter__(self) -> PolicyServer:
        self._thread.start()
        deadline = time.monotonic() + 30
        while not self._server.started:
            if time.monotonic() > deadline or not self._thread.is_alive():
                raise RuntimeError("policy server did not start")
            time.sleep(0.01)  # readiness poll of the server thread
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.should_exit = True
        self._thread.join(timeout=10)
