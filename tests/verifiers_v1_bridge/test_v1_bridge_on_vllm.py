"""The v1 bridge on the real tiny model (vLLM): a multi-turn v1 Taskset through `process` in the
verifiers 0.4.0 venv. Whatever the random model says, every episode is verified, its sequence is
the exact sampled ids with real logprobs masked in only on the assistant turns, and its score is the
fixture's reward of its own decoded tokens."""

from __future__ import annotations

import json
import subprocess

import pytest
from transformers import AutoTokenizer

from tests.verifiers_bridge.policies import assistant_runs
from tests.verifiers_v1_bridge.policies import FEEDBACK, mismatches, retry_reward
from tests.verifiers_v1_bridge.test_v1_bridge import ROOT, bridge_cmd, v1_venv  # noqa: F401

pytestmark = pytest.mark.slow


def test_process_multi_turn_v1_taskset_on_vllm(vllm_server, v1_venv, tmp_path):  # noqa: F811
    venv, env = v1_venv
    out = tmp_path / "groups.jsonl"
    cmd = bridge_cmd(venv, "process", "vfv1_retry", vllm_server.model, vllm_server.base_url, "--env.group_size",
                     "2", "--env.total_steps", "2", "--env.max_tokens", "8",
                     "--env.data_path_to_save_groups", str(out), served=vllm_server.model)  # fmt: skip
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=600, cwd=ROOT, env=env)
    assert done.returncode == 0, done.stderr[-4000:]
    summary = json.loads(out.with_suffix(".summary.json").read_text())
    assert summary["reward_status"] == {"ok": 4} and summary["dropped"] == {}, summary
    tok = AutoTokenizer.from_pretrained(vllm_server.model)
    groups = [json.loads(line) for line in out.read_text().splitlines()]
    assert len(groups) == 2
    for g in groups:
        assert g["tokens_exact"] and mismatches(tok, g, retry_reward) == []
        for tokens, masks, lps, ep in zip(g["tokens"], g["masks"], g["inference_logprobs"], g["episodes"],
                                          strict=True):  # fmt: skip
            runs = assistant_runs(tokens, masks)
            assert 1 <= len(runs) == len(ep["turns"]) <= 3
            assert [list(r) for r in runs] == [t["tokens"] for t in ep["turns"]]  # the sampled ids, exactly
            trained = [lp for lp, m in zip(lps, masks, strict=True) if m != -100]
            assert trained == [x for t in ep["turns"] for x in t["logprobs"]] and all(x <= 0 for x in trained)
            assert tok.decode(tokens).count(FEEDBACK) == len(runs) - 1
