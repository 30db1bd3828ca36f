"""A classic `vf.EnvGroup` and completion-mode envs through the bridge, compared sample by sample with
Verifiers' own `generate()` / `evaluate()` on the same scripted loopback server: rewards, metrics,
turns, stop conditions, the sampled text and (completion mode, where Verifiers records them) the
exact prompt and completion ids; masks cover exactly the sampled turns. Then `process`, `evaluate`
(per-task metrics) and `serve` to the real run-api with exact tokens."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys

import pytest
from fastapi import Request

from environments.atropos_runtime.modes import run_evaluate, run_process
from environments.verifiers_env import VerifiersBridgeError
from environments.vf_bridge.compat import classic_client
from tests.integration.test_modes_on_vllm import register_trainer, take_batches
from tests.runtime.scripted_policy import ScriptedPolicy
from tests.verifiers_bridge.policies import END, assistant_runs, expected_sum, replies
from tests.verifiers_bridge.test_bridge import FIX, ROOT, make_env, release_envs, tiny, tok  # noqa: F401

GUESS = "Guess the number from 1 to 8"


def bisect(guesses: list[int], hints: list[str]) -> int:
    """The next guess: 4 first, then bisection over the hints (index-free: every sample of an item
    says the same, so the bridge's n-choice groups and Verifiers' single rollouts must agree)."""
    if not guesses:
        return 4
    low, high = 1, 8
    for guess, hint in zip(guesses, hints, strict=False):
        low, high = (guess + 1, high) if hint == "higher" else (low, guess - 1)
    return (low + high) // 2


def chat_policy(text: str, index: int) -> str:
    """vf_group (chat): sums right and tagged, wrong, or untagged by (a + b) % 3; guesses bisect."""
    if GUESS in text:
        guesses = [int(p.split(END)[0]) for p in text.split("<|im_start|>assistant\n")[1:] if END in p]
        hints = [p.split(END)[0] for p in text.split("<|im_start|>user\n")[2:]]
        return str(bisect(guesses, hints))
    a, b = map(int, re.findall(r"What is (\d+) \+ (\d+)\?", text)[-1])
    s = a + b
    return [f"<answer>{s}</answer>", f"<answer>{s + 1}</answer>", str(s)][s % 3]


def text_policy(text: str, index: int) -> str:
    """vf_completion: ` N` (wrong when a + b is even) or a bisecting ` G` after each `Guess:`. A stop
    token the bridge keeps in the context is no text."""
    text = text.replace(END, "")
    if GUESS in text:
        lines = text.split("\n")
        guesses = [int(g) for line in lines if (g := line.partition("Guess:")[2].strip()).isdigit()]
        return f" {bisect(guesses, [line for line in lines if line in ('higher', 'lower')])}"
    a, b = map(int, re.findall(r"What is (\d+) \+ (\d+)\?", text)[-1])
    return f" {a + b + (a + b) % 2}"


class TextPromptPolicy(ScriptedPolicy):
    """ScriptedPolicy whose `/v1/completions` also takes a string prompt (what Verifiers sends in
    completion mode), tokenised as vLLM does (`tokenizer(prompt)`), answered in vLLM's shape with
    `prompt_token_ids` / `token_ids` (which Verifiers records as the turn's tokens)."""

    def _app(self):
        app = super()._app()
        route = next(r for r in app.router.routes if getattr(r, "path", "") == "/v1/completions")
        app.router.routes.remove(route)

        @app.post("/v1/completions")
        async def completions(request: Request):
            body = await request.json()  # cached: the token route reads it again
            if not isinstance(body["prompt"], str):
                return await route.endpoint(request)
            self.requests.append(body)
            ids = list(self.tokenizer(body["prompt"]).input_ids)
            choices = [
                self._choice(body["prompt"], j, ids, int(body.get("max_tokens") or 16))
                for j in range(body.get("n", 1))
            ]
            return {
                "id": "cmpl",
                "object": "text_completion",
                "created": 0,
                "model": self.model,
                "choices": choices,
            }

        return app


async def verifiers_states(
    policy, fixture: str, env_args: dict | None = None, evaluate: bool = False
) -> list:
    """Verifiers' own run of a fresh copy of the env on the same server: each row once."""
    import verifiers as vf
    from openai import AsyncOpenAI

    env = vf.load_environment(FIX + fixture, **(env_args or {}))
    client = classic_client(AsyncOpenAI(base_url=policy.base_url, api_key="x"))
    if evaluate:
        out = await env.evaluate(client, "scripted")
    else:
        out = await env.generate(env.get_dataset(), client, "scripted")
    return out["state"]


def check_against(tok, group: dict, state) -> None:  # noqa: F811
    """One bridge group (every sample) against Verifiers' own rollout of the same row."""
    own = [t.get("completion") if isinstance(t.get("completion"), str) else t["completion"][0]["content"]
           for t in state["trajectory"]]  # fmt: skip
    for reward, score, ep, msgs, tokens, masks in zip(group["rewards"], group["scores"], group["episodes"],
                                                      group["messages"], group["tokens"], group["masks"], strict=True):  # fmt: skip
        assert score == state["reward"] and reward["components"] == state["metrics"]
        assert ep["stop_reason"] == f"vf:{state['stop_condition']}"
        assert [t["content"] for t in ep["turns"]] == own  # the same turns, one per Verifiers step
        runs = assistant_runs(tokens, masks)  # masked in: exactly the sampled turns
        assert [tok.decode(r, skip_special_tokens=True) for r in runs] == own
        assert [list(r) for r in runs] == [t["tokens"] for t in ep["turns"]]
        assert masks[0] == -100 and sum(m != -100 for m in masks) == sum(map(len, runs))
        final = state["final_env_response"]
        if not isinstance(state["prompt"], str):  # chat: the scored conversation is Verifiers' own
            pairs = [(m["role"], m["content"]) for m in [*msgs[len(state["prompt"]) :], *(final or [])]]
            assert pairs == [(m["role"], m["content"]) for m in state["completion"]]
        else:  # completion mode: the text Verifiers keeps, and its exact ids
            assert msgs[0]["content"] == state["prompt"]
            assert state["completion"] == "".join(m["content"] for m in msgs[1:]) + (final or "")
            steps = [t["tokens"] for t in state["trajectory"]]
            assert [s["completion_ids"] for s in steps] == [list(r) for r in runs]
            assert tokens[: len(steps[0]["prompt_ids"])] == steps[0]["prompt_ids"]
            assert masks[: len(steps[0]["prompt_ids"])] == [-100] * len(steps[0]["prompt_ids"])


async def compare_with_generate(tiny, tok, policy_fn, fixture: str, env_args: dict | None = None):  # noqa: F811
    with TextPromptPolicy(tok, policy_fn, latency_s=(0.0, 0.03), seed=11) as policy:
        states = {s["example_id"]: s for s in await verifiers_states(policy, fixture, env_args)}
        env = make_env(tiny, policy, fixture, env_args, group_size=2)
        await env.setup()
        groups = {}
        for item in env.train_items:
            outcome = await env.group_for(item, training=False)
            assert outcome.group is not None and len(outcome.group["scores"]) == 2, outcome.detail
            check_against(tok, outcome.group, states[int(item.uid)])
            groups[item.uid] = outcome.group
        token_requests = [  # one per token-id prompt (the runtime batches later turns' prompts)
            dict(r, prompt=p)
            for r in policy.requests
            if isinstance(r.get("prompt"), list)
            for p in (r["prompt"] if isinstance(r["prompt"][0], list) else [r["prompt"]])
        ]
    assert set(groups) == {str(k) for k in states} and env.drops == {}
    return env, states, groups, token_requests


async def test_env_group_matches_verifiers_generate_sample_by_sample(tiny, tok):  # noqa: F811
    env, states, groups, requests = await compare_with_generate(tiny, tok, chat_policy, "vf_group")
    assert env.task.turn_budget() == 2
    by_task: dict[str, set] = {"sum": set(), "guess": set()}
    for uid, group in groups.items():
        task = states[int(uid)]["task"]
        by_task[task] |= {(s, e["stop_reason"], len(e["turns"])) for s, e in zip(group["scores"], group["episodes"], strict=True)}  # fmt: skip
        # each sub-env's own sampling args over the group's, recorded with its group
        assert group["generation_params"]["max_tokens"] == (24 if task == "sum" else 8)
        assert group["generation_params"]["temperature"] == (0.5 if task == "sum" else 1.0)
        # EnvGroupRubric: every sub-env's reward names, the other task's at 0
        assert {"correct", "solved", "num_turns"} <= set(group["rewards"][0]["components"])
    # sum: SingleTurnEnv (XMLParser format reward), one turn; guess: its own max_turns=2 or solved
    assert {r[0] for r in by_task["sum"]} == {1.25, 0.25, 0.05}
    assert {(r[1], r[2]) for r in by_task["sum"]} == {("vf:max_turns_reached", 1)}
    assert {(r[1], r[2]) for r in by_task["guess"]} == {("vf:max_turns_reached", 2)}
    assert {r[0] for r in by_task["guess"]} == {0.0, 1.0}
    sent = {(tok.decode(r["prompt"]).count(GUESS) > 0, r["temperature"], r["max_tokens"]) for r in requests}
    assert sent == {(False, 0.5, 24), (True, 1.0, 8)}
    for uid, group in groups.items():  # the replies scored are the sampled tokens
        if states[int(uid)]["task"] == "sum":
            answer = states[int(uid)]["answer"]
            assert group["scores"] == [expected_sum(r[-1], answer) for r in replies(tok, group)]


@pytest.mark.parametrize("env_args", [{}, {"multi_turn": True}], ids=["single_turn", "multi_turn"])
async def test_completion_env_matches_verifiers_generate_with_exact_tokens(tiny, tok, env_args):  # noqa: F811
    env, states, groups, requests = await compare_with_generate(
        tiny, tok, text_policy, "vf_completion", env_args
    )
    assert env.task.completion and env.episode_runner().chat.__class__.__name__ == "CompletionTokens"
    scores = {s for g in groups.values() for s in g["scores"]}
    stops = {e["stop_reason"] for g in groups.values() for e in g["episodes"]}
    if env_args:  # multi-turn: solved (final_env_response) and out of turns, 1..3 turns
        assert scores == {0.0, 1.0} and stops == {"vf:has_final_env_response", "vf:max_turns_reached"}
        assert {len(e["turns"]) for g in groups.values() for e in g["episodes"]} == {2, 3}
        assert {r["max_tokens"] for r in requests} == {6}
    else:
        assert scores == {0.0, 1.0} and {(r["temperature"], r["max_tokens"]) for r in requests} == {(0.7, 12)}
    for group in groups.values():  # no chat template anywhere in the sequence
        assert all("<|im_start|>" not in tok.decode(t) for t in group["tokens"])


async def test_a_group_of_completion_envs(tiny, tok):  # noqa: F811
    env, states, groups, _ = await compare_with_generate(
        tiny, tok, text_policy, "vf_group", {"completion": True}
    )
    assert env.task.completion and {s["task"] for s in states.values()} == {"sum", "guess"}


async def test_env_group_process_and_evaluate_match_verifiers_evaluate(tiny, tok, tmp_path):  # noqa: F811
    with TextPromptPolicy(tok, chat_policy) as policy:
        own = {s["example_id"]: s for s in await verifiers_states(policy, "vf_group", evaluate=True)}
        env = make_env(tiny, policy, "vf_group", total_steps=9, data_path_to_save_groups=str(tmp_path / "g.jsonl"),
                       data_dir_to_save_evals=str(tmp_path / "eval"))  # fmt: skip
        summary = await run_process(env)
        await env.setup()
        metrics = await run_evaluate(env)
    assert summary["groups_in_file"] == 9 and summary["dropped"] == {}
    groups = [json.loads(line) for line in (tmp_path / "g.jsonl").read_text().splitlines()]
    assert {g["generation_params"]["max_tokens"] for g in groups} == {24, 8}
    samples = [json.loads(line) for line in (tmp_path / "eval" / "samples.jsonl").read_text().splitlines()]
    assert len(samples) == len(own) == 9
    for s in samples:
        state = own[int(s["uid"])]
        assert s["score"] == state["reward"] and s["components"] == state["metrics"]
        assert s["stop_reason"] == f"vf:{state['stop_condition']}" and s["turns"] == len(state["trajectory"])
    written = json.loads((tmp_path / "eval" / "metrics.json").read_text())["results"]["all"]
    for task in ("sum", "guess"):  # per task in metrics.json: Verifiers' own rewards and metrics
        mine = [own[int(s["uid"])] for s in samples if own[int(s["uid"])]["task"] == task]
        assert written[f"eval/task/{task}/n"] == len(mine)
        assert written[f"eval/task/{task}/mean_score"] == pytest.approx(
            sum(s["reward"] for s in mine) / len(mine)
        )
        for name in mine[0]["metrics"]:
            want = sum(s["metrics"][name] for s in mine) / len(mine)
            assert written[f"eval/task/{task}/{name}"] == pytest.approx(want)
    assert metrics["eval/n_samples"] == 9 and written["eval/task/guess/num_turns"] == 2.0
    # process: per task in the summary, over the groups it wrote (each with its sub-env's sampling)
    task_of = {it.uid: it.info["vf_input"]["task"] for it in env.train_items}
    tasks = summary["tasks"]
    for task in ("sum", "guess"):
        mine = [g for g in groups if task_of[g["item_uid"]] == task]
        assert tasks[task]["n"] == 4 * len(mine) > 0
        assert tasks[task]["mean_score"] == pytest.approx(
            sum(sum(g["scores"]) for g in mine) / (4 * len(mine))
        )
        assert {g["generation_params"]["max_tokens"] for g in mine} == {tasks[task]["sampling"]["max_tokens"]}
    assert tasks["sum"]["sampling"]["temperature"] == 0.5 and tasks["guess"]["sampling"]["max_tokens"] == 8
    assert json.loads((tmp_path / "g.summary.json").read_text())["tasks"] == tasks
    # the viewer's data carries the per-task eval metrics (it reads metrics.json generically)
    from environments.atropos_runtime.viewer import load_run

    shown = load_run(tmp_path / "eval", tokenizer=str(tiny))["header"]["metrics"]["results"]["all"]
    assert shown["eval/task/sum/mean_score"] == written["eval/task/sum/mean_score"]


async def test_a_raising_reward_function_of_a_sub_env_is_unverified_never_zero(tiny, tok):  # noqa: F811
    """The sub-envs' rubrics are guarded like a plain env's: Verifiers' EnvGroupRubric would score
    the raising function 0.0; the bridge makes those samples unverified, the other task unaffected."""
    with ScriptedPolicy(tok, chat_policy) as policy:
        env = make_env(tiny, policy, "vf_group", {"raise_on": "8"})
        await env.setup()
        task = {it.uid: it.info["vf_input"]["task"] for it in env.train_items}
        bad = next(it for it in env.train_items if it.answer == "8" and task[it.uid] == "sum")
        _, results = await env.rollout_and_score(bad, 2)
        guess = next(it for it in env.train_items if task[it.uid] == "guess")
        _, fine = await env.rollout_and_score(guess, 2)
    assert all(
        r.score is None and "correct: RuntimeError: scorer backend down for 8" in r.reason for r in results
    )
    assert all(r.verified for r in fine)
    assert env.summary_extra()["tasks"]["sum"]["n_unverified"] == 2


@pytest.mark.parametrize(
    ("env_args", "server_type", "reason"),
    [
        ({"tools": True}, "vllm", "the EnvGroup's sub-envs offer different tools [['add', 'multiply'], []]"),
        ({"completion": True}, "openai", "completion-mode environment, but the server is text-only"),
    ],
)
def test_what_cannot_run_is_refused_in_one_line(tiny, tok, env_args, server_type, reason):  # noqa: F811
    from atroposlib.envs.server_handling.server_baseline import APIServerConfig

    from environments.verifiers_env import VerifiersEnv, VerifiersEnvConfig

    config = VerifiersEnvConfig(tokenizer_name=str(tiny), use_wandb=False, vf_env_name=FIX + "vf_group",
                                env_args=json.dumps(env_args))  # fmt: skip
    server = APIServerConfig(
        server_type=server_type, model_name="x", base_url="http://127.0.0.1:9/v1", api_key="x"
    )
    with pytest.raises(VerifiersBridgeError) as err:
        VerifiersEnv(config, [server])
    assert reason in str(err.value) and "\n" not in str(err.value)


def test_serve_delivers_env_group_batches_to_run_api(tiny, tok, run_api, tmp_path):  # noqa: F811
    """`serve` on the EnvGroup: groups of both tasks reach the real run-api with exact tokens, each
    with its sub-env's own sampling and rewards of its own decoded tokens."""
    register_trainer(run_api, batch_size=4, max_token_len=1024, steps=4)
    log = open(tmp_path / "serve.log", "w")  # noqa: SIM115
    with ScriptedPolicy(tok, chat_policy, latency_s=(0.0, 0.03), seed=5) as policy:
        cmd = [sys.executable, str(ROOT / "environments" / "verifiers_env.py"), "serve",
               "--env.vf_env_name", FIX + "vf_group", "--env.tokenizer_name", str(tiny),
               "--openai.model_name", "scripted", "--openai.base_url", policy.base_url,
               "--env.rollout_server_url", run_api, "--env.group_size", "2", "--env.total_steps", "8",
               "--env.include_messages", "true", "--env.ensure_scores_are_not_same", "false"]  # fmt: skip
        proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, cwd=ROOT,
                                env=dict(os.environ, PYTHONPATH=str(ROOT)))  # fmt: skip
        try:
            batches = take_batches(run_api, 4, proc, timeout_s=240)  # 8 of the 12 shuffled items
        finally:
            proc.terminate()
            proc.wait(timeout=30)
    assert len(batches) == 4, (tmp_path / "serve.log").read_text()[-3000:]
    tasks = set()
    for g in (g for batch in batches for g in batch):
        for tokens, masks, lps, msgs, score in zip(g["tokens"], g["masks"], g["inference_logprobs"],
                                                   g["messages"], g["scores"], strict=True):  # fmt: skip
            assert len(tokens) == len(masks) == len(lps) < 1024
            assert all(lp == 1.0 for lp, m in zip(lps, masks, strict=True) if m == -100)
            turns = [tok.decode(r, skip_special_tokens=True) for r in assistant_runs(tokens, masks)]
            assert turns == [m["content"] for m in msgs if m["role"] == "assistant"]
            question = next(m["content"] for m in msgs if m["role"] == "user")
            if GUESS in question:
                tasks.add("guess")
                assert len(turns) <= 2 and g["generation_params"]["temperature"] == 1.0
                hints = [m["content"] for m in msgs[1:] if m["role"] == "user"]
                assert score in (0.0, 1.0) and set(hints) <= {"higher", "lower"}
            else:
                tasks.add("sum")
                a, b = map(int, re.findall(r"What is (\d+) \+ (\d+)\?", question)[0])
                assert g["generation_params"]["temperature"] == 0.5
                assert len(turns) == 1 and score == expected_sum(turns[0], str(a + b))
    assert tasks == {"sum", "guess"}
