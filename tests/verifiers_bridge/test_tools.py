"""Classic tool environments through the bridge: the tools rendered into the prompt by the chat
template, the sampled text parsed by vLLM's hermes parser, the env's own ToolEnv running the tools,
tool results rendered after the exact sampled ids (masked out), rewards by identity; a malformed
call answered by the env's own error message; loud refusals where tools cannot work."""

from __future__ import annotations

import json
import re

import pytest

from environments.atropos_runtime.modes import run_evaluate
from environments.verifiers_env import VerifiersBridgeError
from tests.runtime.scripted_policy import ScriptedPolicy
from tests.verifiers_bridge.policies import assistant_runs, calc_policy, replies
from tests.verifiers_bridge.test_bridge import make_env, release_envs, tiny, tok  # noqa: F401 - fixtures
from tests.verifiers_bridge.tool_template import tool_tokenizer


@pytest.fixture(scope="module")
def tool_tok_dir(tiny, tmp_path_factory):  # noqa: F811
    return tool_tokenizer(tiny, tmp_path_factory.mktemp("tool-tokenizer"))


def masked_out_text(tok, tokens: list[int], masks: list[int]) -> str:  # noqa: F811
    return tok.decode([t for t, m in zip(tokens, masks, strict=True) if m == -100])


async def test_tool_calls_run_through_the_env_and_results_reach_the_next_turn(tool_tok_dir, tok):  # noqa: F811
    with ScriptedPolicy(tok, calc_policy, latency_s=(0.0, 0.04), seed=7) as policy:
        env = make_env(tool_tok_dir, policy, "vf_tools", max_token_length=2048)
        await env.setup()
        assert env.task.tool_parser is not None and env.task.tool_parser.name == "hermes"
        for item in env.train_items:
            group = (await env.group_for(item, training=True)).group
            assert group is not None
            got = replies(tok, group)
            # the tools reached the prompt through the template (shared prompt: first run masked out)
            prompt_text = masked_out_text(tok, group["tokens"][0], group["masks"][0])
            assert '"name": "add"' in prompt_text and '"name": "multiply"' in prompt_text
            kinds = set()
            for turns, score, msgs, reward, tokens, masks in zip(got, group["scores"], group["messages"], group["rewards"],
                                                                 group["tokens"], group["masks"], strict=True):  # fmt: skip
                # reward by identity: this rollout's own final answer, decoded from its own tokens
                final = re.fullmatch(r"<answer>(\d+)</answer>", turns[-1].strip())
                assert score == float(bool(final) and final.group(1) == item.answer)
                # the env parsed every <tool_call> its own ToolEnv counts (metrics from its message format)
                sampled_calls = sum(t.count("<tool_call>") for t in turns)
                assert reward["components"]["total_tool_calls"] == sampled_calls
                tool_msgs = [m for m in msgs if m["role"] == "tool"]
                assert len(tool_msgs) == sampled_calls and all(m["tool_call_id"] for m in tool_msgs)
                env_text = masked_out_text(tok, tokens, masks)
                for m in tool_msgs:  # every tool result is in the masked-out context the next turn saw
                    assert f"<tool_response>\n{m['content']}\n</tool_response>" in env_text
                # assistant turns masked in: the runs decode to exactly what was sampled, nothing else
                assert len(assistant_runs(tokens, masks)) == len(turns)
                assert not any("<tool_response>" in t for t in turns)
                numbers = [m["content"] for m in tool_msgs if m["content"].isdigit()]
                if not turns[0].startswith("<answer>"):
                    question = next(m["content"] for m in msgs if m["role"] == "user")
                    a, b, c = map(int, re.findall(r"\d+", question)[:3])
                    # the tools ran, on the model's arguments
                    assert numbers == [str(a + b), str((a + b) * c)]
                malformed = any(m["content"].startswith("Expecting") for m in tool_msgs)
                kinds.add(("malformed" if malformed else "ok", score))
            assert ("malformed", 1.0) in kinds and ("ok", 0.0) in kinds and ("ok", 1.0) in kinds
            assert len(set(group["scores"])) == 2
    assert env.drops == {} and env.statuses == {"ok": 4 * len(env.train_items)}


async def test_a_stateful_tool_env_injects_each_episodes_own_state(tool_tok_dir, tok):  # noqa: F811
    with ScriptedPolicy(tok, calc_policy, latency_s=(0.0, 0.04), seed=8) as policy:
        env = make_env(tool_tok_dir, policy, "vf_tools", {"stateful": True}, max_token_length=2048)
        await env.setup()
        # the hidden argument is not offered to the model
        assert '"ledger"' not in str(env.task.parse_tools) and "add" in str(env.task.parse_tools)
        for item in env.train_items:
            group = (await env.group_for(item, training=True)).group
            assert group is not None
            assert [r["components"]["ledger_matches"] for r in group["rewards"]] == [1.0] * 4
            assert sorted(group["scores"]) == [0.0, 1.0, 1.0, 1.0]


async def test_a_malformed_tool_call_gets_the_envs_error_back_never_a_crash(tool_tok_dir, tok):  # noqa: F811
    with ScriptedPolicy(tok, lambda text, i: calc_policy(text, 2)) as policy:
        env = make_env(tool_tok_dir, policy, "vf_tools", max_token_length=2048)
        await env.setup()
        item = env.train_items[0]
        group = (await env.group_for(item, training=True)).group
    assert group is not None and group["scores"] == [1.0] * 4
    for msgs, ep in zip(group["messages"], group["episodes"], strict=True):
        first_call, first_result = msgs[len(item.prompt)], msgs[len(item.prompt) + 1]
        assert first_call["content"] == "Adding first.\n"  # the text before the call stays the content
        assert first_call["tool_calls"][0]["function"]["name"] == "add"  # the raw call, name recovered
        assert (
            first_result["role"] == "tool"
            and first_result["tool_call_id"] == first_call["tool_calls"][0]["id"]
        )
        assert first_result["content"].startswith("Expecting value")  # ToolEnv's own json error, to the model
        assert len(ep["turns"]) == 4 and ep["stop_reason"] == "vf:no_tools_called"


async def test_a_stop_error_on_a_malformed_call_ends_the_episode_scored(tool_tok_dir, tok):  # noqa: F811
    """With `stop_errors=[JSONDecodeError]` the env stops on the model's bad call (vf.ToolParseError):
    the episode ends there and is scored (0: no answer), never unverified, never a crash."""
    with ScriptedPolicy(tok, calc_policy) as policy:
        env = make_env(tool_tok_dir, policy, "vf_tools", {"stop_on_bad_json": True}, max_token_length=2048)
        await env.setup()
        group = (await env.group_for(env.train_items[0], training=True)).group
    assert group is not None
    bad = [k for k, msgs in enumerate(group["messages"]) if "Adding first." in str(msgs)]
    assert len(bad) == 1
    assert group["episodes"][bad[0]]["stop_reason"] == "vf:tool_parse_error"
    assert len(group["episodes"][bad[0]]["turns"]) == 1 and group["scores"][bad[0]] == 0.0
    assert sorted(group["scores"]) == [0.0, 0.0, 1.0, 1.0] and env.statuses == {"ok": 4}


async def test_evaluate_writes_the_tool_conversations(tool_tok_dir, tok, tmp_path):  # noqa: F811
    with ScriptedPolicy(tok, calc_policy) as policy:
        env = make_env(
            tool_tok_dir, policy, "vf_tools", max_token_length=2048, data_dir_to_save_evals=str(tmp_path)
        )
        await env.setup()
        metrics = await run_evaluate(env)
    samples = [json.loads(line) for line in (tmp_path / "samples.jsonl").read_text().splitlines()]
    assert len(samples) == 3 and metrics["eval/accuracy"] == 1.0  # choice 0 on every eval item
    roles = ["assistant", "tool", "assistant", "tool", "assistant"]
    assert [[m["role"] for m in s["messages"][1:]] for s in samples] == [roles] * 3


def test_a_template_without_tool_support_is_refused(tiny, tok):  # noqa: F811
    with ScriptedPolicy(tok, calc_policy) as policy, pytest.raises(VerifiersBridgeError) as err:
        make_env(tiny, policy, "vf_tools")
    assert "tool environment (tools ['add', 'multiply'])" in str(err.value)
    assert "ignores tools=" in str(err.value)


@pytest.mark.parametrize(
    ("parser", "reason"),
    [
        ("pythonic", "which the 'pythonic' tool parser reads as no call"),
        ("llama3_json", "the 'llama3_json' tool parser does not fit this tokenizer"),
        ("nope", "unknown tool parser 'nope'"),
    ],
)
def test_a_parser_that_cannot_read_the_templates_calls_is_refused(tool_tok_dir, tok, parser, reason):  # noqa: F811
    with (
        ScriptedPolicy(tok, calc_policy) as policy,
        pytest.raises(VerifiersBridgeError, match=re.escape(reason)),
    ):
        make_env(tool_tok_dir, policy, "vf_tools", tool_parser=parser)


def test_a_tool_env_on_a_text_only_server_is_refused(tool_tok_dir, tok):  # noqa: F811
    from atroposlib.envs.server_handling.server_baseline import APIServerConfig

    from environments.verifiers_env import VerifiersEnv, VerifiersEnvConfig

    config = VerifiersEnvConfig(tokenizer_name=str(tool_tok_dir), use_wandb=False,
                                vf_env_name="tests.verifiers_bridge.fixtures.vf_tools")  # fmt: skip
    server = APIServerConfig(
        server_type="openai", model_name="x", base_url="http://127.0.0.1:9/v1", api_key="x"
    )
    with pytest.raises(VerifiersBridgeError, match="need a token server"):
        VerifiersEnv(config, [server])


def test_parallel_calls_parse_and_their_results_render_as_one_turn(tool_tok_dir):
    """Two calls in one turn: two OpenAI tool calls (JSON-string arguments, rendered to the template
    as the objects they encode), and their two results in one masked-out user turn."""
    from transformers import AutoTokenizer

    from environments.atropos_runtime.turn_tokens import ChatTokens
    from environments.vf_bridge.tool_calls import ToolCallParser
    from tests.verifiers_bridge.policies import call

    tool_tok = AutoTokenizer.from_pretrained(tool_tok_dir)
    chat, parser = ChatTokens(tool_tok), ToolCallParser("hermes", tool_tok)
    tools = [{"type": "function", "function": {"name": n, "parameters": {}}} for n in ("add", "multiply")]
    text = "Both.\n" + call("add", a=1, b=2) + "\n" + call("multiply", a=3, b=4)
    parsed = parser.parse(text, tools)
    assert not parsed.malformed and parsed.content == "Both.\n"
    assert [(c["function"]["name"], json.loads(c["function"]["arguments"])) for c in parsed.tool_calls] == [
        ("add", {"a": 1, "b": 2}),
        ("multiply", {"a": 3, "b": 4}),
    ]
    message = parsed.message()
    rendered = chat.render([{"role": "user", "content": "q"}, message], False, tools)
    assert '{"name": "add", "arguments": {"a": 1, "b": 2}}' in rendered  # an object, not a quoted string
    sampled = chat.assistant(
        list(chat.encode(text)) + [tool_tok.convert_tokens_to_ids("<|im_end|>")],
        [0.0] * (len(chat.encode(text)) + 1),
    )
    results = [
        {"role": "tool", "content": str(v), "tool_call_id": c["id"]}
        for v, c in zip((3, 12), parsed.tool_calls, strict=True)
    ]
    env, _ = chat.env_turn(sampled, results, assistant_message=message, tools=tools)
    assert env.text == (
        "\n<|im_start|>user\n<tool_response>\n3\n</tool_response>\n<tool_response>\n12\n</tool_response>"
        "<|im_end|>\n<|im_start|>assistant\n"
    )
    assert parser.parse("no calls here", tools).message() == {"role": "assistant", "content": "no calls here"}


def test_call_markers_that_are_special_tokens_are_refused_not_silently_lost(tool_tok_dir):
    """The bridge parses the sampled text without special tokens; a tokenizer whose `<tool_call>`
    markers are special tokens would hide every call, so the template check refuses it."""
    from transformers import AutoTokenizer

    from environments.atropos_runtime.turn_tokens import ChatTokens
    from environments.vf_bridge.tool_calls import ToolCallParser, ToolSupportError, check_tool_template

    special = AutoTokenizer.from_pretrained(tool_tok_dir)
    special.add_special_tokens({"additional_special_tokens": ["<tool_call>", "</tool_call>"]})
    tools = [{"type": "function", "function": {"name": "add", "parameters": {}}}]
    with pytest.raises(ToolSupportError, match="decoded without special tokens"):
        check_tool_template(ChatTokens(special), ToolCallParser("hermes", special), tools)
