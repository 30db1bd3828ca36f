"""An instant inference server: stock vLLM's `/v1/completions` token-id wire format, answered at once.

    python benchmarks/instant_server.py PORT TOKENIZER_DIR [--tokens 64]

Every completions request is answered immediately with precomputed completions (no model): token ids
and their logprobs in vLLM's format for requests with `return_token_ids` / `return_tokens_as_token_ids`
/ `logprobs=0` (`text`, `token_ids`, echoed `prompt_token_ids`, `logprobs.{tokens, token_logprobs,
top_logprobs, text_offset}`, `finish_reason`), JSON or, with `stream: true`, server-sent events with
vLLM's chunking at a huge `stream_interval` (per choice: a first chunk with the prompt ids and the first
token, a last chunk with the rest and the finish reason), chunked transfer encoding. Choice `i * n + j`
is sample `j` of prompt `i`. Choice `k` of a request gets canned completion `k % VARIANTS`: short
reasoning text ending in `\\boxed{<number>}`, `--tokens` ids long (cut to `max_tokens`, then
`finish_reason` is `length`). GET `/v1/models` (listing TOKENIZER_DIR as the model's id) and `/health`
answer too.

POST `/generate` answers as atroposlib's archived custom server (`example_trainer/vllm_api_server.py`,
what atroposlib's own `VLLMServer` client calls): `text`, `prompt`, `finish_reasons`, and with
`logprobs` set, `logprobs` (`[[{id: logprob}] per token] per sample`), `prompt_token_ids`, `token_ids`.

The point is to take inference out of a benchmark so that the client (an environment) is the limit:
a raw asyncio HTTP/1.1 server (keep-alive, no framework), responses assembled from precomputed JSON
fragments; per request it only parses the body and writes out the prompt ids it echoes.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import time
from pathlib import Path
from typing import Any

VARIANTS = 16


def canned_completions(tok: Any, tokens: int) -> list[list[int]]:
    """`VARIANTS` completions of exactly `tokens` ids each, decoding to text ending in a boxed number."""
    out = []
    for v in range(VARIANTS):
        tail = tok.encode(f" so the answer is \\boxed{{{v * 7 % 23}}}", add_special_tokens=False).ids
        filler = tok.encode(" let us think step by step what is one plus two" * (tokens // 4 + 1)).ids
        if len(tail) >= tokens:
            raise SystemExit(f"--tokens {tokens} is shorter than the answer ({len(tail)} ids)")
        out.append(filler[: tokens - len(tail)] + tail)
    return out


class Fragments:
    """Precomputed JSON fragments of one canned completion at one `max_tokens`."""

    def __init__(self, tok_text: list[str], ids: list[int], max_tokens: int) -> None:
        cut = ids[:max_tokens]
        self.finish = "length" if len(ids) > max_tokens else "stop"
        self.whole = self._part(tok_text, cut, 0, self.finish)
        self.first = self._part(tok_text, cut[:1], 0, None)
        offset = len(tok_text[cut[0]]) if cut else 0
        self.rest = self._part(tok_text, cut[1:], offset, self.finish)

    @staticmethod
    def _part(tok_text: list[str], ids: list[int], offset: int, finish: str | None) -> str:
        """A choice's body after `"index": k,` and before the echoed prompt ids (vLLM's field order)."""
        lps = [-0.5 - (t % 7) * 0.25 for t in ids]
        offsets, names = [], []
        for t in ids:
            offsets.append(offset)
            offset += len(f"token_id:{t}")
            names.append(f"token_id:{t}")
        logprobs = {
            "text_offset": offsets,
            "token_logprobs": lps,
            "tokens": names,
            "top_logprobs": [{n: lp} for n, lp in zip(names, lps, strict=True)],
        }
        text = "".join(tok_text[t] for t in ids)
        return (
            f'"text": {json.dumps(text)}, "logprobs": {json.dumps(logprobs)}, '
            f'"finish_reason": {json.dumps(finish)}, "stop_reason": null, "token_ids": {json.dumps(ids)}'
        )


class InstantServer:
    def __init__(self, tokenizer_dir: str, tokens: int, model: str | None = None) -> None:
        self.model = model or tokenizer_dir  # the id /v1/models lists (clients check their model is served)
        from tokenizers import Tokenizer  # not transformers: seconds of import, for a decode table

        tok = Tokenizer.from_file(str(Path(tokenizer_dir) / "tokenizer.json"))
        self.tok_text = [tok.decode([i], skip_special_tokens=False) for i in range(tok.get_vocab_size())]
        self.completions = canned_completions(tok, tokens)
        self._fragments: dict[int, list[Fragments]] = {}
        self.requests = 0

    def fragments(self, max_tokens: int) -> list[Fragments]:
        if max_tokens not in self._fragments:
            self._fragments[max_tokens] = [Fragments(self.tok_text, c, max_tokens) for c in self.completions]
        return self._fragments[max_tokens]

    def answer(self, body: dict) -> tuple[bytes, bool]:
        """(response body, streamed?) for one `/v1/completions` request."""
        self.requests += 1
        prompt = body.get("prompt")
        prompts = prompt if prompt and isinstance(prompt[0], list) else [prompt]
        n = int(body.get("n", 1))
        frags = self.fragments(int(body.get("max_tokens") or 16))
        head = f'{{"id": "cmpl-{self.requests}", "object": "text_completion", "created": {int(time.time())}, '
        head += f'"model": {json.dumps(body.get("model", "instant"))}, "choices": ['
        echoes = [json.dumps(p) for p in prompts]
        total = len(prompts) * n
        usage = (
            f'"usage": {{"prompt_tokens": {sum(map(len, prompts)) * n}, "total_tokens": 0, '
            f'"completion_tokens": {total}}}'
        )
        if not body.get("stream"):
            choices = ", ".join(
                f'{{"index": {k}, {frags[k % VARIANTS].whole}, "prompt_token_ids": {echoes[k // n]}}}'
                for k in range(total)
            )
            return (head + choices + "], " + usage + "}").encode(), False
        events = [
            f'data: {head}{{"index": {k}, {frags[k % VARIANTS].first}, "prompt_token_ids": {echoes[k // n]}}}]}}\n\n'
            for k in range(total)
        ]
        events += [f'data: {head}{{"index": {k}, {frags[k % VARIANTS].rest}}}]}}\n\n' for k in range(total)]
        if (body.get("stream_options") or {}).get("include_usage"):
            events.append(f"data: {head}], {usage}}}\n\n")
        events.append("data: [DONE]\n\n")
        return "".join(events).encode(), True

    def generate(self, body: dict) -> bytes:
        """The body of atroposlib's `/generate` for one request (`prompt: {prompt_token_ids}`)."""
        self.requests += 1
        prompt = body["prompt"]["prompt_token_ids"]
        n = int(body.get("n", 1))
        max_tokens = int(body.get("max_tokens") or 16)
        samples = [self.completions[k % VARIANTS][:max_tokens] for k in range(n)]
        out = {
            "text": ["".join(self.tok_text[t] for t in ids) for ids in samples],
            "prompt": "".join(self.tok_text[t] for t in prompt),
            "finish_reasons": [self.fragments(max_tokens)[k % VARIANTS].finish for k in range(n)],
        }
        if body.get("logprobs") is not None:
            out["logprobs"] = [[[{t: -0.5 - (t % 7) * 0.25}] for t in ids] for ids in samples]
            out["prompt_token_ids"] = prompt
            out["token_ids"] = samples
        return json.dumps(out).encode()

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                lines = head.decode("latin-1").split("\r\n")
                method, path, _ = lines[0].split(" ", 2)
                length = 0
                for line in lines[1:]:
                    if line[:15].lower() == "content-length:":
                        length = int(line[15:])
                raw = await reader.readexactly(length) if length else b""
                if method == "POST" and path.rstrip("/").endswith("/completions"):
                    payload, streamed = self.answer(json.loads(raw))
                elif method == "POST" and path.rstrip("/") == "/generate":
                    payload, streamed = self.generate(json.loads(raw)), False
                elif method == "GET" and path.rstrip("/").endswith(("/models", "/health")):
                    models = {"object": "list", "data": [{"id": self.model, "object": "model"}]}
                    payload, streamed = json.dumps(models).encode(), False
                else:
                    writer.write(b"HTTP/1.1 404 Not Found\r\ncontent-length: 0\r\n\r\n")
                    continue
                if streamed:
                    writer.write(
                        b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n"
                        + b"%x\r\n" % len(payload)
                        + payload
                        + b"\r\n0\r\n\r\n"
                    )
                else:
                    writer.write(
                        b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: %d\r\n\r\n"
                        % len(payload)
                        + payload
                    )
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()


async def serve(port: int, tokenizer_dir: str, tokens: int) -> None:
    server = InstantServer(tokenizer_dir, tokens)
    async with await asyncio.start_server(server.handle, "127.0.0.1", port, backlog=1024) as srv:
        print("ready", flush=True)
        await srv.serve_forever()


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("port", type=int)
    p.add_argument("tokenizer_dir", type=Path)
    p.add_argument("--tokens", type=int, default=64)
    args = p.parse_args()
    asyncio.run(serve(args.port, str(args.tokenizer_dir), args.tokens))


if __name__ == "__main__":
    main()
