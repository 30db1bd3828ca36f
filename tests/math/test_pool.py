"""The CAS worker pool: parent-enforced deadlines, memory limits, recycling, thread/event-loop safety."""

from __future__ import annotations

import asyncio
import threading

from rubrics.math import CasPool, MathPolicy, verify

HARD = (
    r"\boxed{\frac{\sqrt{\sqrt{11}+\sqrt{194}}}{2\sqrt{33}+15}}",
    r"\frac{\sqrt{\sqrt{11}+\sqrt{194}}}{15+2\sqrt{33}}",
)


def test_deadline_kills_and_replaces_the_worker(pool):
    first_pid = pool._idle[0].proc.pid
    out = pool.run(("probe", "sleep", 30), timeout=0.5)
    assert out.status == "timeout"
    assert pool.stats["timeouts"] == 1
    again = pool.run(("probe", "echo", "alive"), timeout=30)
    assert again.status == "ok" and again.value == "alive"
    assert pool._idle[0].proc.pid != first_pid


def test_memory_limit_is_an_error_not_a_crash_of_the_caller():
    with CasPool(workers=1, memory_mb=600) as small:
        out = small.run(("probe", "alloc", 2000), timeout=30)
        assert out.status == "error"
        assert small.run(("probe", "echo", 3), timeout=30).value == 3


def test_workers_are_recycled_after_max_tasks():
    with CasPool(workers=1, max_tasks=2) as p:
        for i in range(5):
            assert p.run(("probe", "echo", i), timeout=30).value == i
        assert p.stats["recycled"] == 2


def test_closed_pool_answers_error():
    p = CasPool(workers=1)
    p.close()
    p.close()
    assert p.run(("probe", "echo", 1), timeout=1).status == "error"


def test_same_verdicts_from_main_thread_other_threads_and_event_loop(pool):
    cases = [HARD, (r"\boxed{(x+1)^2}", "x^2+2x+1"), (r"\boxed{x^2}", "x^3"), (r"\boxed{3}", "3.0")]
    main = [verify(p, g, pool=pool) for p, g in cases]
    threaded: list = []
    t = threading.Thread(target=lambda: threaded.extend(verify(p, g, pool=pool) for p, g in cases))
    t.start()
    t.join()

    async def in_loop():
        return await asyncio.gather(*(asyncio.to_thread(verify, p, g, pool=pool) for p, g in cases))

    looped = asyncio.run(in_loop())
    assert [v.correct for v in main] == [True, True, False, True]
    assert main == threaded == list(looped)


def test_cas_timeout_is_reported_as_timeout(pool):
    verdict = verify(*HARD, policy=MathPolicy(cas_timeout_s=0.0), pool=pool)
    assert verdict.reason == "timeout" and not verdict.verified
    assert verify(*HARD, pool=pool).correct
