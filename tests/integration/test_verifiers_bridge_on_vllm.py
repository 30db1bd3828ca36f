"""The Verifiers bridge in serve mode on the real tiny model (vLLM) to a trainer's /batch (real
run-api): a classic env's groups arrive aligned, with the env's own sampling args, and every score
is the env's reward of that sequence's own decoded tokens."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from transformers import AutoTokenizer

from tests.integration.test_modes_on_vllm import register_trainer, take_batches
from tests.verifiers_bridge.policies import assistant_runs

pytestmark = pytest.mark.slow
ROOT = Path(__file__).resolve().parents[2]


def test_serve_delivers_a_classic_env_with_its_own_rewards(vllm_server, run_api, tmp_path):
    import verifiers as vf

    register_trainer(run_api, batch_size=4, max_token_len=1024)
    cmd = [sys.executable, str(ROOT / "environments" / "verifiers_env.py"), "serve",
           "--env.vf_env_name", "tests.verifiers_bridge.fixtures.vf_sum", "--env.env_args", '{"max_tokens": 16}',
           "--env.tokenizer_name", vllm_server.model, "--openai.model_name", vllm_server.model,
           "--openai.base_url", vllm_server.base_url, "--env.rollout_server_url", run_api,
           "--env.group_size", "2", "--env.total_steps", "2", "--env.include_messages", "true",
           "--env.ensure_scores_are_not_same", "false"]  # fmt: skip
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
    fmt = vf.XMLParser(["answer"], answer_field="answer").get_format_reward_func()
    for g in batch:
        assert g["generation_params"]["temperature"] == 0.5  # the env's own sampling args
        for tokens, masks, lps, msgs, score in zip(g["tokens"], g["masks"], g["inference_logprobs"],
                                                   g["messages"], g["scores"], strict=True):  # fmt: skip
            assert len(tokens) == len(masks) == len(lps) < 1024
            (run,) = assistant_runs(tokens, masks)
            assert len(run) <= 16
            reply = tok.decode(run, skip_special_tokens=True)
            assert reply == msgs[-1]["content"]
            a, b = map(int, re.findall(r"What is (\d+) \+ (\d+)\?", msgs[-2]["content"])[0])
            answer = str(a + b)
            correct = 1.0 if reply.strip() == f"<answer>{answer}</answer>" else 0.0
            assert score == pytest.approx(correct + 0.25 * fmt([{"role": "assistant", "content": reply}]))


def test_serve_runs_a_tool_env_on_the_real_model(vllm_server, run_api, tmp_path):
    """A classic ToolEnv on the random tiny model (served by vLLM), with the tiny tokenizer under a
    Hermes tool template (same ids): episodes run and reach /batch, the tools are in every prompt,
    assistant turns masked in, everything else masked out (the bridge's own invariants hold, or the
    group would have been dropped), scores are the env's reward (0 or 1)."""
    from tests.verifiers_bridge.tool_template import tool_tokenizer

    tokenizer = tool_tokenizer(Path(vllm_server.model), tmp_path / "tool-tokenizer")
    register_trainer(run_api, batch_size=4, max_token_len=1536)
    cmd = [sys.executable, str(ROOT / "environments" / "verifiers_env.py"), "serve",
           "--env.vf_env_name", "tests.verifiers_bridge.fixtures.vf_tools", "--env.tool_parser", "hermes",
           "--env.tokenizer_name", str(tokenizer), "--openai.model_name", vllm_server.model,
           "--openai.base_url", vllm_server.base_url, "--env.rollout_server_url", run_api,
           "--env.max_tokens", "24", "--env.group_size", "2", "--env.total_steps", "2",
           "--env.include_messages", "true", "--env.ensure_scores_are_not_same", "false"]  # fmt: skip
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
    tok = AutoTokenizer.from_pretrained(tokenizer)
    for g in batch:
        for tokens, masks, lps, msgs, score in zip(g["tokens"], g["masks"], g["inference_logprobs"],
                                                   g["messages"], g["scores"], strict=True):  # fmt: skip
            assert len(tokens) == len(masks) == len(lps) < 1536
            turns = [m for m in msgs if m["role"] == "assistant"]
            runs = assistant_runs(tokens, masks)
            assert len(runs) == len(turns) >= 1 and all(len(r) <= 24 for r in runs)
            first_prompt = tok.decode(tokens[: next(k for k, m in enumerate(masks) if m != -100)])
            assert '"name": "add"' in first_prompt and '"name": "multiply"' in first_prompt
            assert score in (0.0, 1.0)
