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

from typing import Any

import httpx
from atroposlib.envs.server_handling.openai_server import OpenAIServer
from atroposlib.envs.server_handling.server_baseline import APIServer, APIServerConfig
from atroposlib.envs.server_handling.sglang_server import SGLangServer
from atroposlib.envs.server_handling.trl_vllm_server import TrlVllmServer
from atroposlib.envs.server_handling.vllm_server import VLLMServer

TOKEN_CAPABLE = ("vllm", "sglang")


class InferenceError(RuntimeError):
    """An inference server answered with something unusable (the message says what)."""


class VLLMTokenServer(VLLMServer):
    """Token-in / token-out generation on a stock vLLM OpenAI-compatible server."""

    def __init__(self, config: APIServerConfig, reasoning_config: Any = None) -> None:
        super().__init__(config, reasoning_config=reasoning_config)
        self._http: httpx.AsyncClient | None = None

    def _client(self) -> httpx.AsyncClient:
        if self._http is None or self._http.is_closed:
            headers = {"Authorization": f"Bearer {self.config.api_key}"} if self.config.api_key else {}
            self._http = httpx.AsyncClient(
                base_url=self.config.base_url.rstrip("/"),
                headers=headers,
                timeout=httpx.Timeout(self.config.timeout, connect=10.0),
                limits=httpx.Limits(max_connections=self.config.num_max_requests_at_once),
            )
        return self._http

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
        n = int(kwargs.get("n", 1))
        body = {
            **kwargs,
            "model": self.config.model_name,
            "prompt": prompt_tokens,
            "logprobs": 0,
            "return_token_ids": True,
            "return_tokens_as_token_ids": True,
        }
        response = await self._client().post("/completions", json=body)
        if response.status_code != 200:
            raise InferenceError(f"vLLM /completions returned {response.status_code}: {response.text[:300]}")
        return parse_token_completion(response.json(), prompt_tokens, n)


def parse_token_completion(payload: dict, prompt_tokens: list[int], n: int) -> tuple[list, list, list, list]:
    """Validate a vLLM `/v1/completions` body returned with `return_token_ids` and `logprobs=0`."""
    choices = sorted(payload.get("choices") or [], key=lambda c: c.get("index", 0))
    if len(choices) != n:
        raise InferenceError(f"asked for n={n} completions, got {len(choices)}")
    ids_list, lps_list, reasons = [], [], []
    for choice in choices:
        echoed = choice.get("prompt_token_ids")
        if echoed is not None and list(echoed) != prompt_tokens:
            raise InferenceError("server sampled from a different prompt than the one sent")
        ids = choice.get("token_ids")
        logprobs = (choice.get("logprobs") or {}).get("token_logprobs")
        if ids is None or logprobs is None:
            raise InferenceError("response lacks token_ids/logprobs: is this a vLLM OpenAI server?")
        if len(ids) != len(logprobs):
            raise InferenceError(f"{len(ids)} token ids but {len(logprobs)} logprobs")
        if any(lp is None for lp in logprobs):
            raise InferenceError("a sampled token has no logprob")
        ids_list.append([int(t) for t in ids])
        lps_list.append([float(lp) for lp in logprobs])
        reasons.append(choice.get("finish_reason") or "stop")
    return prompt_tokens, ids_list, lps_list, reasons


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


def check_reachable(config: APIServerConfig, timeout_s: float = 15.0) -> None:
    """Fail fast, in one line, when the inference server does not answer `GET {base_url}/models`."""
    if not config.base_url:
        return
    headers = {"Authorization": f"Bearer {config.api_key}"} if config.api_key else {}
    url = config.base_url.rstrip("/") + "/models"
    try:
        response = httpx.get(url, headers=headers, timeout=timeout_s)
    except httpx.HTTPError as exc:
        raise SystemExit(f"cannot reach the inference server at {config.base_url}: {exc}") from None
    if response.status_code >= 400:
        raise SystemExit(f"inference server at {config.base_url} answered {response.status_code} to /models")
