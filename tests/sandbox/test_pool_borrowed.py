"""`run_sync` on a warm, idle worker runs on the calling thread; worker (re)starts stay on slot threads."""

from __future__ import annotations

import shutil
import threading

import pytest
from sandbox_helpers import assert_healthy, py, slot_thread_calls

from sandbox import LimitHit
from sandbox.bwrap import BwrapConfig, BwrapSandbox


@pytest.fixture()
def box():
    if shutil.which("bwrap") is None:
        pytest.skip("bubblewrap not installed")
    b = BwrapSandbox(BwrapConfig(slots=1, warm_pool=True))
    yield b
    b.close_sync()


def _in_slot_cgroup(box) -> bool:
    if box.cgroups is None:
        return True
    pid = box._workers[0].proc.pid
    with open(f"/proc/{pid}/cgroup") as handle:
        lines = handle.read()
    return all(d.name in lines and d.parent.name in lines for d in box._workers[0].slot.dirs.values())


def test_warm_worker_is_borrowed_and_restarts_stay_on_the_slot_thread(box):
    slot_calls = slot_thread_calls(box)
    assert_healthy(box)  # no worker yet: the slot thread starts it
    assert len(slot_calls) == 1 and slot_calls[0] != threading.get_ident()
    for _ in range(3):
        assert_healthy(box)  # warm and idle: runs here, no hand-off
    assert len(slot_calls) == 1 and box.stats["worker_starts"] == 1
    assert _in_slot_cgroup(box)

    res = box.run_sync(py("while True:\n    pass", wall_time_s=0.5))  # borrowed, hits the limit
    assert res.limit_hit is LimitHit.WALL_TIME and box.stats["worker_recycles"] == 1
    assert_healthy(box)  # the dead worker is not borrowed: the slot thread starts a new one
    assert len(slot_calls) == 2 and box.stats["worker_starts"] == 2
    assert _in_slot_cgroup(box)


def test_a_busy_worker_is_not_borrowed(box):
    assert_healthy(box)
    reached = threading.Event()
    slot_calls = slot_thread_calls(box, reached)
    worker = box._workers[0]
    with worker.lock:  # as if the slot thread were running a job on it
        done = []
        t = threading.Thread(target=lambda: done.append(box.run_sync(py("print(6 * 7)"))))
        t.start()
        assert reached.wait(30)  # the caller fell back to the slot thread, which waits for the lock
        assert not done and len(slot_calls) == 1
    t.join()
    assert done[0].stdout == b"42\n"


def test_a_worker_stopped_from_two_threads_at_once_closes_each_descriptor_once(box, monkeypatch):
    """The sandbox's close (an executor thread) and a kill thread (recycling or abandoning the worker)
    can stop the same worker together: neither may fail, and neither may close a descriptor twice
    (the second close of a number can hit one another thread has opened since). The first stop is
    held right after it closed the stderr file, where the second used to find it still set."""
    import os

    from sandbox import pool

    assert_healthy(box)
    worker = box._workers[0]
    err_fd, proc = worker.err_fd, worker.proc
    closed, closes, errors = threading.Event(), [], []

    class HeldClose:  # the os module, with the first stop held inside its close of the stderr file
        def __getattr__(self, name):
            return getattr(os, name)

        def close(self, fd: int) -> None:
            os.close(fd)
            if fd == err_fd:
                closes.append(fd)
                closed.set()
                threading.Event().wait(0.3)  # room for the second stop (the fix makes it wait)

    monkeypatch.setattr(pool, "os", HeldClose())

    def stop(after: threading.Event | None) -> None:
        if after is not None:
            after.wait(10)
        try:
            worker.stop()
        except Exception as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    threads = [threading.Thread(target=stop, args=(None,)), threading.Thread(target=stop, args=(closed,))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=30)
    monkeypatch.undo()
    assert errors == [] and closes == [err_fd]
    assert (worker.err_fd, worker.sock, worker.proc) == (None, None, None) and proc.poll() is not None
    assert_healthy(box)  # the slot starts a fresh worker
