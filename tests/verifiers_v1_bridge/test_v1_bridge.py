"""The v1 bridge end to end: `environments/verifiers_env.py process|evaluate|serve` on v1 fixture
Tasksets, run by the CLI in the verifiers 0.4.0 venv (the matrix's, built here when missing: never
skipped), with the real v1 Env + null harness program (a uv script resolved offline from the local
harness index), our loopback endpoint and a scripted token policy with random latency. Every score
must be the fixture's reward of that rollout's own decoded tokens."""

from __future__ import annotations

import functools
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from transformers import AutoTokenizer

from environments.atropos_runtime.local_model import build_tiny_model
from tests.integration.test_modes_on_vllm import register_trainer, take_batches
from tests.runtime.scripted_policy import ScriptedPolicy
from tests.verifiers_bridge.policies import assistant_runs
from tests.verifiers_v1_bridge.policies import (
    FEEDBACK,
    RetryPolicy,
    SumPolicy,
    mismatches,
    retry_reward,
    sum_reward,
)

pytestmark = pytest.mark.slow  # each runs the bridge's CLI with a real v1 harness program
ROOT = Path(__file__).resolve().parents[2]
FIXTURES = Path(__file__).resolve().parent / "fixtures"
BRIDGE = ROOT / "environments" / "verifiers_env.py"


@functools.cache
def venv_for(version: str) -> tuple[Path, dict[str, str]]:
    """The matrix's venv of a v1 verifiers version (built when missing) and the env to run the CLI in it."""
    sys.path.insert(0, str(ROOT / "scripts"))
    try:
        import verifiers_matrix
    finally:
        sys.path.remove(str(ROOT / "scripts"))
    venv, env = verifiers_matrix.v1_bridge_venv(version)
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), str(FIXTURES)])
    return venv, env


@pytest.fixture(scope="module")
def v1_venv() -> tuple[Path, dict[str, str]]:
    return venv_for("0.4.0")


@pytest.fixture(scope="module")
def tiny() -> Path:
    return build_tiny_model(os.environ.get("RLVR_TINY_MODEL") or ROOT / ".cache" / "tiny-model")


@pytest.fixture(scope="module")
def tok(tiny):
    return AutoTokenizer.from_pretrained(tiny)


def bridge_cmd(venv: Path, mode: str, fixture: str, model: str, base_url: str, *flags: str,
               served: str = "scripted") -> list[str]:  # fmt: skip
    """The bridge's command line; `model` is the tokenizer, `served` the model the server lists."""
    return [str(venv / "bin" / "python"), str(BRIDGE), mode, "--env.vf_env_name", fixture,
            "--env.tokenizer_name", model, "--openai.model_name", served, "--openai.base_url", base_url,
            "--env.max_tokens", "16", *flags]  # fmt: skip


def run_bridge(
    v1_venv, mode: str, fixture: str, policy, tiny, *flags: str, env: dict | None = None, rc: int = 0
):
    venv, base = v1_venv
    cmd = bridge_cmd(venv, mode, fixture, str(tiny), policy.base_url, *flags)
    done = subprocess.run(
        cmd, capture_output=True, text=True, timeout=300, cwd=ROOT, env={**base, **(env or {})}
    )
    assert done.returncode == rc, done.stdout[-2000:] + done.stderr[-4000:]
    return done


def groups_of(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


@pytest.mark.parametrize("version", ["0.4.0", "0.3.1"])
def test_process_single_turn_rewards_land_on_their_own_tokens(version, tiny, tok, tmp_path):
    out = tmp_path / "groups.jsonl"
    with ScriptedPolicy(tok, SumPolicy(), latency_s=(0.0, 0.05), seed=1) as policy:
        done = run_bridge(venv_for(version), "process", "vfv1_sum", policy, tiny, "--env.group_size", "4",
                          "--env.total_steps", "3", "--env.env_args", '{"task": {"raise_on": "8"}}',
                          "--env.data_path_to_save_groups", str(out))  # fmt: skip
    groups = groups_of(out)
    assert len(groups) == 2 and all(g["tokens_exact"] for g in groups)  # the raising task's group is dropped
    for g in groups:
        assert mismatches(tok, g, sum_reward) == []
        assert sorted(g["scores"]) == [0.0, 0.0, 1.0, 1.0]  # the policy alternates: pairing matters
        # a position-paired variant (rewards rotated by one) is caught by the same check
        assert mismatches(tok, dict(g, scores=g["scores"][1:] + g["scores"][:1]), sum_reward) != []
        assert g["generation_params"]["temperature"] == 1.0
        for ep in g["episodes"]:
            assert len(ep["turns"]) == 1 and ep["stop_reason"].startswith("v1:")
    assert {(b["temperature"], b["max_tokens"]) for b in policy.requests} == {(1.0, 16)}  # the run's own
    # the raising v1 reward (TaskError, ok=False) made its 4 rollouts unverified, counted, never 0
    summary = json.loads(out.with_suffix(".summary.json").read_text())
    assert summary["reward_status"] == {"ok": 8, "error": 4} and summary["dropped"] == {"error": 1}
    assert "scorer backend down for 8" in done.stderr


def test_process_multi_turn_feedback_episodes(v1_venv, tiny, tok, tmp_path):
    out = tmp_path / "groups.jsonl"
    with ScriptedPolicy(tok, RetryPolicy(), latency_s=(0.0, 0.05), seed=2) as policy:
        run_bridge(v1_venv, "process", "vfv1_retry", policy, tiny, "--env.group_size", "3", "--env.total_steps",
                   "3", "--env.max_concurrent_rollouts", "2", "--env.data_path_to_save_groups", str(out))  # fmt: skip
    # 3 groups of 3 in flight put up to 9 episodes' calls at the policy at once (3 seen without the cap);
    # the cap holds it to 2 (how many overlap below that depends on the random latencies)
    assert 1 <= policy.peak_in_flight <= 2
    groups = groups_of(out)
    assert len(groups) == 3
    for g in groups:
        assert mismatches(tok, g, retry_reward) == []
        turns = sorted(len(assistant_runs(t, m)) for t, m in zip(g["tokens"], g["masks"], strict=True))
        assert turns == [1, 2, 3] and sorted(g["scores"]) == [0.0, 1.0, 1.0]
        for tokens, msgs in zip(g["tokens"], g["messages"], strict=True):
            users = [m["content"] for m in msgs if m["role"] == "user"]
            assert users[1:] == [FEEDBACK] * (len(users) - 1)  # the v1 env's feedback, as the policy saw it
            assert tok.decode(tokens).count(FEEDBACK) == len(users) - 1


def test_evaluate_writes_its_files_and_counts_harness_failures(v1_venv, tiny, tok, tmp_path):
    with ScriptedPolicy(tok, SumPolicy()) as policy:
        run_bridge(
            v1_venv,
            "evaluate",
            "vfv1_sum",
            policy,
            tiny,
            "--env.data_dir_to_save_evals",
            str(tmp_path / "ok"),
        )
        empty = tmp_path / "no-index"
        empty.mkdir()
        run_bridge(v1_venv, "evaluate", "vfv1_sum", policy, tiny, "--env.data_dir_to_save_evals", str(tmp_path / "down"),
                   env={"UV_DEFAULT_INDEX": f"file://{empty}", "UV_OFFLINE": "1",
                        "UV_CACHE_DIR": str(tmp_path / "uv")})  # fmt: skip
    assert {b["temperature"] for b in policy.requests} == {0.0}  # eval_temperature
    samples = groups_of(tmp_path / "ok" / "samples.jsonl")
    metrics = json.loads((tmp_path / "ok" / "metrics.json").read_text())
    assert len(samples) == 3 and all(s["status"] == "ok" and s["turns"] == 1 for s in samples)
    for s in samples:
        a, b = map(int, s["messages"][0]["content"].split("?")[0].removeprefix("What is ").split(" + "))
        assert s["score"] == float(s["messages"][-1]["content"] == str(a + b))
    assert (
        metrics["results"]["all"]["eval/n_samples"] == 3
        and metrics["results"]["all"]["eval/n_unverified"] == 0
    )
    # no package index for the harness program: every rollout is a HarnessError, unverified (never 0)
    down = groups_of(tmp_path / "down" / "samples.jsonl")
    assert [s["score"] for s in down] == [None] * 3 and all("v1 HarnessError" in s["reason"] for s in down)
    down_metrics = json.loads((tmp_path / "down" / "metrics.json").read_text())["results"]["all"]
    assert down_metrics["eval/n_unverified"] == 3 and down_metrics["eval/status/error"] == 3


def test_serve_delivers_v1_groups_to_a_trainer(v1_venv, tiny, tok, run_api, tmp_path):
    register_trainer(run_api, batch_size=4, max_token_len=1024)
    venv, env = v1_venv
    log = open(tmp_path / "serve.log", "w")  # noqa: SIM115
    with ScriptedPolicy(tok, SumPolicy(), latency_s=(0.0, 0.05), seed=3) as policy:
        cmd = bridge_cmd(venv, "serve", "vfv1_sum", str(tiny), policy.base_url, "--env.rollout_server_url", run_api,
                         "--env.group_size", "4", "--env.total_steps", "2", "--env.include_messages", "true",
                         "--env.ensure_scores_are_not_same", "false")  # fmt: skip
        proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env, cwd=ROOT)
        try:
            batches = take_batches(run_api, 2, proc, timeout_s=240)
        finally:
            proc.terminate()
            proc.wait(timeout=30)
    assert len(batches) == 2, (tmp_path / "serve.log").read_text()[-3000:]
    for batch in batches:
        for g in batch:
            assert mismatches(tok, g, sum_reward) == [] and sorted(g["scores"]) == [0.0, 0.0, 1.0, 1.0]
            for tokens, masks, lps in zip(g["tokens"], g["masks"], g["inference_logprobs"], strict=True):
                assert len(tokens) == len(masks) == len(lps)
                assert all(lp == 1.0 for lp, m in zip(lps, masks, strict=True) if m == -100)


def test_an_inference_outage_fails_the_group_never_scores_it(v1_venv, tiny, tok, tmp_path):
    out = tmp_path / "groups.jsonl"
    with ScriptedPolicy(tok, SumPolicy()) as policy:
        policy.fail_when = lambda text: True  # every sample answers HTTP 500
        done = run_bridge(v1_venv, "process", "vfv1_sum", policy, tiny, "--env.group_size", "2",
                          "--env.total_steps", "1", "--env.data_path_to_save_groups", str(out), rc=1)  # fmt: skip
    assert done.stderr.strip().splitlines()[-1].startswith("verifiers-v1 process: no group was written")
    summary = json.loads(out.with_suffix(".summary.json").read_text())
    assert summary["groups_in_file"] == 0 and summary["dropped"] == {"error": 1}
    assert summary["reward_status"] == {}  # nothing was scored: not unverified, not 0
    assert "2 of 2 rollouts lost model calls: inference failed" in done.stderr


def test_our_own_hub_package_runs_through_the_v1_bridge(v1_venv, tiny, tok, tmp_path):
    """rlvr-math's v1 door (`MathTaskset`, the project rubric inside a v1 reward) in evaluate."""
    from environments.math_env import MathEnvConfig, MathTask

    items, _ = MathTask(MathEnvConfig()).items("eval")
    gold = {it.prompt[-1]["content"]: str(it.answer) for it in items}
    seen: list[str] = []

    def policy_fn(text: str, index: int) -> str:
        question = next(q for q in gold if q in text)
        seen.append(question)
        return f"\\boxed{{{gold[question]}}}" if len(seen) % 2 else "\\boxed{7.5}"

    venv, env = v1_venv
    env = dict(env, PYTHONPATH=os.pathsep.join([env["PYTHONPATH"], str(ROOT / "environments" / "rlvr_math")]))
    with ScriptedPolicy(tok, policy_fn) as policy:
        run_bridge((venv, env), "evaluate", "rlvr-math", policy, tiny, "--env.eval_limit", "4",
                   "--env.max_tokens", "32", "--env.data_dir_to_save_evals", str(tmp_path))  # fmt: skip
    samples = groups_of(tmp_path / "samples.jsonl")
    assert len(samples) == 4 and all(s["status"] == "ok" for s in samples)
    for s in samples:
        question = next(m["content"] for m in s["messages"] if m["role"] == "user")
        assert s["score"] == float(s["messages"][-1]["content"] == f"\\boxed{{{gold[question]}}}")
    assert sorted(s["score"] for s in samples) == [0.0, 0.0, 1.0, 1.0]
