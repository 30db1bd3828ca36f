"""`CasPool.arun`: the event-loop path to the CAS workers (no thread) keeps every `run` guarantee."""

from __future__ import annotations

import asyncio
import os
import signal
import threading

import pytest

from rubrics.math import CasPool, MathPolicy, verify
from rubrics.math.policy import DEFAULT_POLICY
from rubrics.math.rubric import averify

CAS_CASES = [
    (r"\boxed{(x+1)^2}", "x^2+2x+1"),
    (r"\boxed{x^2}", "x^3"),
    (
        r"\boxed{\frac{\sqrt{\sqrt{11}+\sqrt{194}}}{2\sqrt{33}+15}}",
        r"\frac{\sqrt{\sqrt{11}+\sqrt{194}}}{15+2\sqrt{33}}",
    ),
]


async def _started(task: asyncio.Task, pool: CasPool) -> None:
    """Let `task` run until its job is on a worker (it holds the pool's only worker)."""
    for _ in range(100):
        await asyncio.sleep(0)
        if pool.stats["jobs"] and not pool._idle:
            return
    raise AssertionError("the job never reached a worker")


async def test_async_verdicts_equal_the_blocking_ones(pool):
    blocking = [verify(p, g, pool=pool) for p, g in CAS_CASES]
    looped = await asyncio.gather(*(averify(p, g, DEFAULT_POLICY, pool) for p, g in CAS_CASES))
    assert [v.correct for v in blocking] == [True, False, True]
    assert list(looped) == blocking
    assert all(v.reason != "timeout" for v in looped)


async def test_deadline_kills_and_replaces_the_worker(pool):
    first_pid = pool._idle[0].proc.pid
    out = await pool.arun(("probe", "spin", 30), timeout=0.5)
    assert out.status == "timeout" and pool.stats["timeouts"] == 1 and out.cpu_s >= 0.4
    again = await pool.arun(("probe", "echo", "alive"), timeout=30)
    assert again.status == "ok" and again.value == "alive"
    assert pool._idle[0].proc.pid != first_pid


async def test_cas_deadline_of_a_check_is_timeout_not_zero(pool):
    verdict = await averify(*CAS_CASES[2], MathPolicy(cas_timeout_s=0.0), pool)
    assert verdict.reason == "timeout" and not verdict.verified


async def test_a_dead_worker_fails_only_its_own_job(pool):
    pid = pool._idle[0].proc.pid
    doomed = asyncio.create_task(pool.arun(("probe", "sleep", 30), timeout=60))
    await _started(doomed, pool)
    queued = asyncio.create_task(pool.arun(("probe", "echo", "next"), timeout=60))
    os.kill(pid, signal.SIGKILL)
    died, served = await asyncio.gather(doomed, queued)
    assert died.status == "error" and "worker died" in died.detail
    assert served.status == "ok" and served.value == "next"  # the replacement took the queued job


async def test_a_cancelled_callers_answer_is_dropped_and_its_worker_serves_on(pool):
    pid = pool._idle[0].proc.pid
    task = asyncio.create_task(pool.arun(("probe", "sleep", 0.3), timeout=60))
    await _started(task, pool)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    out = await pool.arun(("probe", "echo", 1), timeout=30)  # queued behind the dropped job
    assert out.value == 1 and pool._idle[0].proc.pid == pid
    assert pool.stats["timeouts"] == pool.stats["errors"] == 0


async def test_waiters_are_served_first_come_first_served(pool):
    order: list[int] = []

    async def job(i: int) -> None:
        out = await pool.arun(("probe", "echo", i), timeout=60)
        order.append(out.value)

    blocker = asyncio.create_task(pool.arun(("probe", "sleep", 0.2), timeout=60))
    await _started(blocker, pool)
    tasks = [asyncio.create_task(job(i)) for i in range(6)]
    await asyncio.gather(blocker, *tasks)
    assert order == list(range(6))


async def test_a_waiter_that_gives_up_loses_no_worker(pool):
    blocker = asyncio.create_task(pool.arun(("probe", "sleep", 0.3), timeout=60))
    await _started(blocker, pool)
    late = await pool.arun(("probe", "echo", 1), timeout=5, queue_timeout=0.05)
    assert late.status == "timeout" and "no free worker" in late.detail
    assert (await blocker).status == "ok"
    assert (await pool.arun(("probe", "echo", 2), timeout=5)).value == 2
    assert len(pool._idle) == 1


async def test_closing_the_pool_releases_async_waiters():
    pool = CasPool(workers=1)
    busy = pool._idle[0].proc
    blocker = asyncio.create_task(pool.arun(("probe", "sleep", 30), timeout=60))
    await _started(blocker, pool)
    waiter = asyncio.create_task(pool.arun(("probe", "echo", 1), timeout=60))
    await asyncio.sleep(0)
    await asyncio.to_thread(pool.close)
    assert (await waiter).status == "error"
    assert (await blocker).status == "error"  # its worker was stopped, not left computing
    assert busy.poll() is not None
    assert (await pool.arun(("probe", "echo", 1), timeout=1)).status == "error"


def test_loops_in_several_threads_and_blocking_callers_share_one_pool():
    expected = [verify(p, g) for p, g in CAS_CASES]
    with CasPool(workers=2) as pool:
        results: dict[str, list] = {}

        def on_own_loop(name: str) -> None:
            async def go():
                return list(
                    await asyncio.gather(*(averify(p, g, DEFAULT_POLICY, pool) for p, g in CAS_CASES))
                )

            results[name] = asyncio.run(go())

        threads = [threading.Thread(target=on_own_loop, args=(f"loop{i}",)) for i in range(3)]
        threads.append(
            threading.Thread(
                target=lambda: results.setdefault("sync", [verify(p, g, pool=pool) for p, g in CAS_CASES])
            )
        )
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert len(results) == 4 and all(r == expected for r in results.values())


async def test_a_queued_async_job_gets_its_whole_cpu_budget(pool):
    blocker = asyncio.create_task(pool.arun(("probe", "spin", 0.5), timeout=5))
    await _started(blocker, pool)
    queued = await pool.arun(("probe", "spin", 0.1), timeout=0.3)  # waits ~0.5 s first
    assert (await blocker).status == "ok"
    assert queued.status == "ok" and queued.cpu_s < 0.3 and pool.stats["max_wait_ms"] > 0


async def test_an_async_job_that_stalls_without_computing_meets_the_wall_cap():
    with CasPool(workers=1, wall_factor=2.0) as p:
        slept = await p.arun(("probe", "sleep", 30), timeout=0.2)
        assert slept.status == "timeout" and slept.cpu_s < 0.2
        assert (await p.arun(("probe", "echo", 1), timeout=5)).value == 1
