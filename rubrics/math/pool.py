"""A pre-forked pool of CAS worker processes with hard wall-clock deadlines enforced from the parent.

* Workers come from a `forkserver` that has sympy preloaded: a replacement is a cheap fork, and the
  parent (which may run threads and an event loop) is never forked itself.
* `run(payload, timeout)` sends one job to an idle worker and waits on its pipe. Past the deadline the
  parent SIGKILLs the worker and starts a replacement: nothing relies on `signal.alarm`, so calls from
  the main thread, other threads or an event loop's executor behave identically.
* Each worker caps its address space (`RLIMIT_AS`) and is recycled after `max_tasks` jobs; a worker
  that dies (memory, segfault) yields an `error` outcome and is replaced.
* Thread-safe: each worker serves one caller at a time. A pool created in one process is never used
  from a forked child (the child lazily builds its own).
"""

from __future__ import annotations

import multiprocessing as mp
import os
import resource
import threading
import time
from dataclasses import dataclass
from typing import Any

_PRELOAD = ["rubrics.math.worker"]


@dataclass(frozen=True)
class Outcome:
    status: str  # "ok" | "timeout" | "error"
    value: Any = None
    detail: str = ""


def _worker_main(conn: Any, memory_mb: int) -> None:
    if memory_mb:
        limit = memory_mb * 1024 * 1024
        try:
            resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
        except (ValueError, OSError):
            pass
    from rubrics.math.worker import handle

    while True:
        try:
            job = conn.recv()
        except (EOFError, OSError):
            return
        if job is None:
            return
        try:
            conn.send(("ok", handle(job)))
        except MemoryError:
            conn.send(("error", "worker out of memory"))
        except Exception as exc:  # noqa: BLE001 - reported to the parent as an error outcome
            conn.send(("error", f"{type(exc).__name__}: {exc}"[:300]))


class _Worker:
    def __init__(self, ctx: Any, memory_mb: int) -> None:
        self.conn, child = ctx.Pipe()
        self.proc = ctx.Process(target=_worker_main, args=(child, memory_mb), daemon=True)
        self.proc.start()
        child.close()
        self.tasks = 0

    def kill(self) -> None:
        try:
            self.proc.kill()
        except (OSError, AttributeError):
            pass
        self.proc.join(timeout=5)
        self.conn.close()

    def stop(self) -> None:
        try:
            self.conn.send(None)
        except OSError:
            pass
        self.proc.join(timeout=1)
        if self.proc.is_alive():
            self.kill()
        else:
            self.conn.close()


class CasPool:
    """`workers` CAS processes; `run` is blocking and thread-safe (see module docstring)."""

    def __init__(self, workers: int = 1, max_tasks: int = 1000, memory_mb: int = 2048) -> None:
        if workers < 1:
            raise ValueError("workers must be >= 1")
        self._ctx = mp.get_context("forkserver")
        self._ctx.set_forkserver_preload(_PRELOAD)
        self.max_tasks = max_tasks
        self.memory_mb = memory_mb
        self._pid = os.getpid()
        self._cond = threading.Condition()
        self._idle = [_Worker(self._ctx, memory_mb) for _ in range(workers)]
        self._size = workers
        self._closed = False
        self.stats = {"jobs": 0, "timeouts": 0, "errors": 0, "recycled": 0}

    def _checkout(self, deadline: float) -> _Worker | None:
        with self._cond:
            while not self._idle:
                left = deadline - time.monotonic()
                if left <= 0 or self._closed:
                    return None
                self._cond.wait(left)
            return self._idle.pop() if not self._closed else None

    def _checkin(self, worker: _Worker | None) -> None:
        with self._cond:
            if worker is None:
                worker = _Worker(self._ctx, self.memory_mb)
            if self._closed:
                worker.stop()
                return
            self._idle.append(worker)
            self._cond.notify()

    def run(self, payload: Any, timeout: float) -> Outcome:
        """Run one job; past `timeout` seconds (queueing included) the worker is killed: `timeout`."""
        if self._closed:
            return Outcome("error", detail="pool closed")
        deadline = time.monotonic() + timeout
        worker = self._checkout(deadline)
        if worker is None:
            return Outcome("timeout", detail="no free worker before the deadline")
        self.stats["jobs"] += 1
        try:
            worker.conn.send(payload)
            if worker.conn.poll(max(deadline - time.monotonic(), 0.0)):
                status, value = worker.conn.recv()
            else:
                worker.kill()
                self.stats["timeouts"] += 1
                self._checkin(None)
                return Outcome("timeout", detail=f"CAS deadline {timeout:.2f}s")
        except (EOFError, OSError, BrokenPipeError) as exc:
            worker.kill()
            self.stats["errors"] += 1
            self._checkin(None)
            return Outcome("error", detail=f"worker died: {type(exc).__name__}")
        worker.tasks += 1
        if worker.tasks >= self.max_tasks:
            worker.stop()
            self.stats["recycled"] += 1
            worker = None
        self._checkin(worker)
        if status != "ok":
            self.stats["errors"] += 1
            return Outcome("error", detail=str(value))
        return Outcome("ok", value)

    @property
    def usable(self) -> bool:
        return not self._closed and os.getpid() == self._pid

    def close(self) -> None:
        """Stop every worker. Safe to call more than once; callers in `run` get `error`/`timeout`."""
        with self._cond:
            if self._closed:
                return
            self._closed = True
            idle, self._idle = self._idle, []
            self._cond.notify_all()
        if os.getpid() == self._pid:
            for worker in idle:
                worker.stop()

    def __enter__(self) -> CasPool:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


_default: CasPool | None = None
_default_lock = threading.Lock()


def default_pool() -> CasPool:
    """The process-wide pool `check_answer` uses (1 worker; rebuilt after a fork)."""
    global _default
    with _default_lock:
        if _default is None or not _default.usable:
            _default = CasPool(workers=int(os.environ.get("RLVR_MATH_WORKERS", "1")))
        return _default
