"""TRL and veRL reward-function adapters over real rubrics (and the scripted judge server)."""

from __future__ import annotations

import asyncio

import pytest

from rubrics.adapters.trl import trl_reward_functions
from rubrics.adapters.verl import VerlReward
from rubrics.core import ExactMatchRubric, RewardResult, Rubric, Sample, Status
from rubrics.judge import JudgeConfig, JudgeRubric


class Hang(Rubric):
    """Never finishes (until cancelled): stands in for a hung judge."""

    name = "hang"

    async def _score(self, sample: Sample) -> RewardResult:
        await asyncio.Event().wait()
        raise AssertionError("unreachable")


class NeedsGold(Rubric):
    """Unverified when the gold is missing, else exact match; records the info it saw."""

    name = "needs_gold"

    def __init__(self) -> None:
        self.infos: list[dict] = []

    async def _score(self, sample: Sample) -> RewardResult:
        self.infos.append(dict(sample.info))
        if sample.answer is None:
            return RewardResult.unverified(Status.ERROR, "parse_error: no gold")
        return await ExactMatchRubric().score(sample)


def test_trl_sync_contract_and_metrics():
    rubric = NeedsGold()
    reward, reward_async = trl_reward_functions(rubric, name="qa")
    logged: dict[str, float] = {}
    out = reward(
        prompts=["q1", "q2", "q3"],
        completions=["<answer>Paris</answer>", "Rome", [{"role": "assistant", "content": "Oslo"}]],
        completion_ids=[[1], [2], [3]],
        answer=["Paris", "Paris", None],
        level=["easy", "hard", "easy"],
        trainer_state=object(),
        log_metric=lambda k, v: logged.__setitem__(k, v),
    )
    assert out == [1.0, 0.0, None]
    assert reward.__name__ == reward_async.__name__ == "qa"
    assert rubric.infos[1] == {"level": "hard"}
    assert logged == {"qa/unverified": pytest.approx(1 / 3), "qa/fail/parse_error": pytest.approx(1 / 3)}
    fallback, _ = trl_reward_functions(rubric, fallback=-1.0)
    assert fallback(["q"], ["x"], answer=[None]) == [-1.0]


async def test_trl_async_twin_enforces_its_deadline_and_sync_works_inside_a_loop():
    _, reward_async = trl_reward_functions(Hang(), timeout_s=0.05)
    logged: dict[str, float] = {}
    out = await reward_async(["q", "q"], ["a", "b"], log_metric=lambda k, v: logged.__setitem__(k, v))
    assert out == [None, None] and logged["hang_reward/fail/timeout"] == 1.0
    reward, _ = trl_reward_functions(ExactMatchRubric())
    assert reward(["q"], ["4"], answer=["4"]) == [1.0]  # called from inside a running loop


def test_verl_fixed_schema_for_every_status():
    reward = VerlReward(NeedsGold())
    ok = reward.compute_score("qa", "<answer>4</answer>", "4", {"question": "2+2?"})
    bad = reward.compute_score("qa", "no idea", None)
    assert set(ok) == set(bad) == set(VerlReward.KEYS)
    assert ok["score"] == 1.0 and ok["verified"] == 1.0 and ok["status_ok"] == 1.0
    assert bad["score"] == 0.0 and bad["verified"] == 0.0 and bad["status_error"] == 1.0
    batch = reward.compute_score_batch(["qa", "qa"], ["4", "5"], ["4", "4"], [None, {"question": "q"}])
    assert [b["score"] for b in batch] == [1.0, 0.0] and all(set(b) == set(VerlReward.KEYS) for b in batch)


async def test_verl_judge_reads_the_question_from_extra_info(judge):
    url, script = judge
    script.set("Q-verl", {"content": "<score>9</score>"})
    reward = VerlReward(JudgeRubric(JudgeConfig(base_url=url, model="scripted")), needs_question=True)
    scored = await reward.compute_score_async("judge", "It is 4.", "4", {"question": "Q-verl"})
    missing = await reward.compute_score_async("judge", "It is 4.", "4", {})
    assert scored["score"] == pytest.approx(0.9) and scored["verified"] == 1.0
    assert missing["verified"] == 0.0 and missing["status_error"] == 1.0
    assert len(script.matching("Q-verl")) == 1
