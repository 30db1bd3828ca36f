"""Start-up tells the truth, in one line and a non-zero exit, before any group is sampled: a missing
command, a model the server does not serve, a tokenizer that encodes differently from the served
model, a judge that is down."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from transformers import AutoTokenizer

from environments.atropos_runtime.local_model import build_tiny_tokenizer, free_port
from tests.runtime.scripted_policy import ScriptedPolicy

ROOT = Path(__file__).resolve().parents[2]


def run(script: str, *args: str, cwd: Path) -> subprocess.CompletedProcess:
    argv = [sys.executable, str(ROOT / "environments" / script), *args]
    env = dict(os.environ, PYTHONPATH=str(ROOT), WANDB_MODE="disabled")
    return subprocess.run(argv, capture_output=True, text=True, cwd=cwd, env=env, timeout=300)


def last_line(proc: subprocess.CompletedProcess) -> str:
    return proc.stderr.strip().splitlines()[-1]


@pytest.mark.parametrize("args", [[], ["serv"]])
def test_a_missing_or_unknown_command_prints_usage(args, tmp_path):
    proc = run("qa_env.py", *args, cwd=tmp_path)
    assert proc.returncode == 2
    assert proc.stderr.startswith("usage: qa_env.py {serve,process,evaluate}")
    assert ("unknown command 'serv'" if args else "a command is required") in last_line(proc)


def test_a_model_the_server_does_not_serve_is_refused(tiny_model, tmp_path):
    tok = AutoTokenizer.from_pretrained(tiny_model)
    with ScriptedPolicy(tok, lambda _p, _i: "Paris", model="served-model") as policy:
        proc = run("qa_env.py", "process", "--env.tokenizer_name", str(tiny_model), "--openai.model_name",
                   "Qwen/not-served", "--openai.base_url", policy.base_url, "--env.total_steps", "1",
                   "--env.data_path_to_save_groups", str(tmp_path / "g.jsonl"), cwd=tmp_path)  # fmt: skip
        requests = list(policy.requests)
    assert proc.returncode != 0
    assert last_line(proc) == (
        f"the inference server at {policy.base_url} does not serve model 'Qwen/not-served'; it serves "
        "'served-model' (set --openai.model_name)"
    )
    assert requests == [] and not (tmp_path / "g.jsonl").exists()  # nothing sampled, nothing written


def test_a_judge_that_is_down_is_named_at_start(tiny_model, tmp_path):
    tok = AutoTokenizer.from_pretrained(tiny_model)
    judge_url = f"http://127.0.0.1:{free_port()}/v1"  # nothing listens there
    with ScriptedPolicy(tok, lambda _p, _i: "an answer") as policy:
        proc = run("judge_env.py", "process", "--env.tokenizer_name", str(tiny_model), "--openai.model_name",
                   "scripted", "--openai.base_url", policy.base_url, "--env.judge_base_url", judge_url,
                   "--env.total_steps", "1", "--env.data_path_to_save_groups", str(tmp_path / "g.jsonl"),
                   cwd=tmp_path)  # fmt: skip
        sampled = len(policy.requests)
    assert proc.returncode != 0
    line = last_line(proc)
    assert line.startswith(f"judge: the rubric cannot score: judge endpoint {judge_url} is unreachable"), line
    assert line.endswith("(set --env.judge_base_url and --env.judge_model to a running judge)"), line
    assert sampled == 0


@pytest.mark.slow
def test_a_tokenizer_that_differs_from_the_served_model_is_refused(vllm_server, tmp_path):
    other = tmp_path / "other-tokenizer"
    build_tiny_tokenizer(1024, seed=1).save_pretrained(other)
    proc = run("qa_env.py", "process", "--env.tokenizer_name", str(other), "--openai.model_name", vllm_server.model,
               "--openai.base_url", vllm_server.base_url, "--env.total_steps", "1",
               "--env.data_path_to_save_groups", str(tmp_path / "g.jsonl"), cwd=tmp_path)  # fmt: skip
    assert proc.returncode != 0
    line = last_line(proc)
    assert line.startswith(f"--env.tokenizer_name {other} does not match the model {vllm_server.model!r}"), (
        line
    )
    assert not (tmp_path / "g.jsonl").exists()


def test_help_shows_the_defaults_a_run_uses(tmp_path):
    short = run("qa_env.py", "process", "--help", cwd=tmp_path)
    full = run("qa_env.py", "process", "--help-all", cwd=tmp_path)
    assert short.returncode == 0 and full.returncode == 0
    text = short.stdout
    for line in ("--env.group_size = 8", "--env.use_wandb = False", "--env.total_steps = 16",
                 "--openai.server_type = 'vllm'", "--env.question_field = 'question'", "example:"):  # fmt: skip
        assert line in text, line
    assert text.index("qa options:") < text.index("runtime options:") < text.index("atroposlib options")
    assert len(text.splitlines()) < 120 < len(full.stdout.splitlines())
    assert "--env.max_num_workers" in full.stdout and "--env.max_num_workers" not in text
    assert "Field(annotation" not in text + full.stdout


def test_serve_refuses_a_group_of_one(tmp_path):
    proc = run("qa_env.py", "serve", "--env.group_size", "1", cwd=tmp_path)
    assert proc.returncode != 0
    assert last_line(proc).startswith("--env.group_size 1 can never give a group to train on")


def test_process_honours_max_token_length_and_fails_when_it_wrote_nothing(tiny_model, tmp_path):
    tok = AutoTokenizer.from_pretrained(tiny_model)
    out = tmp_path / "g.jsonl"
    with ScriptedPolicy(tok, lambda _p, i: f"Paris {i}") as policy:
        proc = run("qa_env.py", "process", "--env.tokenizer_name", str(tiny_model), "--openai.model_name", "scripted",
                   "--openai.base_url", policy.base_url, "--env.total_steps", "3", "--env.group_size", "2",
                   "--env.max_token_length", "8", "--env.data_path_to_save_groups", str(out), cwd=tmp_path)  # fmt: skip
    assert proc.returncode != 0
    assert last_line(proc).startswith("qa process: no group was written (dropped: {'too_long': 3}")
    assert out.with_suffix(".summary.json").exists() and out.with_suffix(".html").exists()


def test_a_run_whose_groups_all_drop_for_one_reason_stops_with_its_summary(tiny_model, tmp_path):
    tok = AutoTokenizer.from_pretrained(tiny_model)
    out = tmp_path / "g.jsonl"
    with ScriptedPolicy(tok, lambda _p, i: f"Paris {i}") as policy:
        proc = run("qa_env.py", "process", "--env.tokenizer_name", str(tiny_model), "--openai.model_name", "scripted",
                   "--openai.base_url", policy.base_url, "--env.total_steps", "200", "--env.group_size", "2",
                   "--env.max_token_length", "8", "--env.max_concurrent_groups", "2",
                   "--env.data_path_to_save_groups", str(out), cwd=tmp_path)  # fmt: skip
        asked = len(policy.requests)
    assert proc.returncode != 0
    assert "the first 20 groups were all dropped (too_long" in last_line(proc), last_line(proc)
    summary = json.loads(out.with_suffix(".summary.json").read_text())
    assert summary["groups_new"] == 0 and summary["stopped"].startswith("qa process: the first 20 groups")
    assert asked < 100  # it stopped, it did not sample all 200 groups


@pytest.mark.parametrize("given", [["true"], [], ["false"]])
def test_process_drops_identical_scores_only_when_asked(tiny_model, tmp_path, given):
    """serve drops a group whose scores are all equal (no GRPO signal) by default; process keeps every
    group unless `--env.ensure_scores_are_not_same true` is given, then drops it as `identical_scores`,
    in the dropped file and the summary like any other drop."""
    tok = AutoTokenizer.from_pretrained(tiny_model)
    data, out = tmp_path / "qa.jsonl", tmp_path / "g.jsonl"
    data.write_text('{"id": "fr", "question": "What is the capital of France?", "answer": "Paris"}\n'
                    '{"id": "jp", "question": "What is the capital of Japan?", "answer": "Tokyo"}\n')  # fmt: skip

    def answer(prompt: str, i: int) -> str:  # France: 1 right of 2 (scores differ); Japan: both wrong
        return "<answer>Paris</answer>" if "France" in prompt and i == 0 else "<answer>no</answer>"

    option = [arg for value in given for arg in ("--env.ensure_scores_are_not_same", value)]
    with ScriptedPolicy(tok, answer) as policy:
        proc = run("qa_env.py", "process", "--env.tokenizer_name", str(tiny_model), "--openai.model_name", "scripted",
                   "--openai.base_url", policy.base_url, "--env.dataset", str(data), "--env.eval_fraction", "0",
                   "--env.total_steps", "2", "--env.group_size", "2", "--env.data_path_to_save_groups", str(out),
                   *option, cwd=tmp_path)  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-2000:]
    written = [json.loads(line) for line in out.read_text().splitlines()]
    dropped_path = out.with_suffix(".dropped.jsonl")
    dropped = (
        [json.loads(line) for line in dropped_path.read_text().splitlines()] if dropped_path.exists() else []
    )
    summary = json.loads(out.with_suffix(".summary.json").read_text())
    if given == ["true"]:
        assert [g["item_uid"] for g in written] == ["fr"] and sorted(written[0]["scores"]) == [0.0, 1.0]
        assert [(d["item_uid"], d["reason"]) for d in dropped] == [("jp", "identical_scores")]
        assert dropped[0]["detail"] == "all 2 scores are 0.0" and len(dropped[0]["samples"]) == 2
        assert summary["dropped"] == {"identical_scores": 1} and summary["groups_new"] == 1
    else:  # the default (and `false`): every group is written, identical scores included
        assert sorted(g["item_uid"] for g in written) == ["fr", "jp"]
        assert dropped == [] and summary["dropped"] == {} and summary["groups_new"] == 2
