"""Inference-server clients for the runtime, and the choice of atroposlib server class.

atroposlib 0.4's `VLLMServer` needs the archived custom `/generate` server. `VLLMTokenServer` speaks
to a **stock** vLLM OpenAI server (`vllm serve`): the prompt goes in as token ids on
`/v1/completions`, and vLLM's `return_token_ids` / per-token `logprobs` come back, so ManagedServer
gets exact sampled ids and their logprobs without any custom endpoint.

Which class a run uses (`server_class_for`):

| `--openai.server_type` | `--env.vllm_api` | class | serve (training) |
|---|---|---|---|
| vllm | openai (default) | VLLMTokenServer (stock vLLM) | yes |
| vllm | generate | atroposlib VLLMServer (custom /generate) | yes |
| sglang | - | atroposlib SGLangServer | yes |
| openai / trl | - | atroposlib OpenAIServer / TrlVllmServer | refused: no token ids |
"""

from __future__ import annotations

import asyncio
import math
import random
import time
from collections.abc import AsyncIterator, Mapping
from typing import Any, Literal

import httpx
import tenacity
from atroposlib.envs.server_handling import vllm_server
from atroposlib.envs.server_handling.openai_server import OpenAIServer
from atroposlib.envs.server_handling.server_baseline import APIServer, APIServerConfig
from atroposlib.envs.server_handling.sglang_server import SGLangServer
from atroposlib.envs.server_handling.trl_vllm_server import TrlVllmServer
from atroposlib.envs.server_handling.vllm_server import VLLMServer

from environments.atropos_runtime import fast_json
from environments.atropos_runtime.completion_batcher import CompletionBatcher, Deliver
from environments.atropos_runtime.tls import verify_for
from environments.atropos_runtime.token_completions import (
    InferenceError,
    StreamedChoices,
    parse_token_completions,
)

TOKEN_CAPABLE = ("vllm", "sglang")
STREAM_INTERVAL = 1 << 20
"""Tokens per streamed chunk asked of vLLM (its per-request `stream_interval`; a server without it
ignores the field): a choice streams only its first and last chunk, so a batch pays two chunks per
choice instead of one per token, and each prompt is still handed over the moment it finishes."""
JSON_BODY = {"Content-Type": "application/json"}  # a request body made by fast_json.dumps
TOKEN_CALL_ATTEMPTS = 3  # atroposlib's stop_after_attempt(3) on its token calls


class VLLMTokenServer(VLLMServer):
    """Token-in / token-out generation on a stock vLLM OpenAI-compatible server. Concurrent calls
    with the same sampling parameters share one request (`completion_batcher`); `max_batch_prompts`
    (set from `--env.max_batch_prompts`; 1 = one request per call) caps a request's prompts."""

    max_batch_prompts: int = 64

    def __init__(self, config: APIServerConfig, reasoning_config: Any = None) -> None:
        # VLLMServer.__init__ without its eager `openai.AsyncClient`: token generation goes through
        # httpx, and importing the SDK costs ~0.3-0.5 s of every start. `openai` is built on first use.
        name = config.model_name if config.tokenizer_name == "none" else config.tokenizer_name
        self.tokenizer = vllm_server.AutoTokenizer.from_pretrained(name)
        APIServer.__init__(self, config, reasoning_config=reasoning_config)
        self._openai: Any = None
        self._http: Any = None  # aiohttp.ClientSession, see `_client`
        self._http_loop: asyncio.AbstractEventLoop | None = None
        self._batcher: CompletionBatcher | None = None

    @property
    def openai(self) -> Any:
        """VLLMServer's text-completion client (`chat_completion` / `completion` without token ids)."""
        if self._openai is None:
            import openai

            cfg = self.config
            self._openai = openai.AsyncClient(api_key=cfg.api_key, base_url=cfg.base_url, timeout=cfg.timeout)
        return self._openai

    @openai.setter
    def openai(self, client: Any) -> None:
        self._openai = client

    def _client(self) -> Any:
        """This event loop's keep-alive `aiohttp.ClientSession` for the token path, built on first use.
        aiohttp, not httpx: a request costs ~3x less CPU (`benchmarks/env_overhead_bench.py`), and at
        thousands of tokens/s the environment's CPU decides how many env processes a trainer needs.
        Timeouts as before: 10 s to connect, `config.timeout` without a byte from the server."""
        loop = asyncio.get_running_loop()
        if self._http is None or self._http.closed or self._http_loop is not loop:
            import aiohttp

            headers = {"Authorization": f"Bearer {self.config.api_key}"} if self.config.api_key else {}
            self._http = aiohttp.ClientSession(
                headers=headers,
                timeout=aiohttp.ClientTimeout(total=None, connect=10.0, sock_read=self.config.timeout),
                connector=aiohttp.TCPConnector(
                    limit=self.config.num_max_requests_at_once, ssl=verify_for(self.config.base_url)
                ),
            )
            self._http_loop = loop
        return self._http

    async def aclose(self) -> None:
        """Close the token path's HTTP session (a later call opens a new one)."""
        if self._http is not None and not self._http.closed:
            await self._http.close()
        self._http = None

    @property
    def batcher(self) -> CompletionBatcher:
        if self._batcher is None or self._batcher.max_prompts != self.max_batch_prompts:
            self._batcher = CompletionBatcher(self._send_prompts, self.max_batch_prompts)
        return self._batcher

    async def _tokens_and_logprobs_comp(
        self, stat_dict: dict, **kwargs: Any
    ) -> tuple[list, list, list, list]:
        return await self._attempts(self.sem, stat_dict, kwargs)

    async def _tokens_and_logprobs_comp_eval(
        self, stat_dict: dict, **kwargs: Any
    ) -> tuple[list, list, list, list]:
        return await self._attempts(self.eval_sem, stat_dict, kwargs)

    async def _attempts(
        self, sem: Any, stat_dict: dict, kwargs: dict[str, Any]
    ) -> tuple[list, list, list, list]:
        """atroposlib's retried token call (`APIServer._tokens_and_logprobs_comp`: wait while the server
        is marked unhealthy, take a slot of `sem`, count attempts and time the call; any Exception is
        tried again, 3 attempts in all with tenacity's `wait_random_exponential(multiplier=1, max=10)`
        between them, then `tenacity.RetryError` holding the last attempt) as a plain loop: tenacity's
        wrapper cost ~20 us per call, and a multi-turn episode makes one call per turn."""
        for attempt in range(1, TOKEN_CALL_ATTEMPTS + 1):
            try:
                while not self.server_healthy:
                    await asyncio.sleep(1)  # atroposlib's protocol: poll the health flag
                async with sem:
                    if stat_dict.get("start") is None:
                        stat_dict["start"] = time.time()
                    stat_dict["attempts"] += 1
                    completions = await self._tokens_and_logprobs_completion_wrapper(**kwargs)
                    stat_dict["end"] = time.time()
                    return completions
            except Exception as exc:  # noqa: BLE001 - tried again, as atroposlib's @retry does
                if attempt == TOKEN_CALL_ATTEMPTS:
                    last = tenacity.Future(attempt)
                    last.set_exception(exc)
                    raise tenacity.RetryError(last) from exc
                await asyncio.sleep(random.uniform(0, min(10.0, 2.0 ** (attempt - 1))))  # the backoff
        raise AssertionError("unreachable")

    async def _tokens_and_logprobs_completion_wrapper(self, **kwargs: Any) -> tuple[list, list, list, list]:
        """Returns `(prompt_tokens, [output_ids], [output_logprobs], [finish_reasons])`, one per choice."""
        if "input_ids" in kwargs:
            prompt_tokens = list(kwargs.pop("input_ids"))
            kwargs.pop("prompt", None)
        else:
            prompt_tokens = self.tokenizer.encode(kwargs.pop("prompt"))
        bos = self.tokenizer.bos_token_id
        if bos is not None and len(prompt_tokens) >= 2 and prompt_tokens[0] == prompt_tokens[1] == bos:
            prompt_tokens = prompt_tokens[1:]
        for alias in ("max_new_tokens", "max_completion_tokens"):
            if alias in kwargs:
                kwargs["max_tokens"] = kwargs.pop(alias)
        kwargs.pop("model", None)
        kwargs["n"] = int(kwargs.get("n", 1))
        ids, lps, reasons = await self.batcher.complete(prompt_tokens, kwargs)
        return prompt_tokens, ids, lps, reasons

    async def _send_prompts(
        self, prompts: list[list[int]], params: Mapping[str, Any], deliver: Deliver
    ) -> None:
        """One `/completions` request for `prompts`; several are streamed, so each prompt's samples
        are delivered as soon as its `n` choices have finished."""
        n = int(params["n"])
        body = {
            **params,
            "model": self.config.model_name,
            "prompt": prompts if len(prompts) > 1 else prompts[0],
            "logprobs": 0,
            "return_token_ids": True,
            "return_tokens_as_token_ids": True,
        }
        url = self.config.base_url.rstrip("/") + "/completions"
        if len(prompts) == 1:
            async with self._client().post(url, data=fast_json.dumps(body), headers=JSON_BODY) as response:
                raw = await response.read()
                if response.status != 200:
                    text = raw.decode(errors="replace")
                    raise InferenceError(f"vLLM /completions returned {response.status}: {text[:300]}")
            deliver(0, parse_token_completions(fast_json.loads(raw), prompts, n)[0])
            return
        stream = StreamedChoices(prompts, n, deliver)
        body = {**body, "stream": True, "stream_interval": STREAM_INTERVAL}
        async with self._client().post(url, data=fast_json.dumps(body), headers=JSON_BODY) as response:
            if response.status != 200:
                text = (await response.read()).decode(errors="replace")
                raise InferenceError(f"vLLM /completions returned {response.status}: {text[:300]}")
            async for line in sse_lines(response.content.iter_any()):
                if line.startswith(b"data: {"):
                    stream.add(fast_json.loads(line[6:]))


async def sse_lines(chunks: AsyncIterator[bytes]) -> AsyncIterator[bytes]:
    """The lines of a byte stream, however it is chunked (no length limit: one streamed choice of a
    long completion is one line)."""
    pending: list[bytes] = []
    async for chunk in chunks:
        pending.append(chunk)
        if b"\n" not in chunk:
            continue
        *lines, rest = b"".join(pending).split(b"\n")
        pending = [rest] if rest else []
        for line in lines:
            yield line
    if pending:
        yield b"".join(pending)


def server_class_for(server_type: str, vllm_api: str) -> type[APIServer]:
    """The atroposlib server class for a `server_type` (see the module table)."""
    if server_type == "vllm":
        return VLLMTokenServer if vllm_api == "openai" else VLLMServer
    classes: dict[str, type[APIServer]] = {
        "sglang": SGLangServer,
        "openai": OpenAIServer,
        "trl": TrlVllmServer,
    }
    if server_type not in classes:
        raise ValueError(f"unknown server_type {server_type!r} (vllm, sglang, openai, trl)")
    return classes[server_type]


def probe_url(server: APIServer) -> str:
    """Where to check that a server answers: `/models` for OpenAI-style APIs, `/health` for the
    native `/generate` servers (atroposlib's vLLM server has no OpenAI routes)."""
    base = server.config.base_url.rstrip("/")
    if isinstance(server, VLLMTokenServer) or not isinstance(server, VLLMServer | SGLangServer):
        return base + "/models"
    return base.removesuffix("/v1") + "/health"


def check_reachable(server: APIServer, timeout_s: float = 15.0) -> None:
    """Fail fast, in one line, when the inference server does not answer its probe URL, or lists its
    models (OpenAI-style `/models`) and `--openai.model_name` is not among them."""
    config = server.config
    if not config.base_url:
        return
    headers = {"Authorization": f"Bearer {config.api_key}"} if config.api_key else {}
    url = probe_url(server)
    try:
        response = httpx.get(url, headers=headers, timeout=timeout_s, verify=verify_for(url))
    except httpx.HTTPError as exc:
        raise SystemExit(f"cannot reach the inference server at {config.base_url}: {exc}") from None
    if response.status_code >= 400:
        raise SystemExit(f"inference server at {config.base_url} answered {response.status_code} to {url}")
    served = served_models(response)
    if served is not None and config.model_name not in served:
        raise SystemExit(
            f"the inference server at {config.base_url} does not serve model {config.model_name!r}; it serves "
            f"{', '.join(repr(m) for m in served) or 'nothing'} (set --openai.model_name)"
        )


def served_models(response: httpx.Response) -> list[str] | None:
    """The model ids of an OpenAI-style `/models` answer; None for any other answer."""
    try:
        data = response.json()["data"]
        return [str(m["id"]) for m in data]
    except (ValueError, KeyError, TypeError):
        return None


TOKENIZER_PROBE = "Tokenizer probe: 12+3=15; naïve café, 東京, <think> ok"


def check_tokenizer(server: APIServer, tokenizer: Any, tokenizer_name: str, timeout_s: float = 15.0) -> None:
    """Refuse, in one line, a local tokenizer that encodes differently from the served model: the
    runtime builds prompts and reads sampled ids with it, so a mismatch trains on wrong text. Asks
    vLLM's `/tokenize`; a server without it (404/405) is not checked."""
    config = server.config
    if not config.base_url or tokenizer is None:
        return
    url = config.base_url.rstrip("/").removesuffix("/v1") + "/tokenize"
    headers = {"Authorization": f"Bearer {config.api_key}"} if config.api_key else {}
    try:
        response = httpx.post(url, json={"model": config.model_name, "prompt": TOKENIZER_PROBE},
                              headers=headers, timeout=timeout_s, verify=verify_for(url))  # fmt: skip
        theirs = response.json()["tokens"] if response.status_code == 200 else None
    except (httpx.HTTPError, ValueError, KeyError, TypeError):
        theirs = None
    if theirs is None:
        return
    ours = list(tokenizer.encode(TOKENIZER_PROBE))
    if ours != list(theirs):
        raise SystemExit(
            f"--env.tokenizer_name {tokenizer_name} does not match the model {config.model_name!r} served at "
            f"{config.base_url}: a probe text encodes to {len(ours)} ids here ({ours[:6]}...) and {len(theirs)} "
            f"there ({list(theirs)[:6]}...); use the served model's tokenizer"
        )


LogprobsMode = Literal["processed", "raw"]


def logprobs_mode_of(top_t1: Mapping[str, float], top_t2: Mapping[str, float]) -> LogprobsMode:
    """Which convention a server's logprobs follow, from one position's top logprobs sampled at
    temperature 1 and at temperature 2: raw logprobs do not depend on the temperature."""
    common = [t for t in top_t1 if t in top_t2 and math.isfinite(top_t1[t]) and math.isfinite(top_t2[t])]
    if not common:
        raise InferenceError("logprobs probe: no common top tokens at temperatures 1 and 2")
    differs = max(abs(top_t1[t] - top_t2[t]) for t in common)
    return "processed" if differs > 1e-4 else "raw"


def probe_logprobs_mode(server: VLLMTokenServer, timeout_s: float = 60.0) -> LogprobsMode:
    """Ask a stock vLLM server which logprobs it returns (two one-token requests)."""
    config = server.config
    headers = {"Authorization": f"Bearer {config.api_key}"} if config.api_key else {}
    prompt = server.tokenizer.encode("What is two plus two? The answer is")
    tops = []
    for temperature in (1.0, 2.0):  # vLLM allows [0, 2]
        body = {"model": config.model_name, "prompt": prompt, "max_tokens": 1, "logprobs": 5,
                "temperature": temperature, "seed": 0}  # fmt: skip
        resp = httpx.post(config.base_url.rstrip("/") + "/completions", json=body, headers=headers,
                          timeout=timeout_s, verify=verify_for(config.base_url))  # fmt: skip
        if resp.status_code != 200:
            raise InferenceError(
                f"logprobs probe: /completions returned {resp.status_code}: {resp.text[:200]}"
            )
        tops.append(resp.json()["choices"][0]["logprobs"]["top_logprobs"][0])
    return logprobs_mode_of(tops[0], tops[1])


def check_logprobs_mode(server: APIServer, wanted: LogprobsMode) -> None:
    """Fail fast, in one line, when the server's logprobs convention is not the one asked for."""
    if not isinstance(server, VLLMTokenServer):
        return  # /generate and SGLang servers are taken at their word
    served = probe_logprobs_mode(server)
    if served == wanted:
        return
    if wanted == "processed":
        raise SystemExit(
            f"vLLM at {server.config.base_url} returns raw (unscaled) logprobs, but sampling at "
            "temperature != 1 needs the sampling distribution's logprobs, which trainers expect: start "
            "vLLM with --logprobs-mode processed_logprobs, or pass --env.logprobs_mode raw to send raw ones"
        )
    raise SystemExit(
        f"vLLM at {server.config.base_url} returns processed (temperature-scaled) logprobs, but "
        "--env.logprobs_mode raw was asked for: start vLLM without --logprobs-mode processed_logprobs"
    )
