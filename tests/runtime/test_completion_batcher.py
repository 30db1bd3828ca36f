"""Concurrent sampling calls share one request: each caller gets its own samples, as soon as they are
complete; one bad prompt fails only its own caller; the vLLM stream is assembled and validated."""

from __future__ import annotations

import asyncio
import json
import os
from pathlib import Path

import pytest
from atroposlib.envs.server_handling.server_baseline import APIServerConfig
from atroposlib.envs.server_handling.vllm_server import VLLMServer
from transformers import AutoTokenizer

from environments.atropos_runtime.completion_batcher import CompletionBatcher
from environments.atropos_runtime.local_model import build_tiny_model
from environments.atropos_runtime.servers import VLLMTokenServer
from environments.atropos_runtime.token_completions import InferenceError, StreamedChoices
from tests.runtime.scripted_policy import ScriptedPolicy

ROOT = Path(__file__).resolve().parents[2]
PARAMS = {"n": 1, "max_tokens": 4, "temperature": 1.0}


def samples_of(prompt: list[int], n: int = 1):
    """What the fake server samples for `prompt`: derived from it, so a mix-up shows."""
    return [[sum(prompt), j] for j in range(n)], [[-0.5, -float(j)] for j in range(n)], ["stop"] * n


class FakeServer:
    """A sender that records each request and answers its prompts in reverse order."""

    def __init__(self, poison: int | None = None) -> None:
        self.requests: list[list[list[int]]] = []
        self.poison = poison

    async def send(self, prompts, params, deliver) -> None:
        self.requests.append(prompts)
        await asyncio.sleep(0)  # a real request yields to the loop
        if self.poison is not None and any(self.poison in p for p in prompts):
            raise InferenceError("400: prompt too long")  # vLLM fails the whole request
        for i in reversed(range(len(prompts))):
            deliver(i, samples_of(prompts[i], params["n"]))


async def test_concurrent_calls_share_one_request_and_each_gets_its_own_samples():
    server = FakeServer()
    batcher = CompletionBatcher(server.send, max_prompts=32)
    prompts = [[i, i + 1, i + 2] for i in range(10)]
    other = {**PARAMS, "temperature": 0.0}
    results = await asyncio.gather(
        *(batcher.complete(p, PARAMS) for p in prompts), batcher.complete([7, 7], other)
    )
    assert results[:10] == [samples_of(p) for p in prompts]
    assert results[10] == samples_of([7, 7])
    assert sorted(len(r) for r in server.requests) == [1, 10]  # other sampling params: its own request
    assert batcher.requests == 2 and batcher.prompts == 11


async def test_max_prompts_caps_a_request():
    server = FakeServer()
    batcher = CompletionBatcher(server.send, max_prompts=4)
    prompts = [[i] for i in range(10)]
    results = await asyncio.gather(*(batcher.complete(p, PARAMS) for p in prompts))
    assert [len(r) for r in server.requests] == [4, 4, 2]
    assert results == [samples_of(p) for p in prompts]


async def test_a_call_for_several_samples_goes_alone():
    server = FakeServer()
    batcher = CompletionBatcher(server.send, max_prompts=32)
    prompts = [[i] for i in range(4)]
    results = await asyncio.gather(*(batcher.complete(p, {**PARAMS, "n": 3}) for p in prompts))
    assert [len(r) for r in server.requests] == [1, 1, 1, 1]
    assert results == [samples_of(p, 3) for p in prompts]


async def test_calls_that_do_not_overlap_are_sent_alone_and_one_per_request_mode():
    server = FakeServer()
    batcher = CompletionBatcher(server.send, max_prompts=32)
    for i in range(3):
        assert await batcher.complete([i], PARAMS) == samples_of([i])
    unbatched = CompletionBatcher(server.send, max_prompts=1)
    await asyncio.gather(*(unbatched.complete([i], PARAMS) for i in range(3)))
    assert [len(r) for r in server.requests] == [1] * 6


async def test_a_bad_prompt_fails_only_its_own_caller():
    server = FakeServer(poison=666)
    batcher = CompletionBatcher(server.send, max_prompts=32)
    prompts = [[1], [2, 666], [3]]
    results = await asyncio.gather(*(batcher.complete(p, PARAMS) for p in prompts), return_exceptions=True)
    assert results[0] == samples_of([1]) and results[2] == samples_of([3])
    assert isinstance(results[1], InferenceError)
    assert [len(r) for r in server.requests] == [3, 1, 1, 1]  # the batch, then each prompt alone


async def test_prompts_delivered_before_a_failure_are_not_sent_again():
    requests: list[list[list[int]]] = []

    async def send(prompts, params, deliver) -> None:
        requests.append(prompts)
        deliver(0, samples_of(prompts[0]))
        if len(prompts) > 1:
            raise InferenceError("connection reset mid-stream")
        await asyncio.sleep(0)

    batcher = CompletionBatcher(send, max_prompts=32)
    results = await asyncio.gather(*(batcher.complete([i], PARAMS) for i in range(3)))
    assert results == [samples_of([i]) for i in range(3)]
    assert requests == [[[0], [1], [2]], [[1]], [[2]]]


async def test_a_slow_prompt_does_not_hold_back_its_batch_mates():
    fast_seen = asyncio.Event()

    async def send(prompts, params, deliver) -> None:
        deliver(1, samples_of(prompts[1]))
        await fast_seen.wait()  # the slow prompt is answered only after the fast caller has its samples
        deliver(0, samples_of(prompts[0]))

    batcher = CompletionBatcher(send, max_prompts=32)

    async def fast() -> None:
        assert await batcher.complete([2], PARAMS) == samples_of([2])
        fast_seen.set()

    slow = asyncio.ensure_future(batcher.complete([1], PARAMS))
    await asyncio.wait_for(fast(), 10)
    assert await asyncio.wait_for(slow, 10) == samples_of([1])


async def test_a_cancelled_caller_leaves_the_others_their_samples():
    server = FakeServer()
    batcher = CompletionBatcher(server.send, max_prompts=32)
    calls = [asyncio.ensure_future(batcher.complete([i], PARAMS)) for i in range(3)]
    await asyncio.sleep(0)
    calls[1].cancel()
    done = await asyncio.gather(*calls, return_exceptions=True)
    assert done[0] == samples_of([0]) and done[2] == samples_of([2])
    assert isinstance(done[1], asyncio.CancelledError)


def stream_chunk(
    index: int, ids: list[int], prompt: list[int] | None = None, finish: str | None = None
) -> dict:
    return {"choices": [{"index": index, "token_ids": ids, "logprobs": {"token_logprobs": [-0.25] * len(ids)},
                         "prompt_token_ids": prompt, "finish_reason": finish}]}  # fmt: skip


def test_stream_assembly_delivers_each_prompt_when_its_choices_finish():
    got: list[tuple[int, object]] = []
    stream = StreamedChoices([[1, 2], [3]], 2, lambda i, s: got.append((i, s)))
    stream.add(stream_chunk(2, [30], prompt=[3]))
    stream.add(stream_chunk(0, [10], prompt=[1, 2]))
    stream.add(stream_chunk(3, [40, 41], prompt=[3], finish="length"))
    stream.add(stream_chunk(2, [31], finish="stop"))
    assert got == [(1, ([[30, 31], [40, 41]], [[-0.25, -0.25], [-0.25, -0.25]], ["stop", "length"]))]
    stream.add(stream_chunk(1, [20], prompt=[1, 2], finish="stop"))
    stream.add(stream_chunk(0, [11], finish="stop"))
    assert got[1] == (0, ([[10, 11], [20]], [[-0.25, -0.25], [-0.25]], ["stop", "stop"]))


@pytest.mark.parametrize(
    "chunk, message",
    [
        (stream_chunk(1, [5], prompt=[9], finish="stop"), "different prompt"),
        (stream_chunk(7, [5]), "choice 7"),
        ({"choices": [{"index": 0, "text": "hi"}]}, "token_ids"),
        ({"error": {"message": "engine dead"}}, "engine dead"),
    ],
)
def test_stream_assembly_refuses_what_vllm_would_not_send(chunk, message):
    stream = StreamedChoices([[1], [2]], 1, lambda i, s: None)
    with pytest.raises(InferenceError, match=message):
        stream.add(chunk)


def test_a_chunk_after_its_choice_finished_is_refused():
    stream = StreamedChoices([[1], [2]], 1, lambda i, s: None)
    stream.add(stream_chunk(0, [5], prompt=[1], finish="stop"))
    with pytest.raises(InferenceError, match="after it finished"):
        stream.add(stream_chunk(0, [6]))


@pytest.fixture(scope="module")
def tok():
    tiny = build_tiny_model(os.environ.get("RLVR_TINY_MODEL") or ROOT / ".cache" / "tiny-model")
    return AutoTokenizer.from_pretrained(tiny)


async def test_token_server_batches_concurrent_calls_into_one_streamed_request(tok):
    """Through atroposlib's `tokens_and_logprobs_completion` (what ManagedServer calls), against a
    loopback server answering each prompt after its own random latency, choices in random order."""
    questions = [f"question {i}: say {i * 7}" for i in range(8)]
    with ScriptedPolicy(
        tok, lambda text, i: text.rsplit("say ", 1)[-1].strip(), latency_s=(0.0, 0.05)
    ) as policy:
        config = APIServerConfig(server_type="vllm", model_name="scripted", base_url=policy.base_url,
                                 api_key="x", tokenizer_name=str(tok.name_or_path), timeout=60)  # fmt: skip
        server = VLLMTokenServer(config)
        prompts = [tok.encode(q) for q in questions]
        results = await asyncio.gather(
            *(server.tokens_and_logprobs_completion(input_ids=p, n=1, max_tokens=16, temperature=1.0)
              for p in prompts)
        )  # fmt: skip
        await server.aclose()
        streamed = [r for r in policy.requests if r.get("stream")]
        assert len(streamed) == 1 and streamed[0]["prompt"] == prompts and len(policy.requests) == 1
        assert streamed[0]["stream_interval"] >= 16  # only each choice's first and last chunk
    for question, prompt, (echoed, ids, lps, reasons) in zip(questions, prompts, results, strict=True):
        assert echoed == prompt and len(ids) == len(lps) == len(reasons) == 1
        answer = question.rsplit("say ", 1)[-1]
        assert [tok.decode(i, skip_special_tokens=True) for i in ids] == [answer]
        assert all(len(a) == len(b) for a, b in zip(ids, lps, strict=True))
    assert json.dumps(results)  # plain lists, as ManagedServer expects


async def test_token_server_builds_its_text_client_on_first_use(tok):
    """VLLMTokenServer initialises as atroposlib's VLLMServer does, minus the eager openai client (the
    SDK import is start-up time the token path never uses); text calls still go through that client."""
    with ScriptedPolicy(tok, lambda text, i: "four") as policy:
        config = APIServerConfig(server_type="vllm", model_name="scripted", base_url=policy.base_url,
                                 api_key="x", tokenizer_name=str(tok.name_or_path), timeout=60)  # fmt: skip
        ours, upstream = VLLMTokenServer(config), VLLMServer(config)
        assert ours._openai is None
        assert set(vars(upstream)) <= set(vars(ours)) | {"openai"}  # every attribute upstream sets
        assert type(ours.tokenizer) is type(upstream.tokenizer)
        assert ours.tokenizer.name_or_path == upstream.tokenizer.name_or_path
        done = await ours.chat_completion(messages=[{"role": "user", "content": "2+2?"}], n=1, max_tokens=8)
        assert [c.message.content for c in done.choices] == ["four"]
        assert str(ours.openai.base_url).rstrip("/") == config.base_url and ours.openai.api_key == "x"
