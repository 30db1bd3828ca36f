"""environments/code_env.py: dataset shapes → items (prompt + JSON-safe TestSuite), rubric, front door."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from environments.code_env import CodeEnv, CodeEnvConfig, CodeTask, load_environment
from rubrics.code.rubric import CodeRubric
from rubrics.code.suites import CallTest, StdioTest, suite_from
from rubrics.core import Status

FORMATS = Path(__file__).with_name("data") / "code_formats.jsonl"
ROWS = [json.loads(line) for line in FORMATS.read_text().splitlines()]
REFERENCE = {str(r.get("task_id") or r.get("id") or r.get("name") or r.get("question_id") or r.get("problem_id")):
             r["solution"] for r in ROWS if "solution" in r}  # fmt: skip


def fenced(code: str) -> str:
    return f"```python\n{code}\n```"


def test_humaneval_is_the_offline_default():
    task = CodeTask(CodeEnvConfig())
    train, errors = task.items("train")
    evals, eval_errors = task.items("eval")
    assert not errors and not eval_errors and len(train) + len(evals) == 164
    item = train[0]
    assert item.uid == "HumanEval/0" and item.prompt[0]["role"] == "system"
    assert "def has_close_elements" in item.prompt[1]["content"] and "```python" in item.prompt[1]["content"]
    suite = suite_from(json.loads(json.dumps(item.answer)))  # answers survive a JSON round trip
    assert suite.entry_point == "has_close_elements" and all(isinstance(t, CallTest) for t in suite.tests)


def test_local_file_shapes_and_bad_rows():
    task = CodeTask(CodeEnvConfig(dataset=str(FORMATS), eval_fraction=0))
    items, errors = task.items("train")
    formats = {it.uid: it.info["format"] for it in items}
    assert formats == {"cc_max": "stdio", "apps_rev": "stdio", "apps_call": "call", "lcb_fn": "call",
                       "lcb_stdin": "stdio", "2": "mbpp", "plain_stdio": "stdio", "plain_call": "call"}  # fmt: skip
    assert len(errors) == 3
    assert "no tests" in errors[0] and "differ in length" in errors[1] and "unrecognised" in errors[2]
    cc = suite_from(next(it for it in items if it.uid == "cc_max").answer)
    assert len(cc.tests) == 3 and all(isinstance(t, StdioTest) for t in cc.tests) and cc.time_limit_s == 2.0
    lcb = suite_from(next(it for it in items if it.uid == "lcb_fn").answer)
    assert len(lcb.tests) == 2  # the pickled private blob was not loaded
    capped = CodeTask(CodeEnvConfig(dataset=str(FORMATS), eval_fraction=0, max_tests=1)).items("train")[0]
    assert all(len(suite_from(it.answer).tests) == 1 for it in capped)


async def test_reference_solutions_score_through_the_task_rubric(code_sandbox):
    task = CodeTask(CodeEnvConfig(dataset=str(FORMATS), eval_fraction=0))
    items, _ = task.items("train")
    rubric = task.rubric()
    assert isinstance(rubric, CodeRubric)
    rubric = CodeRubric(code_sandbox, rubric.config)  # reuse the session's sandbox
    good = await rubric.score_group([it.sample(fenced(REFERENCE[it.uid])) for it in items])
    bad = await rubric.score_group(
        [it.sample(fenced("print('nope')\ndef f(*a):\n    return None")) for it in items]
    )
    for it, g, b in zip(items, good, bad, strict=True):
        assert g.score == 1.0 and g.status is Status.OK, (it.uid, g)
        assert b.score == 0.0, (it.uid, b)


def test_env_class_and_config_defaults():
    assert CodeEnv.env_config_cls is CodeEnvConfig and CodeEnv.task_cls is CodeTask
    config = CodeEnvConfig()
    assert config.dataset == "humaneval" and config.reward == "binary" and config.sandbox == "auto"


@pytest.mark.filterwarnings("ignore::DeprecationWarning")
async def test_load_environment_scores_with_the_same_rubric():
    env = load_environment(dataset=str(FORMATS), eval_fraction=0)
    assert len(env.dataset) == 8
    row = next(r for r in env.dataset if "Print the square" in r["prompt"][1]["content"])
    rubrics = getattr(env.rubric, "rubrics", None) or [env.rubric]
    reward = next(f for r in rubrics for f in r.funcs if f.__name__ == "code_reward")
    completion = [{"role": "assistant", "content": fenced(REFERENCE["plain_stdio"])}]
    assert await reward(prompt=row["prompt"], completion=completion, answer=row["answer"], state={}) == 1.0
    wrong = [{"role": "assistant", "content": fenced("print(0)")}]
    assert await reward(prompt=row["prompt"], completion=wrong, answer=row["answer"], state={}) == 0.0
