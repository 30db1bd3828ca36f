"""The math env through the real runtime (process / evaluate) on a real vLLM serving the tiny model."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow
ROOT = Path(__file__).resolve().parents[2]
MATH = ROOT / "environments" / "math_env.py"


def run_env(mode: str, vllm, *flags: str) -> subprocess.CompletedProcess:
    cmd = [sys.executable, str(MATH), mode, "--env.tokenizer_name", vllm.model, "--openai.model_name", vllm.model,
           "--openai.base_url", vllm.base_url, "--env.max_tokens", "16", "--env.rg_train_size", "40",
           "--env.rg_eval_size", "6", *flags]  # fmt: skip
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    return subprocess.run(cmd, capture_output=True, text=True, timeout=600, env=env, cwd=ROOT)


def test_process_scores_groups_with_the_math_rubric(vllm_server, tmp_path):
    out = tmp_path / "groups.jsonl"
    res = run_env("process", vllm_server, "--env.total_steps", "3", "--env.group_size", "2",
                  "--env.data_path_to_save_groups", str(out))  # fmt: skip
    assert res.returncode == 0, res.stderr[-3000:]
    groups = [json.loads(line) for line in out.read_text().splitlines()]
    assert len(groups) == 3
    # a random 16-token model never writes a closed \boxed{} answer: every score is a verified zero
    assert all(score == 0.0 for g in groups for score in g["scores"])


def test_evaluate_runs_on_the_eval_split(vllm_server):
    res = run_env("evaluate", vllm_server)
    assert res.returncode == 0, res.stderr[-3000:]
    assert "math" in res.stdout
