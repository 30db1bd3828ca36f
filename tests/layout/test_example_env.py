"""The one-file environment of docs/guide.md (examples/reverse_env.py) works as the guide says: run as
a script in `process` mode against an inference server, its rubric's rewards land in the output."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

from transformers import AutoTokenizer

from tests.runtime.scripted_policy import ScriptedPolicy

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "reverse_env.py"


def test_the_guide_shows_the_example_as_it_is():
    guide = (ROOT / "docs" / "guide.md").read_text()
    assert EXAMPLE.read_text().strip() in guide


def test_the_one_file_environment_runs_in_process_mode(tiny_model, tmp_path):
    tok = AutoTokenizer.from_pretrained(tiny_model)

    def answer(prompt: str, index: int) -> str:
        word = re.findall(r"Reverse the letters of (\w+)\.", prompt)[-1]
        return [f"<answer>{word[::-1]}</answer>", f"<answer>{word}</answer>", "no idea"][index % 3]

    out = tmp_path / "groups.jsonl"
    with ScriptedPolicy(tok, answer) as policy:
        argv = [sys.executable, str(EXAMPLE), "process", "--env.tokenizer_name", str(tiny_model),
                "--openai.base_url", policy.base_url, "--openai.model_name", "scripted",
                "--env.group_size", "3", "--env.total_steps", "2", "--env.max_tokens", "32",
                "--env.data_path_to_save_groups", str(out)]  # fmt: skip
        proc = subprocess.run(argv, capture_output=True, text=True, cwd=tmp_path, timeout=300,
                              env=dict(os.environ, PYTHONPATH=str(ROOT), WANDB_MODE="disabled"))  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    groups = [json.loads(line) for line in out.read_text().splitlines()]
    assert len(groups) == 2
    for group in groups:
        assert sorted(group["scores"]) == [0.0, 0.0, 1.0], group["scores"]
