"""The math environment: datasets (reasoning-gym default, hub layouts on local files) and rewards end to end."""

from __future__ import annotations

import json
import re

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from environments.math_env import MathEnvConfig, MathTask, map_row
from environments.task import DatasetError
from rubrics.core import Status
from rubrics.math import CasPool, MathRubric


def rg_task(**kw) -> MathTask:
    return MathTask(MathEnvConfig(rg_train_size=60, rg_eval_size=18, **kw))


def test_reasoning_gym_default_is_deterministic_and_disjoint():
    a_train, errors = rg_task().items("train")
    a_eval, _ = rg_task().items("eval")
    b_train, _ = rg_task().items("train")
    assert not errors and len(a_eval) == 18 and 0 < len(a_train) <= 60
    assert [i.prompt for i in a_train] == [i.prompt for i in b_train]
    assert not {i.prompt[-1]["content"] for i in a_train} & {i.prompt[-1]["content"] for i in a_eval}
    assert "\\boxed" in a_train[0].prompt[0]["content"]
    other, _ = rg_task(data_seed=7).items("train")
    assert [i.prompt for i in other] != [i.prompt for i in a_train]


ONE_DIGIT_SUMS = {"basic_arithmetic": {"max_terms": 2, "max_digits": 1, "operators": ["+"],
                                      "allow_parentheses": False, "allow_negation": False}}  # fmt: skip


def test_reasoning_gym_generators_take_their_options():
    items, errors = rg_task(rg_tasks=["basic_arithmetic"], rg_config=ONE_DIGIT_SUMS).items("eval")
    assert not errors and len(items) == 18
    for item in items:
        a, b = (
            int(x) for x in re.fullmatch(r"Calculate (\d+) \+ (\d+)\.", item.prompt[-1]["content"]).groups()
        )
        assert item.answer == str(a + b) and a <= 10 and b <= 10  # reasoning-gym's "one digit" reaches 10
    plain, _ = rg_task(rg_tasks=["basic_arithmetic"]).items("eval")  # its own defaults: other problems
    assert [i.prompt for i in plain] != [i.prompt for i in items]


def test_bad_generator_options_are_one_clear_error():
    from environments.data_sources import DataSourceError

    with pytest.raises(DataSourceError, match="not in rg_tasks: \\['gcd'\\]"):
        rg_task(rg_tasks=["basic_arithmetic"], rg_config={"gcd": {}}).items("eval")
    with pytest.raises(DataSourceError, match="'basic_arithmetic' rejects its rg_config"):
        rg_task(rg_tasks=["basic_arithmetic"], rg_config={"basic_arithmetic": {"no_such_option": 1}}).items(
            "eval"
        )


@pytest.mark.parametrize(
    ("tasks", "config"),
    [
        ("basic_arithmetic", json.dumps(ONE_DIGIT_SUMS)),  # as the command line hands them over
        ('["basic_arithmetic"]', json.dumps(ONE_DIGIT_SUMS)),
        (["basic_arithmetic"], ONE_DIGIT_SUMS),  # as --config YAML or Python gives them
    ],
)
def test_list_and_mapping_options_come_from_the_command_line_as_text(tasks, config):
    cfg = MathEnvConfig(rg_tasks=tasks, rg_config=config)
    assert cfg.rg_tasks == ["basic_arithmetic"] and cfg.rg_config == ONE_DIGIT_SUMS
    assert MathEnvConfig(rg_tasks="gcd, lcm").rg_tasks == ["gcd", "lcm"]
    with pytest.raises(ValueError, match="not a JSON object"):
        MathEnvConfig(rg_config="{not json")


def test_math_env_cli_takes_list_and_mapping_options(tmp_path):
    """atroposlib's CLI rebuilds the config from bare annotations and hands these options over as the
    text typed: they reach the env (an unreachable server fails after the config is accepted)."""
    import subprocess
    import sys
    from pathlib import Path

    script = Path(__file__).resolve().parents[2] / "environments" / "math_env.py"
    out = subprocess.run(
        [sys.executable, str(script), "process", "--env.rg_tasks", "basic_arithmetic,gcd",
         "--env.rg_config", json.dumps(ONE_DIGIT_SUMS), "--env.rg_eval_size", "4", "--env.rg_train_size", "4",
         "--env.total_steps", "1", "--env.tokenizer_name", "no/such-tokenizer",
         "--openai.base_url", "http://127.0.0.1:9/v1", "--env.data_path_to_save_groups", str(tmp_path / "g.jsonl")],
        capture_output=True, text=True, timeout=120, cwd=script.parents[1],
    )  # fmt: skip
    assert out.returncode != 0 and "invalid configuration" not in out.stderr, out.stderr[-1500:]


@pytest.fixture(scope="module")
def shared_pool():
    with CasPool(workers=1) as p:
        yield p


async def score(item, completion, pool) -> tuple:
    async with MathRubric(pool=pool) as rubric:
        res = await rubric.score(item.sample(completion))
    return res.score, res.status


async def test_fixed_completions_end_to_end(shared_pool):
    items, _ = rg_task().items("eval")
    item = items[0]
    gold = item.answer
    assert await score(item, f"Let me compute.\n\nSo the result is \\boxed{{{gold}}}.", shared_pool) == (
        1.0,
        Status.OK,
    )
    assert (await score(item, "\\boxed{123456789}", shared_pool))[0] == 0.0
    hedged = f"It is \\boxed{{{gold}}} or \\boxed{{123456789}}."
    assert (await score(item, hedged, shared_pool))[0] == 0.0
    assert await score(item, f"So the answer is \\boxed{{{gold}", shared_pool) == (0.0, Status.NO_ANSWER)
    assert await score(item, f"<think>It is \\boxed{{{gold}}}", shared_pool) == (0.0, Status.NO_ANSWER)
    assert await score(item, f"<think>It is {gold}</think>", shared_pool) == (0.0, Status.NO_ANSWER)


async def test_fraction_task_requires_lowest_terms(shared_pool):
    items, _ = rg_task(rg_tasks=["fraction_simplification"]).items("eval")
    item = items[0]
    num, den = (int(x) for x in re.findall(r"\d+", item.answer))
    assert item.info["math_policy"] == {"unreduced_fractions": False}
    assert (await score(item, f"\\boxed{{{num}/{den}}}", shared_pool))[0] == 1.0
    assert (await score(item, f"\\boxed{{\\frac{{{2 * num}}}{{{2 * den}}}}}", shared_pool))[0] == 0.0


GSM8K = {"question": "Tom has 3 apples and buys 4. How many?", "answer": "3+4=7\n#### 1,007"}
MATH500 = {
    "problem": "Compute $1/2+1/4$.",
    "solution": "We get $\\boxed{\\frac34}$.",
    "answer": "\\frac{3}{4}",
    "subject": "Algebra",
    "level": 1,
    "unique_id": "test/algebra/1.json",
}
NUMINA = {"problem": "Find x if 2x=6.", "solution": "Divide: $x=\\boxed{3}$.", "messages": []}
NUMINA_PROOF = {"problem": "Prove that 1=1.", "solution": "Obvious.", "answer": "proof"}
DAPO = {
    "data_source": "math_dapo",
    "prompt": [
        {
            "role": "user",
            "content": (
                "Solve the following math problem step by step. The last line of your response should be of the form "
                "Answer: $Answer (without quotes) where $Answer is the answer to the problem.\n\nWhat is 6*7?\n\n"
                'Remember to put your answer on its own line after "Answer:".'
            ),
        }
    ],
    "ability": "MATH",
    "reward_model": {"ground_truth": "42", "style": "rule-lighteval/MATH_v2"},
}


@pytest.mark.parametrize(
    ("row", "question", "gold"),
    [
        (GSM8K, GSM8K["question"], "1007"),
        (MATH500, MATH500["problem"], "\\frac{3}{4}"),
        (NUMINA, NUMINA["problem"], "3"),
        (DAPO, "What is 6*7?", "42"),
        ({"question": "q?", "answer": 5}, "q?", "5"),
    ],
)
def test_answer_field_mapping(row, question, gold):
    assert map_row(row, "auto") == (question, gold)


def test_rows_without_gold_are_skipped(tmp_path):
    path = tmp_path / "numina.jsonl"
    path.write_text("\n".join(json.dumps(r) for r in [NUMINA, NUMINA_PROOF, NUMINA]))
    items, errors = MathTask(MathEnvConfig(dataset=str(path), eval_fraction=0)).items("train")
    assert len(items) == 2 and len(errors) == 1 and "boxed" in errors[0]
    with pytest.raises(DatasetError):
        map_row({"question": "q", "answer": "no marker"}, "gsm8k")


def test_local_parquet_in_dapo_layout(tmp_path):
    path = tmp_path / "dapo.parquet"
    pq.write_table(pa.Table.from_pylist([DAPO] * 10), path)
    task = MathTask(MathEnvConfig(dataset=str(path), eval_fraction=0.2))
    train, _ = task.items("train")
    evals, _ = task.items("eval")
    assert len(train) == 8 and len(evals) == 2
    assert train[0].answer == "42" and train[0].prompt[-1]["content"] == "What is 6*7?"


def test_hub_loader_on_a_local_dataset_directory(tmp_path, monkeypatch):
    """The real `datasets.load_dataset` path (hub names), fed a local dataset folder (no network)."""
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    folder = tmp_path / "gsm8k_like"
    folder.mkdir()
    (folder / "train.jsonl").write_text("\n".join(json.dumps(GSM8K) for _ in range(5)))
    (folder / "test.jsonl").write_text(json.dumps({**GSM8K, "answer": "#### 8"}))
    task = MathTask(MathEnvConfig(dataset=f"hf:{folder}"))
    train, _ = task.items("train")
    evals, _ = task.items("eval")
    assert [i.answer for i in train] == ["1007"] * 5 and [i.answer for i in evals] == ["8"]


def test_load_environment_builds_a_verifiers_env():
    from environments.math_env import load_environment

    env = load_environment(rg_train_size=12, rg_eval_size=4)
    assert len(env.dataset) == 12 and len(env.eval_dataset) == 4


def test_every_reasoning_gym_gold_verifies_against_itself():
    items, _ = rg_task().items("train")
    from rubrics.math import verify

    failures = [
        (i.info["rg_task"], i.answer) for i in items if not verify(f"\\boxed{{{i.answer}}}", i.answer).correct
    ]
    assert failures == []
