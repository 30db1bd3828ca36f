"""`await run(job)` on a warm, idle worker runs on the caller's event loop (`sandbox.borrow`): no slot
thread, the same results and limits as the slot-thread path, waiting for a loop's worker when all
are busy, and a fall-back to the slot threads whenever the loop cannot do the job itself."""

from __future__ import annotations

import asyncio
import shutil
import threading

import pytest
from sandbox_helpers import SUM, py, slot_thread_calls

from sandbox import LimitHit, SandboxError
from sandbox.bwrap import BwrapConfig, BwrapSandbox


def _on_loop(slots: int, test) -> None:
    """`asyncio.run(test(box))` on a fresh warm pool of `slots` slots, closed afterwards."""
    if shutil.which("bwrap") is None:
        pytest.skip("bubblewrap not installed")
    box = BwrapSandbox(BwrapConfig(slots=slots, warm_pool=True))
    try:
        asyncio.run(test(box))
    finally:
        box.close_sync()


async def _healthy(box) -> None:
    res = await box.run(py(SUM, stdin=b"1 2 3"))
    assert res.ok, res
    assert res.stdout == b"6\n"


def test_warm_jobs_run_on_the_loop_with_the_same_limits():
    async def main(box):
        await box.warm_up()
        slot_calls = slot_thread_calls(box)
        for _ in range(3):
            await _healthy(box)
        assert slot_calls == [] and box.stats["worker_starts"] == 1

        loud = await box.run(py("import sys\nsys.stdout.write('x' * 100000)", output_bytes=1000))
        assert loud.limit_hit is LimitHit.OUTPUT and loud.stdout == b"x" * 1000
        assert box.stats["worker_recycles"] == 1  # over the cap: the sandbox is killed
        await _healthy(box)  # the dead worker is not borrowed: the slot thread starts a new one
        assert len(slot_calls) == 1 and box.stats["worker_starts"] == 2

        res = await box.run(py("while True:\n    pass", wall_time_s=0.5))
        assert res.limit_hit is LimitHit.WALL_TIME and box.stats["worker_recycles"] == 2
        failed = await box.run(py("import sys\nprint('out')\nsys.exit(3)"))
        assert failed.exit_code == 3 and failed.stdout == b"out\n" and len(slot_calls) == 2

    _on_loop(1, main)


def test_a_cold_pool_starts_every_slot_worker_then_runs_on_the_loop():
    async def main(box):
        slot_calls = slot_thread_calls(box)
        await _healthy(box)  # no worker yet: the slot thread runs it and every slot is started
        assert len(slot_calls) == 1 and box._rewarm is not None
        await asyncio.wrap_future(box._rewarm)
        assert len(box._workers) == 2 and all(w.alive() for w in box._workers)
        results = await asyncio.gather(*(box.run(py(f"print({i})")) for i in range(6)))
        assert [r.stdout for r in results] == [f"{i}\n".encode() for i in range(6)]
        assert len(slot_calls) == 1 and box.stats["worker_starts"] == 2

    _on_loop(2, main)


def test_more_jobs_than_workers_wait_on_the_loop():
    async def main(box):
        await box.warm_up()
        slot_calls = slot_thread_calls(box)
        results = await asyncio.gather(*(box.run(py(f"print({i} * 7)")) for i in range(12)))
        assert [r.stdout for r in results] == [f"{i * 7}\n".encode() for i in range(12)]
        assert slot_calls == []  # every job waited for a worker the loop handed back
        assert box._loop_jobs == 0 and not box._loop_waiters

    _on_loop(2, main)


BREAKERS = {  # jobs whose limit hit takes their worker down
    "output": (py("import sys\nsys.stdout.write('x' * 100000)", output_bytes=1000), LimitHit.OUTPUT),
    "wall_time": (py("while True:\n    pass", wall_time_s=0.3), LimitHit.WALL_TIME),
}


@pytest.mark.parametrize("how", list(BREAKERS))
def test_waiters_are_not_stranded_when_every_job_breaks_its_worker(how):
    """A woken waiter that finds its worker dead submits to a slot thread and does not pass the wake
    on; the last loop job to end must wake every waiter left, or they wait for ever (a CI hang of
    test_cheats_never_get_credit, where cheats kill or overflow their worker)."""
    job, limit = BREAKERS[how]

    async def main(box):
        await box.warm_up()
        results = await asyncio.wait_for(asyncio.gather(*(box.run(job) for _ in range(8))), 60)
        assert [r.limit_hit for r in results] == [limit] * 8
        assert box.stats["worker_recycles"] == 8
        assert box._loop_jobs == 0 and not box._loop_waiters
        await _healthy(box)

    _on_loop(2, main)


def test_workers_busy_with_thread_jobs_send_the_job_to_theslot_thread_calls():
    async def main(box):
        await box.warm_up()
        reached = threading.Event()
        slot_calls = slot_thread_calls(box, reached)
        worker = box._workers[0]
        worker.lock.acquire()  # as if a thread were running a job on it: no loop job to wait for
        try:
            task = asyncio.ensure_future(box.run(py("print(6 * 7)")))
            assert await asyncio.to_thread(reached.wait, 30)  # fell back to the slot thread
            assert not task.done()
        finally:
            worker.lock.release()
        assert (await task).stdout == b"42\n" and len(slot_calls) == 1

    _on_loop(1, main)


def test_run_sync_on_a_loop_whose_jobs_hold_the_workers_raises_instead_of_hanging():
    async def main(box):
        await box.warm_up()
        busy = asyncio.ensure_future(box.run(py("import sys\nprint(sys.stdin.read())", stdin=b"x" * 10)))
        await asyncio.sleep(0)  # let it take the worker (a step of the loop, not a timed wait)
        assert box._workers[0].loop is asyncio.get_running_loop()
        with pytest.raises(SandboxError, match="await run"):
            box.run_sync(py("print(1)"))
        assert (await busy).stdout == b"x" * 10 + b"\n"
        assert box._workers[0].loop is None
        assert box.run_sync(py("print(1)")).stdout == b"1\n"  # an idle worker: borrowed here

    _on_loop(1, main)


def test_a_cancelled_loop_job_takes_its_worker_down_off_the_loop():
    async def main(box):
        await box.warm_up()
        slot_calls = slot_thread_calls(box)
        worker = box._workers[0]
        stopped_on: list[int] = []
        stop = worker.stop
        worker.stop = lambda: (stopped_on.append(threading.get_ident()), stop())[1]
        with pytest.raises(TimeoutError):
            await asyncio.wait_for(box.run(py("while True:\n    pass", wall_time_s=60)), 0.5)
        assert box._loop_jobs == 0
        assert await asyncio.to_thread(worker.lock.acquire, True, 30)  # freed once the kill is done
        worker.lock.release()
        assert stopped_on and threading.get_ident() not in stopped_on  # killed by a thread
        assert box.stats["worker_recycles"] == 1 and not worker.alive()
        await _healthy(box)  # a fresh worker from the slot thread
        assert len(slot_calls) == 1 and box.stats["worker_starts"] == 2

    _on_loop(1, main)
