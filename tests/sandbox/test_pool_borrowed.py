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
