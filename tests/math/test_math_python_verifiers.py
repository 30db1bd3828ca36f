"""math_python as a classic Verifiers environment: `load_environment()` run by Verifiers' own
`evaluate()` / `generate()` against a scripted loopback policy served as vLLM serves a tool model
(Hermes template, hermes parser: `ToolChatPolicy`). The `python` tool runs in the rollout's own
sandboxed session (state persists across two calls of one rollout, never across rollouts), the reward
is the final answer's, and a sandbox failure is NaN (unverified), never 0."""

from __future__ import annotations

import json
import math
import os
import re
from pathlib import Path
from typing import Any

import pytest
from openai import AsyncOpenAI
from transformers import AutoTokenizer

from environments.math_python_env import load_environment
from environments.vf_bridge.compat import classic_client
from tests.verifiers_bridge.test_stateful_and_games import ToolChatPolicy
from tests.verifiers_bridge.tool_template import tool_tokenizer

ROOT = Path(__file__).resolve().parents[2]
ROWS = [
    {"id": "m1", "question": "What is 6 times 7?", "answer": "42"},
    {"id": "m2", "question": "What is 9 times 9?", "answer": "81"},
]
FIRST = "print('secret' in globals()); secret = 41"  # False in a fresh interpreter


def python(code: str) -> str:
    return f'<tool_call>\n{{"name": "python", "arguments": {json.dumps({"code": code})}}}\n</tool_call>'


def policy(text: str, index: int) -> str:
    """6x7: look for a leftover `secret` and set it, then print `secret + 1`, then box what the two
    calls printed (42 only if the first said False and the second 42). 9x9: answers 80 at once."""
    if "9 times 9" in text:
        return "\\boxed{80}"
    turns = text.count("<|im_start|>assistant\n") - 1
    if turns == 0:
        return python(FIRST)
    if turns == 1:
        return python("print(secret + 1)")
    seen = [r.strip() for r in re.findall(r"<tool_response>\n(.*?)\n</tool_response>", text, re.S)]
    return "\\boxed{42}" if seen == ["False", "42"] else f"\\boxed{{{' '.join(seen) or 'none'}}}"


@pytest.fixture(scope="module")
def tool_tok(tmp_path_factory: pytest.TempPathFactory) -> Any:
    from environments.atropos_runtime.local_model import build_tiny_model

    tiny = build_tiny_model(os.environ.get("RLVR_TINY_MODEL") or ROOT / ".cache" / "tiny-model")
    return AutoTokenizer.from_pretrained(tool_tokenizer(tiny, tmp_path_factory.mktemp("tool-tokenizer")))


@pytest.fixture
def env(tmp_path: Path) -> Any:
    data = tmp_path / "math.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in ROWS))
    # one session: a rollout whose session stayed open would leave the next one waiting for it
    return load_environment(dataset=str(data), eval_fraction=1.0, python_sessions=1)


def by_question(states: list) -> dict[str, list]:
    out: dict[str, list] = {}
    for s in states:
        out.setdefault(s["prompt"][-1]["content"], []).append(s)
    return out


def tool_texts(state: Any) -> list[str]:
    return [m["content"].strip() for m in state["completion"] if m["role"] == "tool"]


async def test_the_tool_runs_in_each_rollouts_own_sandbox_session(env, tool_tok):
    assert env.oai_tools[0]["function"]["name"] == "python" and type(env).__name__ == "TaskMultiTurnEnv"
    with ToolChatPolicy(tool_tok, policy, latency_s=(0.0, 0.01)) as server:
        client = classic_client(AsyncOpenAI(base_url=server.base_url, api_key="x"))
        # one rollout after another: the second 6x7 rollout would see the first one's `secret`
        out = await env.evaluate(client, "scripted", rollouts_per_example=2, max_concurrent=1)
        assert env._rlvr_loop is None  # the sandbox pool closed with evaluate()
        # a second run (verifiers' generate, rollouts at once) starts a fresh pool
        again = await env.generate(env.get_eval_dataset(), client, "scripted")
        tools = [r.get("tools") for r in server.requests]
    assert tools and all(t and t[0]["function"]["name"] == "python" for t in tools)
    for states in (out["state"], again["state"]):
        rows = by_question(states)
        solved, wrong = rows["What is 6 times 7?"], rows["What is 9 times 9?"]
        for s in solved:
            assert tool_texts(s) == ["False", "42"] and s["reward"] == 1.0
            assert s["rlvr_reward"]["components"]["tool_calls"] == 2
            assert s["rlvr_ended"] and "python_session" not in s["rlvr_state"]  # closed at the end
        for s in wrong:
            assert tool_texts(s) == [] and s["reward"] == 0.0 and s["rlvr_reward"]["score"] == 0.0
    assert len(out["state"]) == 4 and len(again["state"]) == 2


@pytest.mark.parametrize("where", ["start", "open"])
async def test_a_sandbox_failure_is_unverified_never_wrong(env, tool_tok, monkeypatch, where):
    from environments.tools import python as python_tool
    from environments.tools.core import ToolInfraError
    from sandbox import SandboxUnavailable

    async def cannot_start(self: Any) -> None:
        raise SandboxUnavailable("no sandbox here (test)")

    async def cannot_open(self: Any, state: dict) -> None:
        raise ToolInfraError("no Python session could open (test)")

    if where == "start":
        monkeypatch.setattr(python_tool.PythonTool, "start", cannot_start)
    else:
        monkeypatch.setattr(python_tool.PythonTool, "open_session", cannot_open)
    with ToolChatPolicy(tool_tok, policy, latency_s=(0.0, 0.01)) as server:
        client = classic_client(AsyncOpenAI(base_url=server.base_url, api_key="x"))
        out = await env.evaluate(client, "scripted")
    rows = by_question(out["state"])
    failed = rows["What is 6 times 7?"][0]
    assert math.isnan(failed["reward"]) and tool_texts(failed) == []
    want = "could not start: SandboxUnavailable" if where == "start" else "tool 'python' could not run"
    assert want in failed["rlvr_failure"]
    # 9x9 makes no call: without a pool it cannot even start; with one it is scored as usual
    other = rows["What is 9 times 9?"][0]
    assert math.isnan(other["reward"]) if where == "start" else other["reward"] == 0.0
