"""v1 tool tasksets end to end: `vfv1_tools` (an MCP Toolset of add / multiply, served by v1 itself,
called by the null harness's chat loop) through `verifiers_env.py process` in the 0.4.0 venv, with
the Hermes tool template over the tiny tokenizer and the scripted policy: the tools rendered into the
prompt, each sampled call parsed by vLLM's hermes parser into OpenAI tool_calls, v1's tool results
rendered after the exact ids (masked out), a malformed call answered by the harness's own JSON error,
rewards by identity; and the one-line refusal where the template cannot carry tools or vLLM is
missing (the matrix venv as built)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sysconfig
from pathlib import Path

import pytest

from tests.runtime.scripted_policy import ScriptedPolicy
from tests.verifiers_bridge.policies import assistant_runs
from tests.verifiers_bridge.tool_template import tool_tokenizer
from tests.verifiers_v1_bridge.policies import CalcPolicy, calc_reward, mismatches
from tests.verifiers_v1_bridge.test_v1_bridge import (  # noqa: F401 - fixtures
    BRIDGE,
    ROOT,
    groups_of,
    tiny,
    tok,
    v1_venv,
)

pytestmark = pytest.mark.slow  # each runs the bridge's CLI with a real v1 harness program and MCP server


@pytest.fixture(scope="module")
def tool_tok_dir(tiny, tmp_path_factory):  # noqa: F811
    return tool_tokenizer(tiny, tmp_path_factory.mktemp("tool-tokenizer"))


BORROW = Path(__file__).resolve().parent / "borrow_vllm"


def bridge(v1_venv, mode: str, tokenizer, base_url: str, *flags: str, borrow: bool = True):  # noqa: F811
    """The bridge's CLI on vfv1_tools in the 0.4.0 venv, with vLLM's tool parsers borrowed from this
    test run's venv (`borrow_vllm/sitecustomize.py`) when `borrow`."""
    venv, env = v1_venv
    env = env if not borrow else dict(env, PYTHONPATH=os.pathsep.join([str(BORROW), env["PYTHONPATH"]]),
               RLVR_BORROW_SITE=sysconfig.get_paths()["purelib"])  # fmt: skip
    cmd = [str(venv / "bin" / "python"), str(BRIDGE), mode, "--env.vf_env_name", "vfv1_tools",
           "--env.tokenizer_name", str(tokenizer), "--openai.model_name", "scripted",
           "--openai.base_url", base_url, "--env.max_tokens", "200", *flags]  # fmt: skip
    return subprocess.run(cmd, capture_output=True, text=True, timeout=300, cwd=ROOT, env=env)


def masked_out_text(tok, tokens: list[int], masks: list[int]) -> str:  # noqa: F811
    return tok.decode([t for t, m in zip(tokens, masks, strict=True) if m == -100])


def test_tool_calls_reach_the_mcp_tools_and_results_the_next_turn(v1_venv, tool_tok_dir, tok, tmp_path):  # noqa: F811
    out = tmp_path / "groups.jsonl"
    with ScriptedPolicy(tok, CalcPolicy(), latency_s=(0.0, 0.04), seed=5) as policy:
        done = bridge(v1_venv, "process", tool_tok_dir, policy.base_url, "--env.group_size", "4",
                      "--env.total_steps", "1", "--env.max_token_length", "2048",
                      "--env.data_path_to_save_groups", str(out))  # fmt: skip
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-4000:]
    groups = groups_of(out)
    assert len(groups) == 1 and all(g["tokens_exact"] for g in groups)
    for g in groups:
        assert mismatches(tok, g, calc_reward) == []  # every score is its own rollout's final answer
        assert mismatches(tok, dict(g, scores=g["scores"][1:] + g["scores"][:1]), calc_reward) != []
        prompt = masked_out_text(tok, g["tokens"][0], g["masks"][0])
        assert (
            '"name": "calc_tools_add"' in prompt and '"name": "calc_tools_multiply"' in prompt
        )  # v1 qualifies
        kinds = set()
        for tokens, masks, msgs, score in zip(
            g["tokens"], g["masks"], g["messages"], g["scores"], strict=True
        ):
            calls = [c for m in msgs if m["role"] == "assistant" for c in m.get("tool_calls") or []]
            results = [m for m in msgs if m["role"] == "tool"]
            assert [r["tool_call_id"] for r in results] == [c["id"] for c in calls] and all(calls)
            env_text = masked_out_text(tok, tokens, masks)
            for r in results:  # v1's MCP results, rendered masked out before the next sampled turn
                assert f"<tool_response>\n{r['content']}\n</tool_response>" in env_text
            assert len(assistant_runs(tokens, masks)) == len(calls) + 1  # one call per turn, then the answer
            numbers = [r["content"] for r in results if r["content"].isdigit()]
            malformed = any(r["content"].startswith("error: invalid JSON") for r in results)
            if calls:
                question = next(m["content"] for m in msgs if m["role"] == "user")
                a, b, c = map(int, re.findall(r"\d+", question)[:3])
                assert numbers == [str(a + b), str((a + b) * c)]  # the tools ran on the model's arguments
            kinds.add(("malformed" if malformed else "calls" if calls else "none", score))
        assert kinds == {("calls", 1.0), ("calls", 0.0), ("malformed", 1.0), ("none", 1.0)}
    summary = json.loads(out.with_suffix(".summary.json").read_text())
    assert summary["reward_status"] == {"ok": 4}


@pytest.mark.parametrize(
    ("borrow", "needle"),
    [
        (True, "but the chat template ignores tools="),  # the tiny model's own template has no tools
        (
            False,
            "but tool calls are parsed with vLLM's tool parsers, which do not import here",
        ),  # the v1 venv
    ],
)
def test_where_tools_cannot_work_the_bridge_stops_in_one_line(v1_venv, tiny, borrow, needle):  # noqa: F811
    done = bridge(v1_venv, "process", tiny, "http://127.0.0.1:9/v1", "--env.total_steps", "1", borrow=borrow)
    last = done.stderr.strip().splitlines()[-1]
    assert done.returncode == 1, done.stderr[-3000:]
    assert "vfv1_tools gives its rollouts v1 tools ['add', 'multiply'], " + needle in last
