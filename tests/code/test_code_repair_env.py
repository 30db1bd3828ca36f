"""RLEF code repair: public-test feedback between turns, private-test reward, feedback ablations."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from atroposlib.envs.server_handling.server_baseline import APIServerConfig
from transformers import AutoTokenizer

from environments.code_repair_env import HUB, CodeRepairEnv, CodeRepairEnvConfig, CodeRepairTask
from environments.local_model import build_tiny_model
from rubrics.code import CodeRubric
from rubrics.code_tests import suite_from
from tests.code.repair_policy import policy, remaining_bugs, write_problems
from tests.runtime.scripted_policy import ScriptedPolicy

ROOT = Path(__file__).resolve().parents[2]
FORMATS = Path(__file__).with_name("data") / "code_formats.jsonl"


@pytest.fixture(scope="module")
def tiny() -> Path:
    return build_tiny_model(os.environ.get("RLVR_TINY_MODEL") or ROOT / ".cache" / "tiny-model")


@pytest.fixture(scope="module")
def server(tiny):
    with ScriptedPolicy(AutoTokenizer.from_pretrained(tiny), policy) as s:
        yield s


def make_env(tiny, server, dataset, **kwargs) -> CodeRepairEnv:
    config = CodeRepairEnvConfig(tokenizer_name=str(tiny), wandb_name="code_repair", use_wandb=False, group_size=6,
                                 max_token_length=2048, dataset=str(dataset), eval_fraction=0,
                                 ensure_scores_are_not_same=False, **kwargs)  # fmt: skip
    api = APIServerConfig(server_type="vllm", model_name="scripted", base_url=server.base_url, api_key="x",
                          tokenizer_name=str(tiny), timeout=60, health_check=False)  # fmt: skip
    return CodeRepairEnv(config, [api])


def last_answer(messages) -> str:
    return next(m["content"] for m in reversed(messages) if m["role"] == "assistant")


async def test_real_feedback_repairs_what_random_and_no_feedback_cannot(tiny, server, tmp_path):
    problems = write_problems(tmp_path / "problems.jsonl")
    solved = {}
    for mode in ("real", "random", "none"):
        env = make_env(tiny, server, problems, feedback=mode)
        await env.setup()
        scores = []
        for item in env.train_items:
            group = (await env.group_for(item, training=False)).group
            assert len(group["scores"]) == 6, env.statuses
            for score, msgs, ep in zip(group["scores"], group["messages"], group["episodes"], strict=True):
                bugs = remaining_bugs(last_answer(msgs))
                assert score == float(not bugs and "```python" in last_answer(msgs))  # its own reward
                public_ok = "```python" in last_answer(msgs) and not bugs & {"neg", "zero"}
                assert ep["stop_reason"] == ("solved" if public_ok else "max_turns")  # stops on success
                assert len(ep["turns"]) == sum(m["role"] == "assistant" for m in msgs) <= 3
                feedback = [m["content"] for m in msgs[len(item.prompt) :] if m["role"] == "user"]
                if mode == "real":
                    assert all("Expected output:" in f or "No ```python code block" in f for f in feedback)
                if mode == "none":
                    assert all("did not pass the tests" in f and "Input" not in f for f in feedback)
            scores += group["scores"]
        await env.close_rubric()
        solved[mode] = sum(scores) / len(scores)
    assert solved["real"] > solved["random"] and solved["random"] <= solved["none"]
    # real: every first attempt but the one with the hidden-only "big" bug; none/random: the bug-free one
    assert solved == pytest.approx({"real": 5 / 6, "random": 1 / 6, "none": 1 / 6})
