"""A `vf.StatefulToolEnv` and a TextArenaEnv-style game through the bridge, compared sample by sample
with Verifiers' own `generate()` / `evaluate()` on the same scripted loopback policy: rewards, metrics,
turns, stop conditions, the conversation Verifiers scores, and the sampled tokens (masked in: exactly
the sampled turns, which decode to what Verifiers was answered). Then `process`, `evaluate` and `serve`.

Verifiers' own run talks to the policy's `/v1/chat/completions`; for the tool env that route renders
the offered tools through the Hermes template and parses the answer with vLLM's hermes parser, as a
vLLM server with `--tool-call-parser hermes` does. The policies answer from the conversation alone
(every sample of an item says the same), so the bridge's n-sample groups and Verifiers' single
rollouts must agree. textarena itself is not used: its Wordle downloads nltk corpora from the internet.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys

import pytest
from fastapi import Request

from environments.atropos_runtime.modes import run_evaluate, run_process
from environments.vf_bridge.tool_calls import ToolCallParser
from tests.integration.test_modes_on_vllm import register_trainer, take_batches
from tests.runtime.scripted_policy import ScriptedPolicy
from tests.verifiers_bridge.fixtures.vf_wordle import WORDS, feedback
from tests.verifiers_bridge.policies import END, assistant_runs, calc_policy
from tests.verifiers_bridge.test_bridge import FIX, ROOT, make_env, release_envs, tiny, tok  # noqa: F401
from tests.verifiers_bridge.test_env_group_and_completion import (
    TextPromptPolicy,
    check_against,
    verifiers_states,
)
from tests.verifiers_bridge.tool_template import tool_tokenizer

ORDER = ["slate", "pride", "grace", "crane", "stale", "brick", "plumb", "ghost", "fjord", "nymph"]


def wordle_policy(text: str, index: int) -> str:
    """Guess `slate`, then the first word of ORDER whose greens fit every scored feedback; after an
    all-X first guess one invalid word (`qqqqq`); `<think>` only on the first two guesses."""
    said = "".join(text.split("<|im_start|>assistant\n")[1:])  # the prompt itself shows `<guess>word</guess>`
    guesses = re.findall(r"<guess>(\w+)</guess>", said)
    scored = re.findall(r"(\w+): ([GYX](?: [GYX]){4})", said)
    if len(guesses) == 1 and scored and "G" not in scored[0][1]:
        word = "qqqqq"
    else:

        def fits(w: str) -> bool:
            return all(
                [a == b for a, b in zip(w, g, strict=True)] == [x == "G" for x in m.split()]
                for g, m in scored
            )

        word = next(w for w in ORDER if w not in guesses and fits(w))
    assert feedback(word, word) == "G G G G G" or word == "qqqqq"
    return (f"<think>try {word}</think>\n" if len(guesses) < 2 else "") + f"<guess>{word}</guess>"


def tool_policy(text: str, index: int) -> str:
    """calc_policy with the path chosen by the row (its `a`), never by the sample: a=2 adds,
    multiplies and answers right; 5 the same but answers wrong; 7 answers at once, no tools."""
    a = int(re.findall(r"Compute \((\d+) \+", text)[-1])
    return calc_policy(text, {2: 0, 5: 1, 7: 3}[a])


class ToolChatPolicy(TextPromptPolicy):
    """`/v1/chat/completions` as vLLM serves a tool model: the request's `tools` rendered by the chat
    template, the answer parsed by vLLM's hermes parser into `content` + `tool_calls`."""

    def _app(self):
        app = super()._app()
        app.router.routes[:] = [
            r for r in app.router.routes if getattr(r, "path", "") != "/v1/chat/completions"
        ]
        parser = ToolCallParser("hermes", self.tokenizer)

        @app.post("/v1/chat/completions")
        async def chat(request: Request):
            body = await request.json()
            self.requests.append(body)
            messages = [dict(m, tool_calls=[dict(c, function=dict(c["function"], arguments=json.loads(
                c["function"]["arguments"]))) for c in m["tool_calls"]]) if m.get("tool_calls") else m
                for m in body["messages"]]  # fmt: skip
            text = self.tokenizer.apply_chat_template(
                messages, tools=body.get("tools"), tokenize=False, add_generation_prompt=True
            )
            parsed = parser.parse(self.answer(text, 0), body.get("tools") or [])
            message = parsed.message()
            return {"id": "chat", "object": "chat.completion", "created": 0, "model": self.model,
                    "choices": [{"index": 0, "message": message,
                                 "finish_reason": "tool_calls" if parsed.tool_calls else "stop"}]}  # fmt: skip

        return app


@pytest.fixture(scope="module")
def tool_tok_dir(tiny, tmp_path_factory):  # noqa: F811
    return tool_tokenizer(tiny, tmp_path_factory.mktemp("tool-tokenizer"))


def _get(obj, key: str):
    return obj.get(key) if isinstance(obj, dict) else getattr(obj, key, None)


def calls_of(message) -> list[tuple[str, dict]]:
    """(name, arguments) of a message's tool calls (dicts or OpenAI objects)."""
    out = []
    for call in _get(message, "tool_calls") or []:
        fn = _get(call, "function")
        out.append((_get(fn, "name"), json.loads(_get(fn, "arguments"))))
    return out


def check_tool_group(tok, parser, tools, group: dict, state) -> None:  # noqa: F811
    """One bridge group of the tool env (every sample) against Verifiers' rollout of the same row."""
    own = [m for m in state["completion"] if _get(m, "role") in ("assistant", "tool")]
    for score, reward, ep, msgs, tokens, masks in zip(group["scores"], group["rewards"], group["episodes"],
                                                      group["messages"], group["tokens"], group["masks"], strict=True):  # fmt: skip
        assert score == state["reward"] and reward["components"] == state["metrics"]
        assert ep["stop_reason"] == f"vf:{state['stop_condition']}" and len(ep["turns"]) == len(
            state["trajectory"]
        )
        mine = msgs[len(state["prompt"]) :]
        assert [m["role"] for m in mine] == [_get(m, "role") for m in own]
        for m, o in zip(mine, own, strict=True):
            assert (m.get("content") or "") == (_get(o, "content") or "") and calls_of(m) == calls_of(o)
        runs = assistant_runs(
            tokens, masks
        )  # masked in: exactly the sampled turns, parsing to Verifiers' own
        assert [list(r) for r in runs] == [t["tokens"] for t in ep["turns"]]
        said = [m for m in own if _get(m, "role") == "assistant"]
        for run, o in zip(runs, said, strict=True):
            parsed = parser.parse(tok.decode(run, skip_special_tokens=True), tools).message()
            assert (parsed["content"] or "") == (_get(o, "content") or "") and calls_of(parsed) == calls_of(o)
        assert masks[0] == -100 and sum(m != -100 for m in masks) == sum(map(len, runs))


async def test_stateful_tool_env_matches_verifiers_generate_sample_by_sample(tool_tok_dir, tok):  # noqa: F811
    from transformers import AutoTokenizer

    tool_tok = AutoTokenizer.from_pretrained(tool_tok_dir)
    parser = ToolCallParser("hermes", tool_tok)
    with ToolChatPolicy(tool_tok, tool_policy, latency_s=(0.0, 0.03), seed=4) as policy:
        states = {s["example_id"]: s for s in await verifiers_states(policy, "vf_tools", {"stateful": True})}
        env = make_env(
            tool_tok_dir, policy, "vf_tools", {"stateful": True}, group_size=2, max_token_length=2048
        )
        await env.setup()
        tools = env.task.env_tools()
        seen = set()
        for item in env.train_items:
            outcome = await env.group_for(item, training=False)
            assert outcome.group is not None and len(outcome.group["scores"]) == 2, outcome.detail
            check_tool_group(tok, parser, tools, outcome.group, states[int(item.uid)])
            seen.add((outcome.group["scores"][0], len(outcome.group["episodes"][0]["turns"])))
    assert seen == {(1.0, 3), (0.0, 3), (1.0, 1)} and env.drops == {}
    # each episode's own ledger (the hidden, injected argument) held exactly its own tool results
    assert {s["metrics"]["ledger_matches"] for s in states.values()} == {1.0}
    assert {s["metrics"]["total_tool_calls"] for s in states.values()} == {2.0, 0.0}


async def test_textarena_style_game_matches_verifiers_generate_sample_by_sample(tiny, tok):  # noqa: F811
    with TextPromptPolicy(tok, wordle_policy, latency_s=(0.0, 0.03), seed=6) as policy:
        states = {s["example_id"]: s for s in await verifiers_states(policy, "vf_wordle")}
        env = make_env(tiny, policy, "vf_wordle", group_size=2)
        await env.setup()
        outcomes = [(item, await env.group_for(item, training=False)) for item in env.train_items]
    shapes = set()
    for item, outcome in outcomes:
        assert outcome.group is not None and len(outcome.group["scores"]) == 2, outcome.detail
        state = states[int(item.uid)]
        check_against(tok, outcome.group, state)
        shapes.add((state["answer"], len(state["trajectory"]), state["metrics"]["solved"]))
        assert state["metrics"]["game_dropped"] == 1.0 and "game" not in state
    # solved in 1..3 guesses (one after an invalid word), and out of guesses (final_env_response either way)
    assert shapes == {
        ("nymph", 4, 0.0),
        ("crane", 3, 1.0),
        ("ghost", 4, 1.0),
        ("stale", 2, 1.0),
        ("brick", 3, 1.0),
    }
    assert {s["stop_condition"] for s in states.values()} == {"has_final_env_response"}
    assert env.drops == {}


@pytest.mark.parametrize("fixture", ["vf_wordle", "vf_tools"])
async def test_process_and_evaluate_match_verifiers_evaluate(fixture, tiny, tool_tok_dir, tok, tmp_path):  # noqa: F811
    from transformers import AutoTokenizer

    tokenizer, args = (tiny, {}) if fixture == "vf_wordle" else (tool_tok_dir, {"stateful": True})
    policy_tok = AutoTokenizer.from_pretrained(tokenizer)
    policy_cls, answer = (
        (TextPromptPolicy, wordle_policy) if fixture == "vf_wordle" else (ToolChatPolicy, tool_policy)
    )
    with policy_cls(policy_tok, answer) as policy:
        own = {s["example_id"]: s for s in await verifiers_states(policy, fixture, args, evaluate=True)}
        env = make_env(tokenizer, policy, fixture, args, group_size=2, total_steps=len(own), max_token_length=2048,
                       data_path_to_save_groups=str(tmp_path / "g.jsonl"), data_dir_to_save_evals=str(tmp_path / "eval"))  # fmt: skip
        summary = await run_process(env)
        await env.setup()
        metrics = await run_evaluate(env)
    assert summary["groups_in_file"] == len(own) and summary["dropped"] == {}
    assert summary["reward_status"] == {"ok": 2 * len(own)}
    samples = [json.loads(line) for line in (tmp_path / "eval" / "samples.jsonl").read_text().splitlines()]
    assert len(samples) == len(own) == metrics["eval/n_samples"]
    for s in samples:
        state = own[int(s["uid"])]
        assert s["score"] == state["reward"] and s["components"] == state["metrics"]
        assert s["stop_reason"] == f"vf:{state['stop_condition']}" and s["turns"] == len(state["trajectory"])
    for g in (json.loads(line) for line in (tmp_path / "g.jsonl").read_text().splitlines()):
        assert g["tokens_exact"] and g["scores"] == [own[int(g["item_uid"])]["reward"]] * 2


def test_serve_delivers_game_batches_to_run_api(tiny, tok, run_api, tmp_path):  # noqa: F811
    """`serve` on the game: groups reach the real run-api with exact tokens, the game's own feedback
    masked out between the sampled guesses, the rewards of each rollout's own guesses."""
    register_trainer(run_api, batch_size=4, max_token_len=1024, steps=2)
    log = open(tmp_path / "serve.log", "w")  # noqa: SIM115
    with ScriptedPolicy(tok, wordle_policy, latency_s=(0.0, 0.03), seed=5) as policy:
        cmd = [sys.executable, str(ROOT / "environments" / "verifiers_env.py"), "serve",
               "--env.vf_env_name", FIX + "vf_wordle", "--env.tokenizer_name", str(tiny),
               "--openai.model_name", "scripted", "--openai.base_url", policy.base_url,
               "--env.rollout_server_url", run_api, "--env.group_size", "2", "--env.total_steps", "4",
               "--env.include_messages", "true", "--env.ensure_scores_are_not_same", "false"]  # fmt: skip
        proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, cwd=ROOT,
                                env=dict(os.environ, PYTHONPATH=str(ROOT)))  # fmt: skip
        try:
            batches = take_batches(run_api, 2, proc, timeout_s=240)
        finally:
            proc.terminate()
            proc.wait(timeout=30)
    assert len(batches) == 2, (tmp_path / "serve.log").read_text()[-3000:]
    for g in (g for batch in batches for g in batch):
        for tokens, masks, msgs, score in zip(
            g["tokens"], g["masks"], g["messages"], g["scores"], strict=True
        ):
            turns = [tok.decode(r, skip_special_tokens=True) for r in assistant_runs(tokens, masks)]
            assert turns == [m["content"] for m in msgs if m["role"] == "assistant"] and END not in "".join(
                turns
            )
            guesses = [re.search(r"<guess>(\w+)</guess>", t).group(1) for t in turns]
            shown = re.findall(
                r"^(\w+): ([GYX](?: [GYX]){4})$",
                "\n".join(m["content"] for m in msgs if m["role"] == "user"),
                re.M,
            )
            # the secret is not in the messages (the game's last word is its final_env_response): every
            # secret the shown feedback and the game's length allow must give this rollout's score from its own guesses
            secrets = [
                w
                for w in WORDS
                if all(feedback(w, g) == m for g, m in shown) and (w == guesses[-1] or len(guesses) == 4)
            ]  # under 4 guesses: it was solved
            assert secrets and all(expected_score(w, guesses, turns) == pytest.approx(score) for w in secrets)


def expected_score(secret: str, guesses: list[str], turns: list[str]) -> float:
    """vf_wordle's reward of these guesses for `secret` (the format part read through Verifiers' parser)."""
    import verifiers as vf

    last = guesses[-1]
    marks = feedback(secret, last).split() if last in WORDS else []
    partial = (marks.count("G") + 0.5 * marks.count("Y")) / len(marks) if marks else 0.0
    solved = float(last == secret)
    parser = vf.XMLParser(fields=["think", "guess"], answer_field="guess")
    fmt = parser.get_format_reward_func()([{"role": "assistant", "content": t} for t in turns])
    return solved + 0.5 * partial + 0.5 * solved / len(guesses) + 0.2 * fmt
