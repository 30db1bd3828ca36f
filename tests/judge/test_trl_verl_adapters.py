"""TRL and veRL reward-function adapters over real rubrics (and the scripted judge server)."""

from __future__ import annotations

import asyncio
import hashlib
import json
import math
import multiprocessing
import pickle
from concurrent.futures import ProcessPoolExecutor
from dataclasses import replace
from functools import partial

import numpy as np
import pytest
import torch

from rubrics.adapters._inputs import decode_gold
from rubrics.adapters.trl import trl_reward_functions, trl_weighted_reward
from rubrics.adapters.verl import VerlReward
from rubrics.adapters.verl_advantage import grpo_verified_advantage
from rubrics.aio import run_sync
from rubrics.code.rubric import CodeRubric, CodeRubricConfig
from rubrics.code.suites import StdioTest, TestSuite
from rubrics.core import ExactMatchRubric, RewardResult, Rubric, Sample, Status
from rubrics.judge.rubric import JudgeConfig, JudgeRubric
from rubrics.math import MathRubric


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


# --- veRL: JSON golds, the prime manager's process pool, the NaN-aware estimator --------------------

SUITE = TestSuite([StdioTest("1 2\n", "3\n")], time_limit_s=5.0, memory_mb=256)
GOOD = "```python\nprint(sum(map(int, input().split())))\n```"


def test_verl_decodes_json_object_golds_only():
    assert decode_gold(json.dumps(SUITE.to_dict())) == SUITE.to_dict()
    assert decode_gold("[1, 2]") == "[1, 2]"  # an interval answer stays a string
    assert decode_gold("{1, 2}") == "{1, 2}"  # a set answer is not JSON
    assert decode_gold(np.array(["4", "four"], dtype=object)) == ["4", "four"]
    reward = VerlReward(CodeRubric("auto"))
    good = reward.compute_score("code", GOOD, json.dumps(SUITE.to_dict()), json.dumps({"id": 1}))
    bad = reward.compute_score("code", "```python\nprint(4)\n```", json.dumps(SUITE.to_dict()))
    assert good["verified"] == bad["verified"] == 1.0
    assert (good["score"], bad["score"]) == (1.0, 0.0)
    run_sync(reward.rubric.aclose())


async def _prime_scoring(fn, completions, references, context) -> list[float]:
    """veRL's prime manager: a fresh process pool per batch, positional calls, `float(result[0])`."""
    loop = asyncio.get_running_loop()
    with ProcessPoolExecutor(max_workers=2, mp_context=context) as pool:
        results = await asyncio.gather(
            *(
                asyncio.wait_for(loop.run_in_executor(pool, partial(fn, "math", c, r, None)), 60)
                for c, r in zip(completions, references, strict=True)
            )
        )
    return [float(r) if isinstance(r, int | float | bool) else float(r[0]) for r in results]


@pytest.mark.parametrize("start", ["fork", "spawn"])
def test_verl_prime_manager_pickles_a_factory_adapter(start):
    adapter = VerlReward(partial(MathRubric, workers=1))
    assert pickle.loads(pickle.dumps(adapter)) is adapter  # same process: the same adapter
    completions = [f"\\boxed{{{n}}}" for n in range(6)]
    references = [str(n if n % 2 == 0 else n + 1) for n in range(6)]
    context = multiprocessing.get_context(start)
    for _ in range(2):  # the prime manager builds a new pool every step
        scores = asyncio.run(_prime_scoring(adapter.compute_score_prime, completions, references, context))
        assert scores == [1.0, 0.0, 1.0, 0.0, 1.0, 0.0]
    with pytest.raises(TypeError, match="factory"):
        pickle.dumps(VerlReward(ExactMatchRubric()))


def test_grpo_verified_keeps_unverified_out_of_the_baseline():
    nan = math.nan
    # two groups of four; the last token of each response holds the score (veRL's layout)
    scores = [1.0, 0.0, nan, 1.0, nan, nan, 1.0, 0.0]
    rewards = torch.zeros(8, 3)
    rewards[:, -1] = torch.tensor(scores)
    mask = torch.ones(8, 3)
    index = ["a"] * 4 + ["b"] * 4
    adv, returns = grpo_verified_advantage(rewards, mask, index, config={"norm_adv_by_std_in_grpo": True})
    first = torch.tensor([1.0, 0.0, 1.0])  # the verified members of group a
    expected_a = (first - first.mean()) / (first.std() + 1e-6)
    assert torch.allclose(adv[[0, 1, 3], 0], expected_a)
    assert adv[2].abs().sum() == 0 and adv[4].abs().sum() == 0 and adv[5].abs().sum() == 0
    second = torch.tensor([1.0, 0.0])
    assert torch.allclose(adv[[6, 7], 0], (second - second.mean()) / (second.std() + 1e-6))
    assert not torch.isnan(rewards).any() and torch.equal(adv, returns)
    lone = torch.tensor([[1.0], [nan]])
    assert grpo_verified_advantage(lone, torch.ones(2, 1), ["c", "c"])[0].abs().sum() == 0
    nan_adapter = VerlReward(NeedsGold(), fallback=math.nan)
    assert math.isnan(nan_adapter.compute_score("qa", "x", None)["score"])


# --- TRL: one combined function, and a real GRPOTrainer for several steps ---------------------------


def test_trl_weighted_reward_is_unverified_when_any_part_is():
    reward, _ = trl_weighted_reward({"gold": NeedsGold(), "exact": ExactMatchRubric()})
    assert reward(["q", "q"], ["4", "4"], answer=["4", None]) == [2.0, None]


class AsProgram(Rubric):
    """Turns each (gibberish) completion of the tiny model into a distinct program that passes or
    fails by its hash, then scores it with the real code rubric: every step runs fresh sandbox jobs."""

    name = "code"

    def __init__(self, inner: Rubric) -> None:
        self.inner = inner

    async def _score(self, sample: Sample) -> RewardResult:
        return (await self._score_group([sample]))[0]

    async def _score_group(self, samples):
        programs = []
        for s in samples:
            digest = hashlib.sha256(s.completion_text.encode()).hexdigest()[:16]
            body = "print(3)" if int(digest, 16) % 2 else "print(4)"
            programs.append(replace(s, completion=f"```python\n# {digest}\n{body}\n```"))
        return await self.inner.score_group(programs)


@pytest.mark.slow
def test_real_trl_grpo_trainer_keeps_verified_rewards_after_step_one(tiny_model, judge, tmp_path):
    trl = pytest.importorskip("trl")
    from datasets import Dataset

    url, script = judge
    script.set("Q-grpo", {"content": "<score>5</score>"})
    code = CodeRubric("auto", CodeRubricConfig(max_concurrency=2))  # contended every step
    code_sync, _ = trl_reward_functions(AsProgram(code), name="code")
    judge_rubric = JudgeRubric(JudgeConfig(base_url=url, model="scripted"))
    rows = [
        {"prompt": [{"role": "user", "content": f"Q-grpo {i}"}], "answer": json.dumps(SUITE.to_dict())}
        for i in range(4)
    ]
    # the weighted function reads `reference`; the code function reads the suite in `answer`
    _, weighted_async = trl_weighted_reward(
        {"math": MathRubric(workers=1), "judge": judge_rubric}, answer_key="reference"
    )
    dataset = Dataset.from_list([{**r, "reference": "42"} for r in rows])
    config = trl.GRPOConfig(
        output_dir=str(tmp_path),
        per_device_train_batch_size=8,
        num_generations=4,
        max_completion_length=8,
        max_steps=3,
        logging_steps=1,
        report_to=[],
        use_cpu=True,
        save_strategy="no",
        bf16=False,
    )
    trainer = trl.GRPOTrainer(
        model=str(tiny_model), reward_funcs=[code_sync, weighted_async], args=config, train_dataset=dataset
    )
    trainer.train()
    steps = [h for h in trainer.state.log_history if "rewards/code/mean" in h]
    assert len(steps) == 3
    for logged in steps:  # every step, not just the first: verified rewards from both functions
        assert logged["code/unverified"] == 0.0 and logged["weighted_reward/unverified"] == 0.0
        assert 0.0 <= logged["rewards/code/mean"] <= 1.0
        assert logged["rewards/weighted_reward/mean"] == pytest.approx(0.5)  # math 0 + judge 5/10
    run_sync(code.aclose())


def test_real_verl_prime_manager_and_grpo_parity():
    """With veRL installed: its own prime scoring function and its registry and GRPO (CI: skipped;
    veRL's pins conflict with the project's transformers)."""
    prime = pytest.importorskip("verl.workers.reward_manager.prime")
    core_algos = pytest.importorskip("verl.trainer.ppo.core_algos")
    from rubrics.adapters import verl_advantage

    assert verl_advantage.register()
    assert core_algos.get_adv_estimator_fn("grpo_verified") is grpo_verified_advantage
    adapter = VerlReward(partial(MathRubric, workers=1))
    completions = [f"\\boxed{{{n}}}" for n in range(6)]
    references = [str(n if n % 2 == 0 else n + 1) for n in range(6)]
    for _ in range(2):
        scores = prime.run_reward_scoring(
            adapter.compute_score_prime, completions, references, ["math"] * 6, num_processes=2
        )
        assert scores == [1.0, 0.0, 1.0, 0.0, 1.0, 0.0]
    rewards = torch.zeros(8, 3)
    rewards[:, -1] = torch.tensor([1.0, 0.0, 1.0, 1.0, 0.0, 0.0, 1.0, 0.0])
    index = np.array(["a"] * 4 + ["b"] * 4, dtype=object)
    ours, _ = grpo_verified_advantage(rewards.clone(), torch.ones(8, 3), index)
    theirs, _ = core_algos.compute_grpo_outcome_advantage(rewards.clone(), torch.ones(8, 3), index)
    assert torch.allclose(ours, theirs, atol=1e-5)  # all verified: exactly veRL's GRPO


def test_real_verl_reward_managers_every_step(request):
    """With veRL installed: its naive, batch and dapo managers over a DataProto whose ground truths
    are JSON-string test suites, for several steps (CI: skipped, see above)."""
    verl = pytest.importorskip("verl")
    from transformers import AutoTokenizer
    from verl.workers.reward_manager.batch import BatchRewardManager
    from verl.workers.reward_manager.dapo import DAPORewardManager
    from verl.workers.reward_manager.naive import NaiveRewardManager

    tok = AutoTokenizer.from_pretrained(str(request.getfixturevalue("tiny_model")))
    adapter = VerlReward(CodeRubric("auto", CodeRubricConfig(max_concurrency=2)))

    def batch(step: int):
        texts = [
            GOOD.replace("print(", f"# {step}-{i}\nprint(")
            if i % 2 == 0
            else f"```python\nprint({i + 100})\n```"
            for i in range(12)
        ]
        ids = [tok.encode(t) for t in texts]
        width = max(map(len, ids))
        responses = torch.tensor([r + [tok.pad_token_id] * (width - len(r)) for r in ids])
        mask = torch.tensor([[1, 1] + [1] * len(r) + [0] * (width - len(r)) for r in ids])
        suite = json.dumps(SUITE.to_dict())
        return verl.DataProto.from_dict(
            tensors={"prompts": torch.full((12, 2), 5), "responses": responses, "attention_mask": mask},
            non_tensors={
                "reward_model": np.array([{"ground_truth": suite}] * 12, dtype=object),
                "data_source": np.array(["code"] * 12, dtype=object),
                "extra_info": np.array([{"index": i} for i in range(12)], dtype=object),
            },
        )

    managers = [
        NaiveRewardManager(tokenizer=tok, num_examine=0, compute_score=adapter.compute_score),
        BatchRewardManager(tokenizer=tok, num_examine=0, compute_score=adapter.compute_score_batch),
        DAPORewardManager(tokenizer=tok, num_examine=0, compute_score=adapter.compute_score),
    ]
    for step in range(3):
        for manager in managers:
            out = manager(batch(step), return_dict=True)
            assert out["reward_tensor"].sum(-1).tolist() == [1.0, 0.0] * 6, type(manager).__name__
            assert list(out["reward_extra_info"]["verified"]) == [1.0] * 12
    run_sync(adapter.rubric.aclose())
