"""The v1 endpoint with tools (in process, real OpenAI client, real vLLM hermes parser, the Hermes
tool template over the tiny tokenizer, scripted token policy): calls come back as OpenAI tool_calls
with ids and finish_reason tool_calls (also streamed); the next request must repeat that assistant
turn exactly, its tool results are rendered after the exact ids (masked out); a forged call, a
result for a call never made, other tools or tools without a parser fail the session; a malformed
call is returned as the classic path returns it."""

from __future__ import annotations

import json

import openai
import pytest
from transformers import AutoTokenizer

from environments.atropos_runtime.turn_tokens import assemble, segment_violations
from environments.vf_bridge.tool_calls import ToolCallParser
from tests.runtime.scripted_policy import ScriptedPolicy
from tests.verifiers_bridge.policies import call
from tests.verifiers_bridge.tool_template import tool_tokenizer
from tests.verifiers_v1_bridge.test_endpoint import Rig, close_rigs, tok  # noqa: F401 - fixtures

ADD = {"type": "function", "function": {"name": "add", "description": "Add two integers.",
       "parameters": {"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}}}}}  # fmt: skip
USER = {"role": "user", "content": "Compute 2 + 3 with the tools."}


@pytest.fixture(scope="module")
def tool_tok(tok, tmp_path_factory):  # noqa: F811
    return AutoTokenizer.from_pretrained(
        tool_tokenizer(tok.name_or_path, tmp_path_factory.mktemp("tool-tok"))
    )


def reply(text: str, index: int) -> str:
    if "BROKEN" in text:
        return 'Oops.\n<tool_call>\n{"name": "add", "arguments": {"a": 2, "b": }}\n</tool_call>'
    return "<answer>5</answer>" if "<tool_response>" in text else "Adding.\n" + call("add", a=2, b=3)


class ToolRig(Rig):
    def __init__(self, tokenizer, policy: ScriptedPolicy, parser: bool = True) -> None:
        super().__init__(tokenizer, policy, budget=2000)
        self.store.tool_parser = ToolCallParser("hermes", tokenizer) if parser else None

    async def create(self, session: str, messages: list[dict], **kw):
        async with self.client(session) as client:
            return await client.chat.completions.create(model="rlvr-policy", messages=messages, **kw)


async def test_a_tool_call_round_trip_renders_only_the_results_after_the_exact_ids(tool_tok):
    with ScriptedPolicy(tool_tok, reply) as policy:
        rig = ToolRig(tool_tok, policy)
        async with rig.endpoint:
            first = (await rig.create("s", [USER], tools=[ADD])).choices[0]
            calls = [c.model_dump() for c in first.message.tool_calls]
            assistant = first.message.model_dump(exclude_none=True)  # as v1's chat loop appends it
            result = {"role": "tool", "tool_call_id": calls[0]["id"], "content": "5", "name": "add"}
            second = (await rig.create("s", [USER, assistant, result], tools=[ADD])).choices[0]
            streamed = await rig.create("t", [USER], tools=[ADD], stream=True)
            chunks = [c async for c in streamed]
        s, t = rig.store.pop("s"), rig.store.pop("t")
    assert first.finish_reason == "tool_calls" and first.message.content == "Adding.\n"
    assert calls[0]["id"] and calls[0]["function"] == {
        "name": "add",
        "arguments": json.dumps({"a": 2, "b": 3}),
    }
    assert second.message.content == "<answer>5</answer>" and second.finish_reason == "stop"
    assert s.failure is None and [g.kind for g in s.segments] == ["prompt", "assistant", "env", "assistant"]
    assert '"name": "add"' in s.segments[0].text  # the tools reached the prompt through tools=
    assert s.segments[2].text.startswith("\n<|im_start|>user\n<tool_response>\n5\n</tool_response><|im_end|>")
    assert policy.requests[1]["prompt"] == [i for g in s.segments[:3] for i in g.ids]  # exact ids, extended
    tokens, masks, _ = assemble(s.segments)
    assert segment_violations(rig.chat, s.segments, tokens, masks) == []
    assert "<tool_response>" not in tool_tok.decode(
        [i for i, m in zip(tokens, masks, strict=True) if m != -100]
    )
    deltas = [d for c in chunks if c.choices for d in c.choices[0].delta.tool_calls or []]
    finish = [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason]
    assert [d.function.name for d in deltas] == ["add"] and deltas[0].id and finish == ["tool_calls"]
    assert t.messages[-1]["tool_calls"][0]["id"] == deltas[0].id


def forge(assistant: dict) -> dict:
    call = assistant["tool_calls"][0]
    return {
        **assistant,
        "tool_calls": [{**call, "function": {**call["function"], "arguments": '{"a": 9, "b": 3}'}}],
    }


@pytest.mark.parametrize(
    ("edit", "needle"),
    [
        (lambda a, r: ([USER, forge(a), r], {"tools": [ADD]}), "history differs"),  # forged arguments
        (
            lambda a, r: ([USER, {"role": "assistant", "content": a["content"]}, r], {"tools": [ADD]}),
            "differs",
        ),
        (lambda a, r: ([USER, a, r], {}), "other tools"),  # the tools dropped on a later turn
        (lambda a, r: ([USER, a, {**r, "tool_call_id": "call_forged"}], {"tools": [ADD]}), "never made"),
    ],
)
async def test_a_history_or_tools_that_differ_from_the_record_fail_the_session(tool_tok, edit, needle):
    with ScriptedPolicy(tool_tok, reply) as policy:
        rig = ToolRig(tool_tok, policy)
        async with rig.endpoint:
            first = (await rig.create("s", [USER], tools=[ADD])).choices[0]
            assistant = first.message.model_dump(exclude_none=True)
            result = {"role": "tool", "tool_call_id": assistant["tool_calls"][0]["id"], "content": "5"}
            messages, kw = edit(assistant, result)
            with pytest.raises(openai.APIStatusError, match=needle):
                await rig.create("s", messages, **kw)
    assert rig.store.pop("s").failure is not None


async def test_a_malformed_call_comes_back_as_the_classic_path_returns_it(tool_tok):
    with ScriptedPolicy(tool_tok, reply) as policy:
        rig = ToolRig(tool_tok, policy)
        async with rig.endpoint:
            out = (await rig.create("s", [{"role": "user", "content": "BROKEN"}], tools=[ADD])).choices[0]
    (bad,) = out.message.tool_calls
    assert out.finish_reason == "tool_calls" and out.message.content == "Oops.\n"
    assert (
        bad.function.name == "add"
        and bad.function.arguments == '{"name": "add", "arguments": {"a": 2, "b": }}'
    )
    with pytest.raises(ValueError):
        json.loads(bad.function.arguments)  # the harness answers it with its own JSON error


async def test_tools_without_a_parser_are_refused(tool_tok):
    with ScriptedPolicy(tool_tok, reply) as policy:
        rig = ToolRig(tool_tok, policy, parser=False)
        async with rig.endpoint:
            with pytest.raises(openai.BadRequestError, match="does not parse tool calls"):
                await rig.create("s", [USER], tools=[ADD])
    assert rig.store.pop("s").failure is not None
