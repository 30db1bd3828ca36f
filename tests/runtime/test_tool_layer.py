"""The tool layer (`environments/tools/`) on a scripted policy:
exact tokens and masks of tool episodes, hermes calls, parallel and malformed calls, budgets
(calls, time, output), per-episode state, infrastructure failures, MCP tools over stdio.

The tiny test model's own template ignores `tools=` (the layer refuses it, tested below); the
episodes use the tiny tokenizer saved with the Hermes tool template of the bridge tests (same
vocabulary), the layout Qwen2.5 / Hermes models use."""

from __future__ import annotations

import asyncio
import json
import re
import sys
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any, Literal

import pytest
from atroposlib.envs.server_handling.server_baseline import APIServerConfig
from pydantic import Field
from transformers import AutoTokenizer

from environments.atropos_runtime.base import RubricEnv
from environments.task import Item, Split
from environments.tools.core import Tool, ToolCall, ToolInfraError, check_arguments, function_tool
from environments.tools.task import ToolConfig, ToolTask
from rubrics.core import ExactMatchRubric, Rubric
from tests.runtime.scripted_policy import ScriptedPolicy
from tests.verifiers_bridge.tool_template import tool_tokenizer

MCP_SERVER = Path(__file__).with_name("fixtures") / "mcp_echo_server.py"


def call(name: str, **arguments: Any) -> str:
    """A call written exactly as the Hermes template renders one."""
    return f'<tool_call>\n{{"name": "{name}", "arguments": {json.dumps(arguments)}}}\n</tool_call>'


# scenario name -> the assistant's turns (the first turn names the scenario before its calls)
SCRIPTS: dict[str, list[str]] = {
    "two_calls": [call("add", a=2, b=3), call("note", text="five"), "5"],
    "parallel": [call("add", a=2, b=3) + "\n" + call("add", a=3, b=4), "5"],
    "malformed": [
        '<tool_call>\n{"name": "add", "arguments": {"a": 2, "b": 3}\n</tool_call>',  # bad JSON
        call("subtract", a=1, b=1) + "\n" + call("add", a="x", b=1) + "\n" + call("add", a=1),
        call("boom"),
        "5",
    ],
    "hang": [call("hang"), "5"],
    "spew": [call("spew", megabytes=10), "5"],
    "budget": [call("add", a=1, b=1) + "\n" + call("add", a=1, b=2) + "\n" + call("add", a=1, b=3), "5"],
    "infra": [call("broken"), "5"],
    "no_final": [call("add", a=2, b=3), call("add", a=2, b=3), call("add", a=2, b=3), call("add", a=2, b=3)],
    "mcp": [call("add", a=2, b=3), call("sleep", seconds=30), call("fail"), "5"],
    "mcp_crash": [call("add", a=2, b=3), call("crash"), "5"],
}


def scripted(groups: Mapping[int, str]) -> Any:
    """The policy: sample `i` of a group plays `groups[i]`; later turns follow the scenario the
    context's first turn names (a marker in the first call's text)."""

    def answer(prompt: str, i: int) -> str:
        turns = prompt.split("<|im_start|>assistant\n")[1:-1]  # earlier assistant turns
        if not turns:
            return f"scenario {groups[i]}\n" + SCRIPTS[groups[i]][0]
        name = re.match(r"scenario (\w+)", turns[0]).group(1)
        return SCRIPTS[name][len(turns)]

    return answer


class CalcConfig(ToolConfig):
    max_turns: int = Field(default=4)
    max_episode_tokens: int | None = Field(default=None)


class CalcTask(ToolTask):
    """Every item's answer is 5; the tools are test doubles."""

    config: CalcConfig

    def rows(self, split: Split) -> Iterable[Mapping[str, Any]]:
        return [{"id": f"{split}-{i}"} for i in range(2)]

    def item(self, row: Mapping[str, Any], index: int) -> Item:
        prompt = [
            {"role": "system", "content": "Use the tools."},
            {"role": "user", "content": "What is 2+3?"},
        ]
        return Item(uid=row["id"], prompt=prompt, answer="5")

    def rubric(self) -> Rubric:
        return ExactMatchRubric()

    def own_tools(self) -> list[Tool]:  # none beside MCP servers' (whose `add` is the one called)
        return (
            []
            if self.config.mcp_servers
            else [function_tool(f) for f in (add, note, hang, spew, boom, broken)]
        )


def add(a: int, b: int) -> int:
    """Add two integers.

    Args:
        a: The first one.
        b: The second one.
    """
    return a + b


def note(text: str, *, call: ToolCall) -> str:
    """Remember a note for this conversation; returns every note so far."""
    notes = call.state.setdefault("notes", [])
    notes.append(text)
    return ", ".join(notes)


async def hang() -> str:
    """Never returns."""
    await asyncio.Event().wait()
    return ""


def spew(megabytes: int) -> str:
    """Print a lot."""
    return "x" * (megabytes << 20)


def boom() -> str:
    """Raise."""
    raise ValueError("boom on purpose")


def broken() -> str:
    """Its backend is down."""
    raise ToolInfraError("the backend is down")


class CalcEnv(RubricEnv):
    name = "calc_tools"
    env_config_cls = CalcConfig
    task_cls = CalcTask


@pytest.fixture(scope="module")
def tool_tok(tiny_model: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tool_tokenizer(tiny_model, tmp_path_factory.mktemp("tool-tokenizer"))


def make_env(tokenizer: Path, policy: ScriptedPolicy, group_size: int, **kwargs: Any) -> CalcEnv:
    kwargs.setdefault("request_timeout_s", 60.0)  # a held request never waits the default 300 s
    config = CalcConfig(tokenizer_name=str(tokenizer), wandb_name="calc", use_wandb=False, group_size=group_size,
                        max_token_length=4096, ensure_scores_are_not_same=False, **kwargs)  # fmt: skip
    api = APIServerConfig(server_type="vllm", model_name="scripted", base_url=policy.base_url, api_key="x",
                          tokenizer_name=str(tokenizer), timeout=60, health_check=False)  # fmt: skip
    return CalcEnv(config, [api])


async def run_group(tok_path: Path, scenarios: list[str], **kwargs: Any) -> tuple[CalcEnv, Any]:
    tok = AutoTokenizer.from_pretrained(tok_path)
    with ScriptedPolicy(tok, scripted(dict(enumerate(scenarios)))) as policy:
        env = make_env(tok_path, policy, len(scenarios), **kwargs)
        await env.setup()
        try:
            outcome = await env.group_for(env.train_items[0], training=False)
        finally:
            await env.aclose()
    return env, outcome


def tool_messages(episode: Mapping[str, Any]) -> list[dict[str, Any]]:
    return [m for t in episode["turns"] for m in t["env_messages"]]


async def test_a_tool_episode_is_exactly_the_tokens_of_its_conversation(tool_tok):
    """prompt + sampled + tool-turn ids == the tokenised final conversation; the sampled ids are
    masked in (with their logprobs), the tool output and template text masked out."""
    env, outcome = await run_group(tool_tok, ["two_calls", "parallel"])
    group = outcome.group
    tok = AutoTokenizer.from_pretrained(tool_tok)
    tools = env.task.tools(None)
    assert [t["function"]["name"] for t in tools] == ["add", "note", "hang", "spew", "boom", "broken"]
    assert tools[0]["function"]["parameters"]["properties"]["a"] == {"type": "integer", "description": "The first one."}  # fmt: skip
    for tokens, masks, messages, episode in zip(group["tokens"], group["masks"], group["messages"], group["episodes"], strict=True):  # fmt: skip
        rendered = tok.apply_chat_template(messages, tools=tools, tokenize=False)
        assert tok.decode(tokens) + "\n" == rendered  # the final "\n" follows the last <|im_end|>
        assert tokens == tok.encode(rendered, add_special_tokens=False)[:-1]
        prompt_len = len(tokens) - sum(
            len(t["tokens"]) + len(t["env_tokens"] or []) for t in episode["turns"]
        )
        expected = [-100] * prompt_len
        for turn in episode["turns"]:
            expected += turn["tokens"] + [-100] * len(turn["env_tokens"] or [])
        assert masks == expected
        assert "<tool_response>" in tok.decode([t for t, m in zip(tokens, masks, strict=True) if m == -100])
        assert "<tool_response>" not in tok.decode(
            [t for t, m in zip(tokens, masks, strict=True) if m != -100]
        )
    two, parallel = group["episodes"]
    assert [m["content"] for m in tool_messages(two)] == ["5", "five"]
    assert two["stop_reason"] == "answered" and len(two["turns"]) == 3
    assert [t["info"].get("tool_calls") for t in two["turns"]] == [1, 1, None]
    # a parallel call: two tool messages, answering each call by its id, in one environment turn
    (first, _) = parallel["turns"]
    ids = [c["id"] for c in group["messages"][1][2]["tool_calls"]]
    assert [(m["tool_call_id"], m["content"]) for m in first["env_messages"]] == list(zip(ids, ["5", "7"], strict=True))  # fmt: skip
    assert tok.decode(first["env_tokens"]).count("<tool_response>") == 2
    assert group["scores"] == [1.0, 1.0]
    assert [r["components"]["tool_calls"] for r in group["rewards"]] == [2, 2]


async def test_malformed_calls_are_answered_and_counted(tool_tok):
    env, outcome = await run_group(tool_tok, ["malformed"])
    (episode,), (reward,) = outcome.group["episodes"], outcome.group["rewards"]
    replies = [[m["content"] for m in t["env_messages"]] for t in episode["turns"]]
    assert "arguments are not valid JSON" in replies[0][0]
    assert "unknown tool 'subtract'" in replies[1][0] and "add, note" in replies[1][0]
    assert "argument 'a' must be of type integer" in replies[1][1]
    assert "missing required argument(s): b" in replies[1][2]
    assert replies[2] == ["error: ValueError: boom on purpose"]
    assert [t["info"].get("tool_malformed") for t in episode["turns"]] == [1, 3, 0, None]
    assert reward["components"]["tool_malformed"] == 4 and reward["components"]["tool_errors"] == 1
    assert reward["score"] == 1.0 and episode["stop_reason"] == "answered"


async def test_a_hanging_call_is_stopped_and_the_episode_goes_on(tool_tok):
    env, outcome = await run_group(tool_tok, ["hang"], tool_call_timeout_s=0.3)
    (episode,) = outcome.group["episodes"]
    (reply,) = episode["turns"][0]["env_messages"]
    assert "over its time limit of 0.3 s" in reply["content"]
    assert episode["turns"][0]["info"]["tool_timeouts"] == 1
    assert episode["turns"][0]["info"]["tool_seconds"] < 3.0  # the layer stopped it at its limit
    assert 0.3 <= reply["seconds"] < 3.0  # the call's own time, on its message (the viewer shows it)
    assert outcome.group["scores"] == [1.0] and len(episode["turns"]) == 2


async def test_ten_megabytes_of_output_are_cut_and_say_so(tool_tok):
    env, outcome = await run_group(tool_tok, ["spew"], tool_call_output_bytes=1000)
    (episode,) = outcome.group["episodes"]
    (reply,) = episode["turns"][0]["env_messages"]
    assert reply["content"].startswith("x" * 1000)
    assert reply["content"].endswith(f"[tool output truncated: {10 << 20} bytes, the first 1000 shown]")
    assert len(reply["content"]) < 1100 and episode["turns"][0]["info"]["tool_truncated"] == 1
    assert len(episode["turns"][0]["env_tokens"]) < 1200  # at most ~1 token per byte shown


async def test_calls_past_the_budget_are_not_run_and_the_episode_that_never_answers_scores_zero(tool_tok):
    env, outcome = await run_group(tool_tok, ["budget", "no_final"], max_tool_calls=2)
    budget, no_final = outcome.group["episodes"]
    replies = [m["content"] for m in budget["turns"][0]["env_messages"]]
    assert replies[:2] == ["2", "3"]
    assert replies[2].startswith("error: not run: this episode's budget of 2 tool calls is used up")
    assert budget["turns"][0]["info"]["tool_refused"] == 1
    # the last turn still called a tool: no final answer, so 0 (a call's text is never graded)
    assert no_final["stop_reason"] == "max_turns" and outcome.group["scores"] == [1.0, 0.0]


async def test_per_episode_state_is_the_episodes_own(tool_tok):
    env, outcome = await run_group(tool_tok, ["two_calls", "two_calls", "two_calls"])
    for episode in outcome.group["episodes"]:
        assert episode["turns"][1]["env_messages"][0]["content"] == "five"  # not "five, five, ..."
    assert env.task.stats["episodes"] == 3 and env.task.stats["tool_calls"] == 6


async def test_a_tool_whose_backend_fails_makes_the_episode_unverified(tool_tok):
    env, outcome = await run_group(tool_tok, ["infra", "two_calls"])
    assert outcome.group is not None and len(outcome.group["scores"]) == 1  # the verified one is kept
    assert env.statuses["error"] == 1 and env._episode_runner.stops["env_error"] == 1
    assert outcome.rejected["reason"] == "unverified"
    assert outcome.rejected["detail"] == "tool 'broken' could not run: the backend is down"


async def test_mcp_server_tools_are_offered_and_called_with_time_limits(tool_tok):
    server = f"{sys.executable} {MCP_SERVER}"
    tok = AutoTokenizer.from_pretrained(tool_tok)
    with ScriptedPolicy(tok, scripted({0: "mcp", 1: "mcp_crash"})) as policy:
        policy.hold(  # the crash comes after the other episode's last call
            held=lambda text: "scenario mcp_crash" in text and text.count("<tool_response>") == 1,
            until=lambda text: "scenario mcp\n" in text and text.count("<tool_response>") == 3,
        )
        env = make_env(tool_tok, policy, 2, mcp_servers=[server], tool_call_timeout_s=3.0)
        await env.setup()
        try:
            names = [t["function"]["name"] for t in env.task.tools(None)]
            servers = list(env.task._mcp)
            outcome = await env.group_for(env.train_items[0], training=False)
        finally:
            await env.aclose()
    assert names == ["add", "sleep", "fail", "crash"]
    # the server died in the other episode: that one is unverified, not wrong
    assert outcome.rejected["detail"].startswith("tool 'crash' could not run: MCP server")
    (episode,) = outcome.group["episodes"]
    replies = [t["env_messages"][0]["content"] for t in episode["turns"][:3]]
    assert replies[0] == "5"
    assert "over its time limit of 3 s" in replies[1]
    assert "Error executing tool fail" in replies[2]
    assert [t["info"].get("tool_errors") for t in episode["turns"]] == [0, 1, 1, None]
    assert outcome.group["scores"] == [1.0]
    assert env.task._mcp == [] and all(s._task.done() for s in servers)  # stopped by aclose


async def test_an_mcp_server_that_cannot_start_is_one_clear_error():
    from environments.tools.mcp_servers import start_servers

    command = f"{sys.executable} -c \"import sys; sys.stderr.write('no such thing\\n'); sys.exit(3)\""
    with pytest.raises(RuntimeError, match=r"MCP server .* failed to start: .*stderr: no such thing"):
        await start_servers([command], timeout_s=30)


def test_schemas_from_signatures_and_argument_checks():
    def f(x: str, n: int = 3, mode: Literal["a", "b"] = "a", xs: list[float] | None = None) -> str:
        """Do f.

        Args:
            x: The text,
                on two lines.
            n: How many.
        """
        return x

    tool = function_tool(f)
    params = tool.schema()["function"]["parameters"]
    assert tool.description == "Do f."
    assert params["required"] == ["x"]
    assert params["properties"] == {
        "x": {"type": "string", "description": "The text, on two lines."},
        "n": {"type": "integer", "description": "How many."},
        "mode": {"enum": ["a", "b"]},
        "xs": {"type": "array", "items": {"type": "number"}},
    }
    assert check_arguments('{"x": "hi", "n": 2}', params) == ({"x": "hi", "n": 2}, "")
    assert (
        check_arguments('{"x": "hi", "n": true}', params)[1]
        == "argument 'n' must be of type integer, got bool"
    )
    assert "unknown argument(s): y" in check_arguments({"x": "a", "y": 1}, params)[1]
    assert "must be a JSON object" in check_arguments("[1]", params)[1]


async def test_a_template_without_tool_support_is_refused(tiny_model):
    from environments.vf_bridge.tool_calls import ToolSupportError

    task = CalcTask(CalcConfig())
    with pytest.raises(ToolSupportError, match="ignores tools="):
        await task.start(AutoTokenizer.from_pretrained(tiny_model))
    with pytest.raises(SystemExit, match="token server"):
        await task.start(None)
