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
    out = pool.run(("probe", "spin", 30), timeout=0.5)
    assert out.status == "timeout" and "CPU" in out.detail and out.cpu_s >= 0.4
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


def test_a_worker_that_stalls_without_computing_is_killed_at_the_wall_cap():
    with CasPool(workers=1, wall_factor=2.0) as p:
        out = p.run(("probe", "sleep", 30), timeout=0.2)  # no CPU spent: the wall cap (0.4 s) ends it
        assert out.status == "timeout" and out.cpu_s < 0.2
        assert p.run(("probe", "echo", 1), timeout=5).value == 1


def test_waiting_for_a_worker_is_not_the_checks_time(pool):
    """A job queued behind a busy worker gets its whole CPU budget once it runs."""
    busy = threading.Thread(target=pool.run, args=(("probe", "spin", 0.6), 5.0))
    busy.start()
    while not pool.backlog and pool._idle:  # until the spin holds the only worker
        threading.Event().wait(0.001)
    out = pool.run(("probe", "spin", 0.1), timeout=0.3)  # waits ~0.6 s, then needs 0.1 s of CPU
    busy.join()
    assert out.status == "ok" and out.value == "spun" and 0.05 < out.cpu_s < 0.3
    assert pool.stats["timeouts"] == pool.stats["queue_timeouts"] == 0


def test_a_queue_bound_is_its_own_timeout():
    with CasPool(workers=1, queue_timeout=0.05) as p:
        busy = threading.Thread(target=p.run, args=(("probe", "spin", 0.5), 5.0))
        busy.start()
        while p._idle:
            threading.Event().wait(0.001)
        late = p.run(("probe", "echo", 1), timeout=5)
        busy.join()
        assert late.status == "timeout" and "queue" in late.detail and p.stats["queue_timeouts"] == 1
