"""Every rubric through every trainer adapter, for many steps, from many threads and event loops.

The rubrics are real: math (CAS worker pool), code (the default sandbox), an LLM judge against the
scripted loopback judge, and a weighted math+judge combination. Each adapter is driven the way its
trainer's call site drives it (TRL: sync functions on the calling thread, async ones gathered on one
daemon loop; veRL: naive per-sample loop, batch manager, reward-loop thread pool, async reward loop;
Verifiers: successive event loops). A rubric shared across loops used to fail after the first call
("bound to a different event loop") or hang; here every item of every step must come back verified
with the expected score.
"""

from __future__ import annotations

import asyncio
import re
import threading
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest

from rubrics.adapters.trl import trl_reward_functions
from rubrics.adapters.verifiers import reward_function
from rubrics.adapters.verl import VerlReward
from rubrics.aio import Limiter, run_sync
from rubrics.code.rubric import CodeRubric, CodeRubricConfig
from rubrics.code.suites import StdioTest, TestSuite
from rubrics.core import WeightedRubric
from rubrics.judge.rubric import JudgeConfig, JudgeRubric
from rubrics.math import MathRubric
from rubrics.server.app import ServerConfig, create_app

THREADS, STEPS, ITEMS = 4, 3, 4
SUITE = TestSuite([StdioTest("1 2\n", "3\n")], time_limit_s=5.0, memory_mb=256)


def judge_says(body: dict) -> dict:
    """The scripted judge grades by content: 10 when the response holds OK-<n>, else 0."""
    text = body["messages"][-1]["content"]
    return {"content": "<score>10</score>" if re.search(r"OK-\d", text) else "<score>0</score>"}


def batch(kind: str, tag: str) -> tuple[list, list[str], list, list[float]]:
    """(prompts, completions, answers, expected scores) of one step; every item is distinct."""
    prompts, completions, answers, expected = [], [], [], []
    for i in range(ITEMS):
        n, good = abs(hash((tag, i))) % 10_000, i % 2 == 0
        prompts.append([{"role": "user", "content": f"Q-loops {tag} {i}"}])
        if kind == "math":
            completions.append(f"\\boxed{{{n if good else n + 1}}}")
            answers.append(str(n))
        elif kind == "code":
            body = "print(sum(map(int, input().split())))" if good else "print(4)"
            completions.append(f"```python\n# {tag} {i}\n{body}\n```")
            answers.append(SUITE)
        elif kind == "judge":
            completions.append(f"OK-{n}" if good else f"NO-{n}")
            answers.append("the reference")
        else:  # weighted: math + judge, both right or both wrong
            completions.append(f"\\boxed{{{n}}} OK-{n}" if good else f"\\boxed{{{n + 1}}} NO-{n}")
            answers.append(str(n))
        expected.append((2.0 if kind == "weighted" else 1.0) if good else 0.0)
    return prompts, completions, answers, expected


@pytest.fixture(scope="module")
def rubrics(judge_server):
    url, script = judge_server
    script.set("Q-loops", judge_says)
    math = MathRubric(workers=1)
    judge = JudgeRubric(JudgeConfig(base_url=url, model="scripted"))
    # two sandbox slots per rubric: every step has more programs than slots, so the limiter is contended
    code = CodeRubric("auto", CodeRubricConfig(max_concurrency=2))
    yield {"math": math, "code": code, "judge": judge, "weighted": WeightedRubric({"m": math, "j": judge})}

    async def close() -> None:
        await asyncio.gather(math.aclose(), code.aclose(), judge.aclose())

    run_sync(close())


def in_threads(fn) -> list:
    """fn(thread_index, step) for STEPS steps in each of THREADS threads started together."""
    barrier = threading.Barrier(THREADS)

    def worker(t: int) -> list:
        barrier.wait()
        return [fn(t, s) for s in range(STEPS)]

    with ThreadPoolExecutor(THREADS) as pool:
        return [r for rows in pool.map(worker, range(THREADS)) for r in rows]


@pytest.mark.parametrize("kind", ["math", "code", "judge", "weighted"])
def test_trl_call_sites_from_many_threads_and_loops(rubrics, kind):
    reward, reward_async = trl_reward_functions(rubrics[kind], name=kind)
    trl_loop = asyncio.new_event_loop()  # TRL's daemon loop for async reward functions
    loop_thread = threading.Thread(target=trl_loop.run_forever, daemon=True)
    loop_thread.start()

    def step(t: int, s: int) -> tuple[list, list]:
        prompts, completions, answers, expected = batch(kind, f"trl-{t}-{s}")
        kwargs = {"prompts": prompts, "completions": completions, "completion_ids": None, "answer": answers}
        if t % 3 == 0:  # sync function on the trainer thread
            return reward(**kwargs), expected
        if t % 3 == 1:  # async function gathered on TRL's daemon loop

            async def gather() -> list:
                return await asyncio.gather(reward_async(**kwargs))

            return asyncio.run_coroutine_threadsafe(gather(), trl_loop).result(120)[0], expected
        return asyncio.run(reward_async(**kwargs)), expected  # a fresh loop per step

    try:
        rows = in_threads(step)
    finally:
        trl_loop.call_soon_threadsafe(trl_loop.stop)
        loop_thread.join(30)
    assert len(rows) == THREADS * STEPS
    for got, expected in rows:
        assert got == expected


@pytest.mark.parametrize("kind", ["math", "code", "judge", "weighted"])
def test_verl_call_sites_from_many_threads_and_loops(rubrics, kind):
    adapter = VerlReward(rubrics[kind], needs_question=kind in ("judge", "weighted"))

    def step(t: int, s: int) -> tuple[list, list]:
        prompts, completions, answers, expected = batch(kind, f"verl-{t}-{s}")
        infos = [{"question": p[0]["content"]} for p in prompts]
        sources = [kind] * len(prompts)
        if t % 4 == 0:  # naive manager: one compute_score per sample, in order
            rows = [
                adapter.compute_score(kind, c, a, i)
                for c, a, i in zip(completions, answers, infos, strict=True)
            ]
        elif t % 4 == 1:  # batch manager
            rows = adapter.compute_score_batch(sources, completions, answers, infos)
        elif t % 4 == 2:  # reward loop: a sync compute_score in a 32-thread executor
            with ThreadPoolExecutor(32) as pool:
                rows = list(
                    pool.map(
                        lambda x: adapter.compute_score(kind, *x),
                        zip(completions, answers, infos, strict=True),
                    )
                )
        else:  # reward loop with the async function, on its own loop

            async def run() -> list:
                calls = (
                    adapter.compute_score_async(kind, c, a, i)
                    for c, a, i in zip(completions, answers, infos, strict=True)
                )
                return list(await asyncio.gather(*calls))

            rows = asyncio.run(run())
        assert all(r["verified"] == 1.0 for r in rows), rows
        return [r["score"] for r in rows], expected

    for got, expected in in_threads(step):
        assert got == expected


@pytest.mark.parametrize("kind", ["math", "code", "judge", "weighted"])
def test_verifiers_reward_function_from_successive_loops_and_threads(rubrics, kind):
    reward = reward_function(rubrics[kind])

    def step(t: int, s: int) -> tuple[list, list]:
        prompts, completions, answers, expected = batch(kind, f"vf-{t}-{s}")

        async def run() -> list:
            return list(
                await asyncio.gather(
                    *(reward(p, c, a) for p, c, a in zip(prompts, completions, answers, strict=True))
                )
            )

        return asyncio.run(run()), expected

    for got, expected in in_threads(step):
        assert got == expected


def test_reward_server_over_the_same_rubrics_from_many_client_threads(rubrics, serve):
    """The server's loop scores rubric objects that every other test above used on other loops."""
    url = serve(create_app(rubrics, ServerConfig(cache_size=0, max_inflight=3)))  # contended windows

    def step(t: int, s: int) -> tuple[list, list]:
        kind = ["math", "code", "judge", "weighted"][(t + s) % 4]
        prompts, completions, answers, expected = batch(kind, f"server-{t}-{s}")
        items = [
            {"prompt": p, "completion": c, "answer": a.to_dict() if isinstance(a, TestSuite) else a}
            for p, c, a in zip(prompts, completions, answers, strict=True)
        ]
        with httpx.Client(base_url=url, timeout=120) as http:
            body = http.post("/score_batch", json={"rubric": kind, "items": items}).json()
        return [r["score"] for r in body["results"]], expected

    for got, expected in in_threads(step):
        assert got == expected


class Holders:
    """How many coroutines are inside the limiter now and at most (counted across threads)."""

    def __init__(self) -> None:
        self.lock, self.inside, self.peak = threading.Lock(), 0, 0

    async def hold(self, limiter: Limiter) -> None:
        async with limiter:
            with self.lock:
                self.inside += 1
                self.peak = max(self.peak, self.inside)
            await asyncio.sleep(0.001)
            with self.lock:
                self.inside -= 1


def test_limiter_bounds_holders_across_loops_and_survives_cancellation():
    limiter, holders = Limiter(3), Holders()

    def loop_body() -> None:
        async def run() -> None:
            tasks = [asyncio.create_task(holders.hold(limiter)) for _ in range(20)]
            victim = asyncio.create_task(holders.hold(limiter))
            await asyncio.sleep(0)
            victim.cancel()  # cancelled while queued: must not leak or double-grant a slot
            await asyncio.gather(*tasks, victim, return_exceptions=True)

        asyncio.run(run())

    threads = [threading.Thread(target=loop_body) for _ in range(4)]
    for th in threads:
        th.start()
    for th in threads:
        th.join(60)
    assert holders.peak == 3  # contended from 4 loops, never more than its capacity
    assert limiter.held == 0 and limiter.waiting == 0  # every slot came back
    with pytest.raises(ValueError):
        Limiter(0)


def test_run_sync_refuses_to_deadlock_on_its_own_loop():
    async def inner() -> None:
        coro = asyncio.sleep(0)
        with pytest.raises(RuntimeError, match="deadlock"):
            run_sync(coro)

    run_sync(inner())
    assert run_sync(asyncio.sleep(0, result=7)) == 7


async def test_limiter_weighted_grants_are_all_or_nothing_and_fifo():
    limiter = Limiter(4)
    await limiter.acquire(3)
    big = asyncio.create_task(limiter.acquire(4))  # needs everything: queued
    small = asyncio.create_task(limiter.acquire(1))  # fits now, but waits behind `big` (FIFO)
    await asyncio.sleep(0)
    assert not big.done() and not small.done() and limiter.waiting == 5
    limiter.release(3)
    await big
    assert limiter.held == 4 and not small.done()
    limiter.release(4)
    await small
    assert limiter.held == 1
    queued = asyncio.create_task(limiter.acquire(4))
    await asyncio.sleep(0)
    queued.cancel()  # a cancelled big request must not block the small one behind it
    behind = asyncio.create_task(limiter.acquire(2))
    await asyncio.gather(queued, return_exceptions=True)
    await behind
    assert limiter.held == 3 and limiter.waiting == 0
    with pytest.raises(ValueError):
        await limiter.acquire(5)
