"""The judged environment: default data, row validation, rubric wiring to a separate judge endpoint."""

from __future__ import annotations

import pytest

from environments.judge_env import JudgeEnvConfig, JudgeTask
from environments.task import DatasetError
from rubrics.core import Status, WeightedRubric
from rubrics.judge.rubric import JudgeRubric


def task(**kw) -> JudgeTask:
    return JudgeTask(JudgeEnvConfig(**kw))


def test_default_data_is_complete_and_split():
    t = task()
    train, train_errors = t.items("train")
    evals, eval_errors = t.items("eval")
    assert train_errors == [] and eval_errors == []
    assert len(train) + len(evals) == 30 and len(evals) >= 5
    assert {it.uid for it in train}.isdisjoint(it.uid for it in evals)
    kinds = {tuple(sorted(it.answer)) for it in train + evals}
    assert kinds == {("reference",), ("criteria",), ("criteria", "reference")}
    assert all(it.prompt[-1]["role"] == "user" for it in train)


@pytest.mark.parametrize(
    ("row", "message"),
    [
        ({"reference": "x"}, "question"),
        ({"question": "q"}, "reference"),
        ({"question": "q", "criteria": []}, "criteria"),
        ({"question": "q", "criteria": ["ok", " "]}, "criteria"),
        ({"question": "q", "reference": "  "}, "empty"),
    ],
)
def test_malformed_rows_are_rejected_with_a_reason(row, message):
    with pytest.raises(DatasetError, match=message):
        task().item(row, 0)


def test_rubric_is_the_judge_alone_or_weighted():
    assert isinstance(task().rubric(), JudgeRubric)
    weighted = task(length_weight=0.2, format_weight=0.1, length_limit_chars=10).rubric()
    assert isinstance(weighted, WeightedRubric) and set(weighted.parts) == {"judge", "length", "format"}


async def test_items_are_scored_by_the_separate_judge_endpoint(judge):
    url, script = judge
    t = task(judge_base_url=url, judge_model="scripted", length_weight=0.5, length_limit_chars=20)
    item = next(it for it in t.items("train")[0] if "reference" in it.answer)
    question = item.prompt[-1]["content"]
    script.set(question, {"content": "Correct and complete. <score>8</score>"})
    async with t.rubric() as rubric:
        short, long = await rubric.score_group([item.sample("Short answer."), item.sample("x" * 30)])
    assert short.status is Status.OK and short.components["judge"] == pytest.approx(0.8)
    assert short.score == pytest.approx(0.8 + 0.5 * 1.0)
    assert long.score == pytest.approx(0.8 + 0.5 * 0.5)  # 30 chars vs limit 20: half the length credit
    body = script.matching(question)[0]
    assert body["model"] == "scripted"
    assert "REFERENCE:" in body["messages"][-1]["content"]


async def test_judge_outage_makes_the_sample_unverified(judge):
    url, script = judge
    t = task(judge_base_url=url, judge_model="scripted", judge_max_retries=0, format_weight=1.0)
    item = t.items("train")[0][0]
    script.set(item.prompt[-1]["content"], {"status": 503})
    async with t.rubric() as rubric:
        result = await rubric.score(item.sample("An answer."))
    assert result.score is None and result.status is Status.ERROR and "judge" in result.reason


def test_env_class_and_load_environment():
    pytest.importorskip("atroposlib")
    from environments.judge_env import JudgeEnv

    config, servers = JudgeEnv.config_init()
    assert isinstance(config, JudgeEnvConfig) and config.judge_base_url != servers[0].base_url
    front = pytest.importorskip("environments.vf_bridge.classic_front")
    assert front is not None
    from environments.judge_env import load_environment

    env = load_environment(judge_base_url="http://127.0.0.1:9/v1")
    assert len(env.dataset) > 0
