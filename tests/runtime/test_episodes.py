"""Multi-turn episodes on a scripted loopback policy: exact tokens, invariants, identity, stops."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from atroposlib.envs.server_handling.server_baseline import APIServerConfig
from transformers import AutoTokenizer

from environments.atropos_runtime.local_model import build_tiny_model
from tests.runtime.guess_env import GuessConfig, GuessEnv, binary_search_policy
from tests.runtime.scripted_policy import ScriptedPolicy

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def tiny() -> Path:
    return build_tiny_model(os.environ.get("RLVR_TINY_MODEL") or ROOT / ".cache" / "tiny-model")


@pytest.fixture(scope="module")
def tok(tiny):
    return AutoTokenizer.from_pretrained(tiny)


@pytest.fixture
def policy(tok):
    with ScriptedPolicy(tok, binary_search_policy) as server:
        yield server


def make_env(tiny, policy, server_type="vllm", **env_kwargs) -> GuessEnv:
    env_kwargs = {"group_size": 4, "tokenizer_name": str(tiny), **env_kwargs}
    config = GuessConfig(wandb_name="guess", use_wandb=False, max_token_length=1024,
                         ensure_scores_are_not_same=False, **env_kwargs)  # fmt: skip
    server = APIServerConfig(server_type=server_type, model_name="scripted", base_url=policy.base_url,
                             api_key="x", tokenizer_name=str(tiny), timeout=30, health_check=False)  # fmt: skip
    return GuessEnv(config, [server])


def target(env: GuessEnv, answer: str):
    return next(item for item in env.train_items if item.answer == answer)


def last_guess(messages) -> str:
    return next(m["content"] for m in reversed(messages) if m["role"] == "assistant")


async def test_groups_carry_exact_tokens_and_their_own_rewards(tiny, tok, policy):
    env = make_env(tiny, policy, max_turns=2)
    await env.setup()
    seen_scores = set()
    for item in env.train_items:
        outcome = await env.group_for(item, training=True)
        group = outcome.group
        assert group is not None, outcome.detail
        for tokens, masks, lps, msgs, score, ep in zip(group["tokens"], group["masks"], group["inference_logprobs"],
                                                        group["messages"], group["scores"], group["episodes"],
                                                        strict=True):  # fmt: skip
            # the reward is this episode's own: its last guess against the item's target
            assert score == float(last_guess(msgs) == item.answer)
            seen_scores.add(score)
            # the whole sequence is the conversation as the template renders it (no doubled <|im_end|>)
            assert tok.decode(tokens) + "\n" == tok.apply_chat_template(msgs, tokenize=False)
            assert "<|im_end|><|im_end|>" not in tok.decode(tokens)
            trained = [t for t, m in zip(tokens, masks, strict=True) if m != -100]
            assert trained == [t for turn in ep["turns"] for t in turn["tokens"]]
            assert [lp for lp, m in zip(lps, masks, strict=True) if m != -100] == [
                lp for turn in ep["turns"] for lp in turn["logprobs"]
            ]
            assert all(lp == 1.0 for lp, m in zip(lps, masks, strict=True) if m == -100)
            assert len(ep["turns"]) == sum(m["role"] == "assistant" for m in msgs) <= 2
            assert ep["stop_reason"] == ("solved" if score == 1.0 else "max_turns")
    assert seen_scores == {0.0, 1.0}
    assert env.drops == {} and env.groups_ok == len(env.train_items)
    sessions = [s._http for s in env.server.servers]
    assert sessions and all(s is not None and not s.closed for s in sessions)
    await env.aclose()  # the rubric, the watcher and the token path's sessions
    assert env.rubric is None and all(s.closed for s in sessions)
    assert all(s._http is None for s in env.server.servers)
    await env.aclose()  # idempotent


async def test_a_slow_episode_does_not_hold_back_the_others(tiny, policy):
    from tests.runtime.guess_env import _assistant_turns

    env = make_env(tiny, policy, max_turns=3, group_size=2, request_timeout_s=30)
    await env.setup()
    # episode A (first guess 1) gets its 2nd turn only once episode B (first guess 4) asks for its 3rd
    policy.hold(
        lambda text: _assistant_turns(text) == ["1"], until=lambda text: _assistant_turns(text) == ["4", "6"]
    )
    rollouts, results = await env.rollout_and_score(target(env, "8"), 2)
    assert all(r.verified for r in results) and policy.holds[0][2].is_set()
    assert sorted(len(r.episode.turns) for r in rollouts) == [3, 3]
    # the two episodes' 2nd turns went out as one streamed request: A's held answer did not hold B's
    assert any(r.get("stream") and len(r["prompt"]) == 2 for r in policy.requests)
    await env.aclose()


async def test_episode_stops_on_success_and_turn_budget(tiny, policy):
    env = make_env(tiny, policy, max_turns=4)
    await env.setup()
    episodes = [
        ep for item in env.train_items for ep in (await env.group_for(item, training=False)).group["episodes"]
    ]
    assert {ep["stop_reason"] for ep in episodes} == {"solved"}  # bisection over 1..8 needs at most 4 guesses
    assert max(len(ep["turns"]) for ep in episodes) > 1
    for ep in episodes:
        assert [t["info"]["solved"] for t in ep["turns"]] == [False] * (len(ep["turns"]) - 1) + [True]
        assert ep["turns"][-1]["env_messages"] == [] and ep["turns"][-1]["env_tokens"] is None
    await env.aclose()


async def test_truncated_turn_zeroes_the_advantage(tiny, tok, policy):
    policy.answer = lambda text, i: "7 " * 40 if "higher" in text or "lower" in text else str(1 + i)
    env = make_env(tiny, policy, max_turns=3, max_tokens=12)
    await env.setup()
    group = (await env.group_for(target(env, "8"), training=True)).group  # every first guess is wrong
    assert group is not None
    assert group["overrides"] == [{"set_advantage_to_zero": True}] * 4
    assert all(ep["stop_reason"] == "truncated" and ep["turns"][-1]["finish_reason"] == "length"
               for ep in group["episodes"])  # fmt: skip
    await env.aclose()


async def test_token_budget_ends_the_episode_below_it(tiny, policy):
    env = make_env(tiny, policy, max_turns=4, max_episode_tokens=60, feedback_text=" and try again " * 3)
    await env.setup()
    group = (await env.group_for(target(env, "8"), training=False)).group
    stops = {ep["stop_reason"] for ep in group["episodes"]}
    assert stops <= {"token_budget", "truncated", "solved"} and "token_budget" in stops
    assert all(len(t) < 60 for t in group["tokens"])
    await env.aclose()


async def test_a_prompt_longer_than_the_budget_drops_the_group_with_a_reason(tiny, policy):
    env = make_env(tiny, policy, max_episode_tokens=10)
    await env.setup()
    outcome = await env.group_for(target(env, "8"), training=True)
    assert (
        outcome.group is None
        and outcome.drop == "error"
        and "leaves no room in the token budget" in outcome.detail
    )
    await env.aclose()


async def test_environment_failure_is_unverified_counted_and_dropped(tiny, policy):
    env = make_env(tiny, policy, max_turns=3, fail_on_turn=2)
    await env.setup()
    outcome = await env.group_for(target(env, "8"), training=True)
    assert (
        outcome.group is None and outcome.drop == "error" and "environment backend is down" in outcome.detail
    )
    assert env.statuses["error"] == 4 and env.drops["error"] == 1
    assert env._episode_runner.stops["env_error"] == 4
    await env.aclose()


async def test_a_message_the_template_refuses_makes_the_episode_unverified(tiny, tok, policy, tmp_path):
    from tests.runtime.test_turn_tokens import TOOL_TEMPLATE

    strict = (
        tmp_path / "strict-tokenizer"
    )  # the model's tokenizer with a template that refuses orphan tool results
    tok.save_pretrained(strict)
    (strict / "chat_template.jinja").write_text(TOOL_TEMPLATE)
    env = make_env(tiny, policy, max_turns=3, feedback_role="tool", tokenizer_name=str(strict))
    await env.setup()
    rollouts, results = await env.rollout_and_score(target(env, "8"), 2)
    assert all(r.score is None and "environment turn cannot be tokenised" in r.reason for r in results), (
        results
    )
    assert all(r.episode.stop_reason == "env_error" for r in rollouts)
    await env.aclose()


async def test_inference_outage_mid_episode_is_unverified_not_zero(tiny, policy):
    env = make_env(tiny, policy, max_turns=3, request_timeout_s=8.0)
    await env.setup()
    policy.fail_when = lambda text: "higher" in text  # turn 2 never gets an answer (the client retries)
    rollouts, results = await env.rollout_and_score(target(env, "8"), 2)
    assert [r.score for r in results] == [None, None]
    # the client's retries end in an error or in the turn's timeout, whichever comes first
    assert all(r.reason.startswith(("inference failed", "inference took longer than 8.0s")) for r in results)
    assert all(len(r.episode.turns) == 1 for r in rollouts)
    await env.aclose()


async def test_an_inference_error_mid_episode_is_reported_in_the_servers_words(tiny, policy):
    env = make_env(tiny, policy, max_turns=3, request_timeout_s=120.0)
    await env.setup()
    policy.fail_when = lambda text: "higher" in text  # turn 2: HTTP 500 {"error": "scripted outage"}
    _rollouts, results = await env.rollout_and_score(target(env, "8"), 1)
    (result,) = results
    assert result.score is None and result.reason.startswith("inference failed: InferenceError: "), (
        result.reason
    )
    assert "500" in result.reason and "scripted outage" in result.reason and "RetryError" not in result.reason
    await env.aclose()


async def test_process_writes_every_turn_and_evaluate_reports_turns(tiny, tok, policy, tmp_path):
    from environments.atropos_runtime.modes import run_evaluate, run_process

    out = tmp_path / "groups.jsonl"
    env = make_env(tiny, policy, max_turns=3, total_steps=4, data_path_to_save_groups=str(out),
                   data_dir_to_save_evals=str(tmp_path / "eval"))  # fmt: skip
    summary = await run_process(env)
    assert summary["groups_in_file"] == 4
    groups = [json.loads(line) for line in out.read_text().splitlines()]
    for g in groups:
        for tokens, ep in zip(g["tokens"], g["episodes"], strict=True):
            ids = [t for turn in ep["turns"] for t in turn["tokens"] + (turn["env_tokens"] or [])]
            assert tokens[-len(ids) :] == ids  # every turn's exact ids, in order, after the prompt
    page = (tmp_path / "groups.html").read_text()
    assert "higher" in page or "lower" in page
    env = make_env(tiny, policy, max_turns=3, data_dir_to_save_evals=str(tmp_path / "eval"))
    await env.setup()
    metrics = await run_evaluate(env)
    await env.aclose()
    assert metrics["eval/n_samples"] == 8 and 1 <= metrics["eval/turns_mean"] <= 3
    assert 0 <= metrics["eval/turn1/solved"] < metrics["eval/turn2/solved"] <= 1
    samples = [json.loads(line) for line in (tmp_path / "eval" / "samples.jsonl").read_text().splitlines()]
    assert all(s["turns"] == sum(m["role"] == "assistant" for m in s["messages"]) for s in samples)


async def test_text_only_server_runs_episodes_without_tokens(tiny, policy):
    env = make_env(tiny, policy, server_type="openai", max_turns=4)
    await env.setup()
    group = (await env.group_for(target(env, "6"), training=False)).group
    assert group["tokens"] == [] and group["inference_logprobs"] is None
    assert {ep["stop_reason"] for ep in group["episodes"]} == {"solved"}
    await env.aclose()
