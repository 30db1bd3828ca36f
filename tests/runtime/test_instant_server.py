"""The env-overhead benchmark's instant inference server speaks what both clients read: rlvr-envs'
`VLLMTokenServer` (stock vLLM `/v1/completions`, JSON and streamed) and atroposlib's own `VLLMServer`
(the archived `/generate`). No timing is asserted (that is the benchmark's business)."""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

from atroposlib.envs.server_handling.server_baseline import APIServerConfig
from atroposlib.envs.server_handling.vllm_server import VLLMServer

from environments.atropos_runtime.local_model import free_port
from environments.atropos_runtime.servers import VLLMTokenServer

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))

from instant_server import VARIANTS, InstantServer  # noqa: E402


async def test_both_clients_get_the_canned_ids_and_logprobs(tiny_model):
    instant = InstantServer(str(tiny_model), tokens=24)
    port = free_port()
    server = await asyncio.start_server(instant.handle, "127.0.0.1", port)
    config = APIServerConfig(server_type="vllm", model_name="m", base_url=f"http://127.0.0.1:{port}/v1",
                             api_key="x", tokenizer_name=str(tiny_model), health_check=False)  # fmt: skip
    ours, theirs = VLLMTokenServer(config), VLLMServer(config)
    prompt = ours.tokenizer.encode("what is one plus two")
    try:
        group = await ours.tokens_and_logprobs_completion(input_ids=prompt, n=3, max_tokens=24)
        turns = await asyncio.gather(  # concurrent n=1 calls share one streamed request
            *(
                ours.tokens_and_logprobs_completion(input_ids=prompt + [k], n=1, max_tokens=10)
                for k in range(4)
            )
        )
        upstream = await theirs.tokens_and_logprobs_completion(input_ids=prompt, n=2, max_tokens=24)
    finally:
        await ours.aclose()
        server.close()
        await server.wait_closed()
    echoed, ids, lps, reasons = group
    assert echoed == prompt and ids == instant.completions[:3] and reasons == ["stop"] * 3
    assert all(len(i) == len(lp) == 24 and max(lp) < 0 for i, lp in zip(ids, lps, strict=True))
    assert "\\boxed{" in ours.tokenizer.decode(ids[1])
    for k, (echoed, ids, lps, reasons) in enumerate(turns):
        assert echoed == prompt + [k] and len(ids[0]) == len(lps[0]) == 10 and reasons == ["length"]
    assert instant.requests == 1 + 1 + 1  # the group, the four turns together, atroposlib's /generate
    assert upstream[1] == instant.completions[:2] and upstream[2] == [lps[:24] for lps in group[2][:2]]
    assert VARIANTS >= 8  # a group's choices differ (ManagedServer tells its nodes apart by text)


async def test_the_token_call_is_retried_as_atroposlib_retries_it(tiny_model, monkeypatch):
    """3 attempts with atroposlib's backoff (random up to 1 s, then up to 2 s), then tenacity's
    RetryError holding the last error, which `unwrap` (the runtime's reporting) reads."""
    import tenacity

    from environments.atropos_runtime import servers
    from environments.atropos_runtime.server_health import unwrap
    from environments.atropos_runtime.token_completions import InferenceError

    instant = InstantServer(str(tiny_model), tokens=16)
    failures = [0]

    async def flaky(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        if failures[0] > 0:
            failures[0] -= 1
            await reader.readuntil(b"\r\n\r\n")
            writer.write(
                b"HTTP/1.1 500 Oops\r\nContent-Length: 15\r\nConnection: close\r\n\r\nscripted outage"
            )
            await writer.drain()
            writer.close()
            return
        await instant.handle(reader, writer)

    backoffs: list[float] = []
    monkeypatch.setattr(servers.random, "uniform", lambda low, high: backoffs.append(high) or 0.0)
    port = free_port()
    server = await asyncio.start_server(flaky, "127.0.0.1", port)
    config = APIServerConfig(server_type="vllm", model_name="m", base_url=f"http://127.0.0.1:{port}/v1",
                             api_key="x", tokenizer_name=str(tiny_model), health_check=False)  # fmt: skip
    ours = VLLMTokenServer(config)
    prompt = ours.tokenizer.encode("what is one plus two")
    try:
        failures[0] = 2
        echoed, ids, _, _ = await ours.tokens_and_logprobs_completion(input_ids=prompt, n=2, max_tokens=16)
        assert echoed == prompt and ids == instant.completions[:2]
        assert ours.attempts_list[-1] == 3 and backoffs == [1.0, 2.0]
        await ours.aclose()  # flaky fails connections: the next call must open new ones
        failures[0] = 3
        try:
            await ours.tokens_and_logprobs_completion(input_ids=prompt, n=2, max_tokens=16)
        except tenacity.RetryError as exc:
            last = unwrap(exc)
            assert isinstance(last, InferenceError) and "500" in str(last) and "scripted outage" in str(last)
        else:
            raise AssertionError("three failed attempts must raise")
        assert failures[0] == 0 and backoffs == [1.0, 2.0, 1.0, 2.0]
    finally:
        await ours.aclose()
        server.close()
        await server.wait_closed()
