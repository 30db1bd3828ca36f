"""Process mode bounds groups *sampling* at once; a group's scoring does not hold its slot
(environments/atropos_runtime/sampling_slots.py), and the backlog past sampling stays bounded."""

from __future__ import annotations

import asyncio
import os
import threading
from pathlib import Path

from atroposlib.envs.server_handling.server_baseline import APIServerConfig
from transformers import AutoTokenizer

from environments.atropos_runtime.local_model import build_tiny_model
from environments.atropos_runtime.sampling_slots import SamplingSlots, sampling_done
from rubrics.core import RewardResult, Rubric, Sample, Status
from tests.integration.varied_env import VariedEnv, VariedTask
from tests.runtime.scripted_policy import ScriptedPolicy

ROOT = Path(__file__).resolve().parents[2]


async def test_a_group_past_sampling_lets_the_next_one_sample():
    slots = SamplingSlots(1)
    scoring, second_sampled = asyncio.Event(), asyncio.Event()

    async def first() -> None:
        async with slots.group():
            sampling_done()
            sampling_done()  # idempotent: one slot given back, not two
            scoring.set()
            await second_sampled.wait()  # "scoring" until the next group got to sample

    async def second() -> None:
        await scoring.wait()
        async with slots.group():
            second_sampled.set()

    await asyncio.wait_for(asyncio.gather(first(), second()), timeout=5)


async def test_sampling_and_the_backlog_past_it_stay_bounded():
    slots, sampling, past, peak = SamplingSlots(2), 0, 0, {"sampling": 0, "past": 0}
    gate = asyncio.Event()

    async def group() -> None:
        nonlocal sampling, past
        async with slots.group():
            sampling += 1
            peak["sampling"] = max(peak["sampling"], sampling)
            await asyncio.sleep(0)
            sampling -= 1
            sampling_done()
            past += 1
            peak["past"] = max(peak["past"], past)
            await gate.wait()  # a rubric slower than inference
            past -= 1

    tasks = [asyncio.ensure_future(group()) for _ in range(10)]
    for _ in range(50):
        await asyncio.sleep(0)  # let every admissible group through (no timing: a fixed number of turns)
    assert peak == {"sampling": 2, "past": 4}  # 2 sampling, 2 x 2 in flight in all
    gate.set()
    await asyncio.wait_for(asyncio.gather(*tasks), timeout=5)


async def test_sampling_done_outside_a_group_frees_no_slot():
    slots, holding, done = SamplingSlots(1), asyncio.Event(), asyncio.Event()

    async def holder() -> None:
        async with slots.group():
            holding.set()
            await done.wait()

    task = asyncio.ensure_future(holder())
    await holding.wait()
    sampling_done()  # not inside the holder's group (serve, evaluate, another task): a no-op
    assert slots._sampling.locked()  # the holder still has the only sampling slot
    done.set()
    await task
    assert not slots._sampling.locked()


class WaitForNextGroupRubric(Rubric):
    """Scores the first group only once the policy has been asked for the next group's samples."""

    name = "wait_for_next_group"
    next_group_asked = threading.Event()

    async def _score(self, sample: Sample) -> RewardResult:
        if not await asyncio.to_thread(self.next_group_asked.wait, 30):
            return RewardResult.unverified(Status.ERROR, "the next group never sampled while this one scored")
        return RewardResult(score=float(len(sample.completion_text) % 2))


class GatedTask(VariedTask):
    def rubric(self) -> Rubric:
        return WaitForNextGroupRubric()


class GatedEnv(VariedEnv):
    name = "gated"
    task_cls = GatedTask


async def test_process_samples_the_next_group_while_one_is_scored(tmp_path):
    tiny = build_tiny_model(os.environ.get("RLVR_TINY_MODEL") or ROOT / ".cache" / "tiny-model")
    tok = AutoTokenizer.from_pretrained(tiny)
    from environments.atropos_runtime.modes import run_process

    asked: list[int] = []

    def answer(text: str, index: int) -> str:
        if index == 0:
            asked.append(1)
            if len(asked) >= 2:
                WaitForNextGroupRubric.next_group_asked.set()
        return "Paris"

    WaitForNextGroupRubric.next_group_asked.clear()
    with ScriptedPolicy(tok, answer, latency_s=(0.0, 0.01)) as policy:
        config = GatedEnv.env_config_cls(tokenizer_name=str(tiny), wandb_name="t", use_wandb=False, group_size=2,
                                         total_steps=2, max_concurrent_groups=1, max_tokens=8,
                                         ensure_scores_are_not_same=False, score_timeout_s=60,
                                         data_path_to_save_groups=str(tmp_path / "g.jsonl"))  # fmt: skip
        server = APIServerConfig(server_type="vllm", model_name="scripted", base_url=policy.base_url, api_key="x",
                                 tokenizer_name=str(tiny), timeout=30, health_check=False)  # fmt: skip
        summary = await run_process(GatedEnv(config, [server]))
    assert summary["groups_new"] == 2 and summary["reward_status"] == {"ok": 4}, summary
