"""math_python: math problems with a sandboxed Python tool, on a scripted policy (the tiny tokenizer
with the Hermes tool template, as in tests/runtime/test_tool_layer.py): per-episode interpreters that
share nothing, timeouts and huge output answered, reward from the final answer only, and the
`process` / `evaluate` commands end to end."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from atroposlib.envs.server_handling.server_baseline import APIServerConfig
from transformers import AutoTokenizer

from environments.math_python_env import MathPythonEnv, MathPythonEnvConfig
from environments.tools.task import BUILTIN_TEMPLATES
from tests.runtime.scripted_policy import ScriptedPolicy
from tests.verifiers_bridge.tool_template import tool_tokenizer

ROOT = Path(__file__).resolve().parents[2]
ROWS = [
    {"id": "m1", "question": "What is 6 times 7?", "answer": "42"},
    {"id": "m2", "question": "What is 12 times 11?", "answer": "132"},
    {"id": "m3", "question": "What is 9 times 9?", "answer": "81"},
    {"id": "m4", "question": "What is 5 times 13?", "answer": "65"},
]


def python(code: str) -> str:
    return f'<tool_call>\n{{"name": "python", "arguments": {json.dumps({"code": code})}}}\n</tool_call>'


SCRIPTS = {
    "A": [python("secret = 41"), python("print(secret + 1)"), "\\boxed{42}"],
    "B": [python("y = 1"), python("print(secret)"), "\\boxed{0}"],
    "C": [
        python("z = 5\nwhile True:\n    pass"),
        python("print('x' * (10 << 20))"),
        python("z"),
        "\\boxed{42}",
    ],
}


@pytest.fixture(scope="module")
def tool_tok(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from environments.atropos_runtime.local_model import build_tiny_model

    tiny = build_tiny_model(os.environ.get("RLVR_TINY_MODEL") or ROOT / ".cache" / "tiny-model")
    return tool_tokenizer(tiny, tmp_path_factory.mktemp("tool-tokenizer"))


@pytest.fixture
def data(tmp_path: Path) -> Path:
    path = tmp_path / "math.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in ROWS))
    return path


def scripted(groups: dict[int, str]) -> Any:
    def answer(prompt: str, i: int) -> str:
        turns = prompt.split("<|im_start|>assistant\n")[1:-1]
        if not turns:
            return f"scenario {groups[i]}\n" + SCRIPTS[groups[i]][0]
        return SCRIPTS[re.match(r"scenario (\w)", turns[0]).group(1)][len(turns)]

    return answer


def first(env: MathPythonEnv) -> Any:
    """The item of "What is 6 times 7?" (train items are shuffled)."""
    return next(item for item in env.train_items if item.uid == "m1")


async def one_group(env: MathPythonEnv) -> Any:
    """Set `env` up, run the group of "What is 6 times 7?" (not for training), close it."""
    await env.setup()
    try:
        return await env.group_for(first(env), training=False)
    finally:
        await env.aclose()


def make_env(tok: Path, policy: ScriptedPolicy, data: Path, group_size: int, **kwargs: Any) -> MathPythonEnv:
    kwargs.setdefault("request_timeout_s", 60.0)  # a held request never waits the default 300 s
    config = MathPythonEnvConfig(tokenizer_name=str(tok), wandb_name="math_python", use_wandb=False,
                                 group_size=group_size, max_token_length=4096, dataset=str(data), eval_fraction=0,
                                 ensure_scores_are_not_same=False, cas_workers=1, python_sessions=2,
                                 python_backend="bwrap", **kwargs)  # fmt: skip
    api = APIServerConfig(server_type="vllm", model_name="scripted", base_url=policy.base_url, api_key="x",
                          tokenizer_name=str(tok), timeout=60, health_check=False)  # fmt: skip
    return MathPythonEnv(config, [api])


async def test_concurrent_episodes_have_their_own_interpreters(tool_tok, data):
    """A defines `secret` and reads it back later; B, running at the same time, asks for `secret`
    only after A defined it (its request is held until A's second request arrives) and gets a
    NameError. The reward is the final answer's; tool errors are counted, not rewarded."""
    tok = AutoTokenizer.from_pretrained(tool_tok)
    with ScriptedPolicy(tok, scripted({0: "A", 1: "B"})) as policy:
        after_one_result = "<tool_response>"

        def held(text: str) -> bool:  # B's second turn
            return "scenario B" in text and text.count(after_one_result) == 1

        policy.hold(held, until=lambda text: "scenario A" in text and text.count(after_one_result) == 1)
        env = make_env(tool_tok, policy, data, 2)
        outcome = await one_group(env)
    group = outcome.group
    by_name = {
        re.match(r"scenario (\w)", m[2]["content"]).group(1): k for k, m in enumerate(group["messages"])
    }
    a, b = (group["episodes"][by_name[x]] for x in "AB")
    assert a["turns"][1]["env_messages"][0]["content"] == "42\n"
    assert "NameError: name 'secret' is not defined" in b["turns"][1]["env_messages"][0]["content"]
    assert group["scores"][by_name["A"]] == 1.0 and group["scores"][by_name["B"]] == 0.0
    ra, rb = group["rewards"][by_name["A"]], group["rewards"][by_name["B"]]
    assert (ra["components"]["tool_calls"], ra["components"]["tool_errors"]) == (2, 0)
    assert (rb["components"]["tool_calls"], rb["components"]["tool_errors"]) == (2, 1)
    assert env.task.python.pool is None  # the pool is closed with the env
    assert env.task.stats["episodes"] == 2


async def test_a_hanging_call_and_ten_megabytes_of_output(tool_tok, data):
    tok = AutoTokenizer.from_pretrained(tool_tok)
    with ScriptedPolicy(tok, scripted({0: "C"})) as policy:
        env = make_env(tool_tok, policy, data, 1, tool_call_timeout_s=0.5, tool_call_output_bytes=2000)
        outcome = await one_group(env)
    (episode,) = outcome.group["episodes"]
    replies = [t["env_messages"][0]["content"] if t["env_messages"] else None for t in episode["turns"]]
    assert "CallTimeout" in replies[0] and "over its time limit of 0.5 s" in replies[0]
    assert replies[1].startswith("x" * 1000) and "truncated" in replies[1] and len(replies[1]) < 2600
    assert replies[2] == "5\n"  # the interrupted call kept the session's state
    info = [t["info"] for t in episode["turns"]]
    assert (info[0]["tool_timeouts"], info[1]["tool_truncated"]) == (1, 1)
    assert outcome.group["scores"] == [1.0] and episode["stop_reason"] == "answered"


async def test_a_sandbox_that_is_down_makes_the_episode_unverified_not_wrong(tool_tok, data):
    tok = AutoTokenizer.from_pretrained(tool_tok)
    with ScriptedPolicy(tok, scripted({0: "A"})) as policy:
        env = make_env(tool_tok, policy, data, 1)
        await env.setup()
        await env.task.python.aclose()  # the sandbox goes away under the env
        try:
            outcome = await env.group_for(first(env), training=True)
        finally:
            await env.aclose()
    assert outcome.group is None and outcome.drop == "error"
    assert "tool 'python' could not run: the Python tool's sandbox is not started" in outcome.detail
    assert env.statuses["error"] == 1


def run(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    argv = [sys.executable, str(ROOT / "environments" / "math_python_env.py"), *args]
    env = dict(os.environ, PYTHONPATH=str(ROOT), WANDB_MODE="disabled")
    return subprocess.run(argv, capture_output=True, text=True, cwd=cwd, env=env, timeout=300)


def test_process_and_evaluate_end_to_end(tool_tok, data, tmp_path):
    """`process` writes groups whose episodes called the tool (with an MCP server's tools offered
    too, from the command line); `evaluate` reports the accuracy with the tool (the policy computes
    the product) and without it (it guesses 0)."""
    tok = AutoTokenizer.from_pretrained(tool_tok)

    offered: set[str] = set()

    def answer(prompt: str, i: int) -> str:
        offered.update(re.findall(r'"name": "(\w+)", "description"', prompt.split("\n</tools>")[0]))
        if "<tools>" not in prompt:
            return "\\boxed{0}"
        results = re.findall(r"<tool_response>\n(.*?)\n</tool_response>", prompt, re.S)
        if results:
            return f"\\boxed{{{results[-1].strip()}}}"
        a, b = re.findall(r"What is (\d+) times (\d+)\?", prompt)[-1]
        return python(f"print({a} * {b})")

    out, evals = tmp_path / "groups.jsonl", tmp_path / "eval"
    common = ["--env.tokenizer_name", str(tool_tok), "--openai.model_name", "scripted", "--env.dataset", str(data),
              "--env.cas_workers", "1", "--env.python_sessions", "2", "--env.eval_fraction", "0.5"]  # fmt: skip
    with ScriptedPolicy(tok, answer) as policy:
        url = ["--openai.base_url", policy.base_url]
        mcp = [
            "--env.mcp_servers",
            json.dumps([f"python {ROOT / 'tests/runtime/fixtures/mcp_echo_server.py'}"]),
        ]
        proc = run("process", *common, *url, *mcp, "--env.total_steps", "2", "--env.group_size", "2",
                   "--env.data_path_to_save_groups", str(out), cwd=tmp_path)  # fmt: skip
        assert proc.returncode == 0, proc.stderr[-3000:]
        ev = run("evaluate", *common, *url, "--env.data_dir_to_save_evals", str(evals), cwd=tmp_path)
        assert ev.returncode == 0, ev.stderr[-3000:]
    assert offered == {"python", "add", "sleep", "fail", "crash"}  # the MCP server's beside the env's
    groups = [json.loads(line) for line in out.read_text().splitlines()]
    assert len(groups) == 2 and all(g["scores"] == [1.0, 1.0] for g in groups)
    for group in groups:
        for episode, messages in zip(group["episodes"], group["messages"], strict=True):
            assert episode["stop_reason"] == "answered" and len(episode["turns"]) == 2
            assert messages[2]["tool_calls"][0]["function"]["name"] == "python"
            assert messages[3]["role"] == "tool" and messages[3]["content"].strip().isdigit()
        assert [r["components"]["tool_calls"] for r in group["rewards"]] == [1, 1]
    with_tools = json.loads((evals / "tools" / "metrics.json").read_text())
    without = json.loads((evals / "no_tools" / "metrics.json").read_text())
    assert with_tools["results"]["all"]["eval/accuracy"] == 1.0
    assert without["results"]["all"]["eval/accuracy"] == 0.0
    assert re.search(r"accuracy tools\s+1\.0", ev.stdout) and re.search(
        r"accuracy no_tools\s+0\.0", ev.stdout
    )


@pytest.fixture(scope="module")
def chatml_tok() -> Path:
    """The tiny model's own tokenizer: ChatML, no tool support in its template."""
    from environments.atropos_runtime.local_model import build_tiny_model

    return build_tiny_model(os.environ.get("RLVR_TINY_MODEL") or ROOT / ".cache" / "tiny-model")


async def test_a_chatml_model_gets_tools_from_the_chatml_tools_template(chatml_tok, data):
    """A ChatML model whose own template ignores tools is refused with the option that fixes it;
    `--env.chat_template chatml-tools` renders the tools, and an episode's call, result and answer
    keep their exact tokens; a template that is neither built in nor a file is one clear error."""
    tok = AutoTokenizer.from_pretrained(chatml_tok)
    with ScriptedPolicy(tok, scripted({0: "A"})) as policy:
        refused = make_env(chatml_tok, policy, data, 1)
        with pytest.raises(ValueError, match="ignores tools=.*--env.chat_template chatml-tools"):
            await refused.setup()
        await refused.aclose()
        parser = make_env(chatml_tok, policy, data, 1, tool_parser="no-such-parser")
        with pytest.raises(ValueError, match="unknown tool parser") as refused_parser:
            await parser.setup()
        assert "chatml-tools" not in str(refused_parser.value)  # the hint is for templates only
        await parser.aclose()
        missing = make_env(chatml_tok, policy, data, 1, chat_template="no-such-template")
        with pytest.raises(ValueError, match="'no-such-template' is neither a built-in \\(chatml-tools\\)"):
            await missing.setup()
        await missing.aclose()
        env = make_env(chatml_tok, policy, data, 1, chat_template="chatml-tools")
        outcome = await one_group(env)
    group = outcome.group
    assert group["scores"] == [1.0] and group["rewards"][0]["components"]["tool_calls"] == 2
    (episode,), (tokens,), (masks,), (messages,) = (
        group["episodes"],
        group["tokens"],
        group["masks"],
        group["messages"],
    )
    assert [t["env_messages"][0]["content"] for t in episode["turns"][:2]] == ["(no output)", "42\n"]
    template = BUILTIN_TEMPLATES["chatml-tools"].read_text()
    rendered = tok.apply_chat_template(
        messages, tools=env.task.tools(None), tokenize=False, chat_template=template
    )
    assert tok.decode(tokens) + "\n" == rendered and "<tools>" in rendered  # the last "\n" follows <|im_end|>
    assert tokens == tok.encode(rendered, add_special_tokens=False)[:-1]
    expected = [-100] * (
        len(tokens) - sum(len(t["tokens"]) + len(t["env_tokens"] or []) for t in episode["turns"])
    )
    for turn in episode["turns"]:
        expected += turn["tokens"] + [-100] * len(turn["env_tokens"] or [])
    assert masks == expected


def test_tool_examples_are_worked_calls_in_the_prompt(chatml_tok, data):
    """`--env.tool_examples N` puts N worked examples (a sum, a python call that prints it, the
    result, the boxed answer) between the system prompt and the problem; the template writes each
    call in the form the hermes parser reads back, so the model sees calls as it must write them."""
    from environments.atropos_runtime.turn_tokens import ChatTokens
    from environments.math_python_env import MathPythonTask, tool_examples

    config = MathPythonEnvConfig(dataset=str(data), eval_fraction=0, tool_examples=2, use_wandb=False)
    item = MathPythonTask(config).item(ROWS[0], 0)
    roles = [m["role"] for m in item.prompt]
    assert roles == ["system", *["user", "assistant", "tool", "assistant"] * 2, "user"]
    assert item.prompt[-1]["content"] == ROWS[0]["question"] and item.prompt[4]["content"] == "\\boxed{7}"
    assert MathPythonTask(config.model_copy(update={"tools": False})).item(ROWS[0], 0).prompt[1:] == [
        {"role": "user", "content": ROWS[0]["question"]}
    ]
    with pytest.raises(ValueError):
        MathPythonEnvConfig(tool_examples=len(tool_examples(99)) // 4 + 1)
    chat = ChatTokens(
        AutoTokenizer.from_pretrained(chatml_tok), chat_template=BUILTIN_TEMPLATES["chatml-tools"].read_text()
    )
    text = chat.render(
        item.prompt, True, [{"type": "function", "function": {"name": "python", "parameters": {}}}]
    )
    assert (
        text.count('<tool_call>\n{"name": "python", "arguments": {"code": "print(3 + 4)"}}\n</tool_call>')
        == 1
    )
    assert "<tool_response>\n13\n</tool_response>" in text and text.endswith("<|im_start|>assistant\n")
