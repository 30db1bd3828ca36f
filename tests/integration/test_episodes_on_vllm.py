"""3-turn episodes on the real tiny model (vLLM) through serve to a trainer's /batch (real run-api):
every invariant, exact re-decoding, and sampled logprobs == vLLM's re-scoring of the same ids."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import httpx
import pytest
from transformers import AutoTokenizer

from benchmarks.trainer_client import register_trainer, take_batches

pytestmark = pytest.mark.slow
ROOT = Path(__file__).resolve().parents[2]
RETRY = ROOT / "tests" / "integration" / "multiturn_env.py"


def rescored_logprobs(vllm, tokens: list[int]) -> list[float | None]:
    """vLLM's own logprob of every token of `tokens` given its prefix (`prompt_logprobs`)."""
    body = {"model": vllm.model, "prompt": tokens, "max_tokens": 1, "prompt_logprobs": 0, "temperature": 0}
    choice = httpx.post(vllm.base_url + "/completions", json=body, timeout=120).json()["choices"][0]
    out = []
    for tok, entry in zip(tokens, choice["prompt_logprobs"], strict=True):
        out.append(None if entry is None else entry[str(tok)]["logprob"])
    return out


def test_serve_delivers_three_turn_episodes_with_exact_tokens(vllm_server, run_api, tmp_path):
    register_trainer(run_api, batch_size=4, max_token_len=1024)
    cmd = [sys.executable, str(RETRY), "serve", "--env.tokenizer_name", vllm_server.model,
           "--openai.model_name", vllm_server.model, "--openai.base_url", vllm_server.base_url,
           "--env.rollout_server_url", run_api, "--env.group_size", "2", "--env.total_steps", "2",
           "--env.max_tokens", "12", "--env.include_messages", "true", "--env.temperature", "1.0"]  # fmt: skip
    log = open(tmp_path / "serve.log", "w")  # noqa: SIM115
    proc = subprocess.Popen(
        cmd, stdout=log, stderr=subprocess.STDOUT, env=dict(os.environ, PYTHONPATH=str(ROOT)), cwd=ROOT
    )
    try:
        batch = next(iter(take_batches(run_api, 1, proc, timeout_s=300)), None)
        assert batch, (tmp_path / "serve.log").read_text()[-3000:]
    finally:
        proc.terminate()
        proc.wait(timeout=30)
    tok = AutoTokenizer.from_pretrained(vllm_server.model)
    im_end = tok.convert_tokens_to_ids("<|im_end|>")
    worst = 0.0
    for g in batch:
        assert g["overrides"] == [{"set_advantage_to_zero": True}] * 2  # every turn hit max_tokens
        for tokens, masks, lps, msgs in zip(g["tokens"], g["masks"], g["inference_logprobs"], g["messages"],
                                            strict=True):  # fmt: skip
            assert len(tokens) == len(masks) == len(lps) < 1024
            assert sum(m["role"] == "assistant" for m in msgs) == 3
            runs = [(m != -100) for m in masks]
            assert (
                sum(a != b for a, b in zip(runs, runs[1:], strict=False)) == 5
            )  # 3 trained runs, 2 env runs
            assert all(lp == 1.0 for m, lp in zip(masks, lps, strict=True) if m == -100)
            assert all(m == t for m, t in zip(masks, tokens, strict=True) if m != -100)
            # the sequence is the conversation the model saw: prompt, each sampled turn, each env turn
            raw = _raw_turns(tok, tokens, masks, im_end)
            assert [tok.decode(r, skip_special_tokens=True) for r in raw] == [
                m["content"] for m in msgs if m["role"] == "assistant"
            ]
            texts = [tok.decode(r[:-1] if r[-1] == im_end else r) for r in raw]  # the template adds the end
            rendered = tok.apply_chat_template(_with_raw(msgs, texts), tokenize=False)
            closing = "\n" if raw[-1][-1] == im_end else "<|im_end|>\n"
            assert tok.decode(tokens) + closing == rendered
            # sampled logprobs == vLLM scoring the same ids as a prompt (CPU float noise only)
            again = rescored_logprobs(vllm_server, tokens)
            for m, lp, ref in zip(masks, lps, again, strict=True):
                if m != -100:
                    worst = max(worst, abs(lp - ref))
    print(f"largest |sampled - re-scored| logprob: {worst:.2e}")
    assert worst < 0.05, worst


def _raw_turns(tok, tokens, masks, im_end) -> list[list[int]]:
    turns: list[list[int]] = []
    previous = False
    for t, m in zip(tokens, masks, strict=True):
        if m != -100:
            if not previous:
                turns.append([])
            turns[-1].append(t)
        previous = m != -100
    return turns


def _with_raw(messages, raw_texts):
    it = iter(raw_texts)
    return [{**m, "content": next(it)} if m["role"] == "assistant" else m for m in messages]
