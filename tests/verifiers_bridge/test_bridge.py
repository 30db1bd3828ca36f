"""The Verifiers bridge on classic fixtures against a scripted loopback policy (random latency,
shuffled choice order): every reward lands on its own rollout's tokens, the env's own rubric,
stop conditions and sampling args are used, failures are unverified (never 0)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from atroposlib.envs.server_handling.server_baseline import APIServerConfig
from transformers import AutoTokenizer

from environments.atropos_runtime.local_model import build_tiny_model
from environments.atropos_runtime.modes import run_evaluate, run_process
from environments.verifiers_env import VerifiersBridgeError, VerifiersEnv, VerifiersEnvConfig, load_vf_env
from tests.runtime.scripted_policy import ScriptedPolicy
from tests.verifiers_bridge.policies import (
    expected_majority,
    expected_sum,
    guess_policy,
    majority_policy,
    replies,
    sum_policy,
)

ROOT = Path(__file__).resolve().parents[2]
FIX = "tests.verifiers_bridge.fixtures."


@pytest.fixture(scope="module")
def tiny() -> Path:
    return build_tiny_model(os.environ.get("RLVR_TINY_MODEL") or ROOT / ".cache" / "tiny-model")


@pytest.fixture(scope="module")
def tok(tiny):
    return AutoTokenizer.from_pretrained(tiny)


_MADE: list[VerifiersEnv] = []  # the envs a test made, released after it (`release_envs`)


def make_env(tiny, policy, fixture: str, env_args: dict | None = None, **cfg) -> VerifiersEnv:
    cfg = {"group_size": 4, "max_token_length": 1024, "ensure_scores_are_not_same": False, **cfg}
    config = VerifiersEnvConfig(tokenizer_name=str(tiny), wandb_name="vf", use_wandb=False,
                                vf_env_name=fixture if "." in fixture else FIX + fixture, env_args=json.dumps(env_args or {}), **cfg)  # fmt: skip
    server = APIServerConfig(server_type="vllm", model_name="scripted", base_url=policy.base_url,
                             api_key="x", tokenizer_name=str(tiny), timeout=30, health_check=False)  # fmt: skip
    env = VerifiersEnv(config, [server])
    _MADE.append(env)
    return env


@pytest.fixture(autouse=True)
async def release_envs():
    """Every env a test made is closed after it (`RubricEnv.aclose`: rubric, watcher, HTTP sessions),
    as the modes close theirs; a sync test's envs are closed on the next async test's loop."""
    yield
    while _MADE:
        await _MADE.pop().aclose()


def score_mismatches(tok, group: dict, items_answer: str) -> list[int]:
    """Rollouts whose reward is not vf_sum's reward of their own decoded tokens."""
    got = replies(tok, group)
    return [
        k
        for k, (r, s) in enumerate(zip(got, group["scores"], strict=True))
        if s != expected_sum(r[-1], items_answer)
    ]


async def test_single_turn_rewards_land_on_their_own_tokens(tiny, tok):
    with ScriptedPolicy(tok, sum_policy, latency_s=(0.0, 0.05), seed=1) as policy:
        env = make_env(tiny, policy, "vf_sum")
        await env.setup()
        for item in env.train_items:
            outcome = await env.group_for(item, training=True)
            group = outcome.group
            assert group is not None, outcome.detail
            assert score_mismatches(tok, group, item.answer) == []
            assert len(set(group["scores"])) == 3  # right+tagged, wrong, right untagged: pairing matters
            for r in group["rewards"]:  # the full keyword contract reached the env's nested RubricGroup
                assert r["components"]["contract"] == 1.0 and r["components"]["num_turns"] == 1.0
        # the env's own sampling args, not the config's (temperature 1.0, max_tokens 512)
        sent = {(b["temperature"], b["max_tokens"]) for b in policy.requests}
        assert sent == {(0.5, 24)}
    assert env.drops == {} and env.statuses == {"ok": 4 * len(env.train_items)}


async def test_position_based_pairing_would_be_caught(tiny, tok):
    """The upstream bridge zipped rewards with token sequences by list position; with responses in
    shuffled order that pairs rewards with other rollouts' tokens. The check above flags it."""
    with ScriptedPolicy(tok, sum_policy, seed=2) as policy:
        env = make_env(tiny, policy, "vf_sum")
        await env.setup()
        item = env.train_items[0]
        group = (await env.group_for(item, training=True)).group
    assert score_mismatches(tok, group, item.answer) == []
    by_position = dict(group, scores=group["scores"][1:] + group["scores"][:1])
    assert score_mismatches(tok, by_position, item.answer) != []


async def test_a_raising_reward_function_is_unverified_never_zero(tiny, tok):
    with ScriptedPolicy(tok, sum_policy) as policy:
        env = make_env(tiny, policy, "vf_sum", {"raise_on": "8"})
        await env.setup()
        bad = next(it for it in env.train_items if it.answer == "8")
        rollouts, results = await env.rollout_and_score(bad, 4)
        assert all(r.score is None and r.status.value == "error" for r in results)
        assert all("correct: RuntimeError: scorer backend down for 8" in r.reason for r in results)
        outcome = await env.group_for(bad, training=True)
        assert outcome.group is None and outcome.drop == "error"
        good = next(it for it in env.train_items if it.answer != "8")
        assert (await env.group_for(good, training=True)).group is not None
    assert env.statuses["error"] == 8 and env.drops == {"error": 1}


async def test_multi_turn_env_response_and_stop_conditions(tiny, tok):
    with ScriptedPolicy(tok, guess_policy, latency_s=(0.0, 0.04), seed=3) as policy:
        env = make_env(tiny, policy, "vf_guess")
        await env.setup()
        assert env.task.turn_budget() == 4
        stops = set()
        for item in env.train_items:
            group = (await env.group_for(item, training=True)).group
            assert group is not None
            for turns, score, msgs, ep, tokens in zip(replies(tok, group), group["scores"], group["messages"],
                                                      group["episodes"], group["tokens"], strict=True):  # fmt: skip
                assert score == float(turns[-1] == item.answer)  # its own last guess, from its own tokens
                assert turns == [m["content"] for m in msgs if m["role"] == "assistant"]
                stops.add(ep["stop_reason"])
                # Verifiers' own order: max_turns_reached fires before env_response on the last turn
                solved_early = score == 1.0 and len(turns) < 4
                assert ep["stop_reason"] == (
                    "vf:has_final_env_response" if solved_early else "vf:max_turns_reached"
                )
                hints = [m["content"] for m in msgs[1:] if m["role"] == "user"]
                assert set(hints) <= {"higher", "lower"} and len(hints) == len(turns) - 1
                assert "correct" not in tok.decode(tokens)  # the final env response never reaches the policy
    assert stops == {"vf:has_final_env_response", "vf:max_turns_reached"}
    assert env.drops == {}


async def test_env_response_failure_is_unverified(tiny, tok):
    def policy_fn(text: str, index: int) -> str:
        return "banana" if "higher" in text or "lower" in text else "1"

    with ScriptedPolicy(tok, policy_fn) as policy:
        env = make_env(tiny, policy, "vf_guess")
        await env.setup()
        item = next(it for it in env.train_items if it.answer == "6")
        _, results = await env.rollout_and_score(item, 2)
    assert all(r.score is None and "not a number: 'banana'" in r.reason for r in results)


@pytest.mark.parametrize("reply", ["", "3"])
async def test_a_failing_setup_state_is_unverified(tiny, tok, reply):
    """Whether the episode stepped (a guess) or ended before any step (an empty answer)."""
    with ScriptedPolicy(tok, lambda text, i: reply) as policy:
        env = make_env(tiny, policy, "vf_guess", {"setup_fails": True})
        await env.setup()
        _, results = await env.rollout_and_score(env.train_items[0], 2)
    assert all(r.score is None and "ConnectionError: game server down" in r.reason for r in results)


async def test_group_reward_function_scores_the_whole_group(tiny, tok):
    with ScriptedPolicy(tok, majority_policy, latency_s=(0.0, 0.05), seed=4) as policy:
        env = make_env(tiny, policy, "vf_majority", group_size=6)
        await env.setup()
        seen = set()
        for item in env.train_items:
            group = (await env.group_for(item, training=True)).group
            got = [r[-1] for r in replies(tok, group)]
            assert group["scores"] == expected_majority(got, item.answer)
            seen |= set(group["scores"])
        assert seen == {0.0, 0.5, 1.0, 1.5}  # the bonus follows the group, not the item


@pytest.mark.parametrize(
    ("mode", "reason"),
    [
        ("raise", "majority: ConnectionError: majority service unreachable"),
        ("short", "returned 5 values for 6"),
    ],
)
async def test_a_failing_group_function_makes_its_group_unverified(tiny, tok, mode, reason):
    with ScriptedPolicy(tok, majority_policy) as policy:
        env = make_env(tiny, policy, "vf_majority", {"group_mode": mode}, group_size=6)
        await env.setup()
        _, results = await env.rollout_and_score(env.train_items[0], 6)
        outcome = await env.group_for(env.train_items[1], training=True)
    assert all(r.score is None and reason in r.reason for r in results)
    assert outcome.group is None and outcome.drop == "error"


async def test_process_and_evaluate_write_their_files(tiny, tok, tmp_path):
    with ScriptedPolicy(tok, sum_policy) as policy:
        env = make_env(tiny, policy, "vf_sum", {"raise_on": "17"}, total_steps=6,
                       data_path_to_save_groups=str(tmp_path / "groups.jsonl"),
                       data_dir_to_save_evals=str(tmp_path / "eval"))  # fmt: skip
        await run_process(env)
        await env.setup()  # process closed the rubric (the CLI runs each mode in its own process)
        metrics = await run_evaluate(env)
    groups = [json.loads(line) for line in (tmp_path / "groups.jsonl").read_text().splitlines()]
    assert len(groups) == 5  # the raising item's group is dropped, never written with zeros
    for g in groups:
        answer = next(it.answer for it in env.train_items if it.uid == g["item_uid"])
        assert score_mismatches(tok, g, answer) == []
    samples = [json.loads(line) for line in (tmp_path / "eval" / "samples.jsonl").read_text().splitlines()]
    assert len(samples) == 3 and metrics["eval/n_unverified"] == 1
    assert [s["status"] for s in samples if s["gold"] == "17"] == ["error"]


async def test_evaluate_with_every_sample_unverified_still_writes_its_files(tiny, tok, tmp_path):
    with ScriptedPolicy(tok, sum_policy) as policy:
        env = make_env(tiny, policy, "vf_sum", {"raise_on": "*"}, data_dir_to_save_evals=str(tmp_path))
        await env.setup()
        metrics = await run_evaluate(env)
    assert metrics["eval/n_unverified"] == 3 and metrics["eval/accuracy"] is None
    samples = [json.loads(line) for line in (tmp_path / "samples.jsonl").read_text().splitlines()]
    assert [s["score"] for s in samples] == [None] * 3 and json.loads((tmp_path / "metrics.json").read_text())


def test_refusals_are_loud():  # tool envs the bridge cannot serve: tests/verifiers_bridge/test_tools.py
    with pytest.raises(VerifiersBridgeError, match="JSON object"):
        load_vf_env(FIX + "vf_sum", "[1]")
    with pytest.raises(VerifiersBridgeError, match="vf_env_name is required"):
        load_vf_env("", "{}")


async def test_our_own_verifiers_front_door_runs_through_the_bridge(tiny, tok):
    """The project's qa env as a Verifiers env (`environments.qa_env.load_environment`), bridged."""
    golds = {}
    for line in (ROOT / "environments" / "data" / "qa_default.jsonl").read_text().splitlines():
        row = json.loads(line)
        golds[row["question"]] = row["answer"][0] if isinstance(row["answer"], list) else row["answer"]

    def qa_policy(text: str, index: int) -> str:
        question = max((q for q in golds if q in text), key=len)
        return f"<answer>{golds[question]}</answer>" if index % 2 == 0 else "<answer>nope</answer>"

    with ScriptedPolicy(tok, qa_policy, latency_s=(0.0, 0.03), seed=5) as policy:
        env = make_env(tiny, policy, "environments.qa_env", train_limit=4)
        await env.setup()
        for item in env.train_items[:4]:
            group = (await env.group_for(item, training=True)).group
            for turns, score in zip(replies(tok, group), group["scores"], strict=True):
                assert score == (0.0 if "nope" in turns[-1] else 1.0)
            assert sorted(group["scores"]) == [0.0, 0.0, 1.0, 1.0]


def test_process_from_the_command_line(tiny, tok, tmp_path):
    import subprocess
    import sys

    with ScriptedPolicy(tok, sum_policy) as policy:
        cmd = [sys.executable, str(ROOT / "environments" / "verifiers_env.py"), "process",
               "--env.vf_env_name", FIX + "vf_sum", "--env.env_args", '{"raise_on": "8"}',
               "--env.tokenizer_name", str(tiny), "--openai.model_name", "scripted",
               "--openai.base_url", policy.base_url, "--env.group_size", "4", "--env.total_steps", "6",
               "--env.ensure_scores_are_not_same", "false",
               "--env.data_path_to_save_groups", str(tmp_path / "g.jsonl")]  # fmt: skip
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=300, cwd=ROOT,
                              env=dict(os.environ, PYTHONPATH=str(ROOT)))  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    groups = [json.loads(line) for line in (tmp_path / "g.jsonl").read_text().splitlines()]
    assert len(groups) == 5 and "dropped         {'error': 1}" in done.stdout
