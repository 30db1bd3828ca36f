"""Warm-pool jobs run outside the slot threads, on the caller's thread or event loop.

A slot thread owns its worker's lifecycle (on cgroup v1 a process is born in the slot's cgroup only
when that thread spawns it), but any thread may run a job on a warm, idle worker while holding its
`lock`; the job's own process is forked by the worker, so it lands in the slot whoever sends it.

* `run_sync` borrows an idle worker on the calling thread: no hand-off to the slot thread.
* `run` borrows one on the calling event loop (`Worker.run_async`): the loop reads the job's pipes
  and the worker's reply itself, so no thread blocks per job and no job waits for a hand-off to a
  thread and back (sequential p50 0.83-0.95x of the slot-thread path in paired runs, see
  benchmarks/results/sandbox_bench.md).

When every worker is busy and at least one of them runs a job for an event loop, `run` waits for
the next worker a loop hands back (a loop job frees its worker without any thread in between); when
none is (they all run jobs for threads), the job goes through `submit`. So does anything else a
borrower cannot do: a job that is not for the warm pool, or one that finds a slot without a live
worker (never started, or killed after a limit hit); `run` then also has every slot thread start
its worker in the background (`_warm_all`), so that the next jobs find them all warm.
"""

from __future__ import annotations

import asyncio
import threading
from collections import deque
from concurrent.futures import Future

from sandbox.backend import warm_slots
from sandbox.core import ExecResult, Job, SandboxError


class NeedsSlotThread(Exception):
    """A borrowed run would have to start a worker: use the slot thread."""


class WarmBorrowing:
    """Mixin for a warm-pool backend. The backend provides `config.slots`, its slot threads `_pool`,
    `_workers` (guarded by `_workers_lock`), `_closed`, `stats`, `submit(job)`, `_warm_slot()` and
    `_borrow_plan(job)`, and calls `_init_borrowing()` in its `__init__`."""

    _workers: list
    _workers_lock: threading.Lock
    _closed: bool
    stats: dict[str, int]

    def submit(self, job: Job) -> Future[ExecResult]:
        raise NotImplementedError

    def _warm_slot(self) -> None:
        """On a slot thread: start its worker if it has no live one (holding the worker's lock)."""
        raise NotImplementedError

    def _warm_all(self) -> Future[None]:
        """Have every slot thread of `_pool` run `_warm_slot` once (`warm_slots`)."""
        return warm_slots(self._pool, self.config.slots, self._warm_slot)

    async def warm_up(self) -> None:
        """Start every slot's warm worker now instead of on its first Python job."""
        await asyncio.wrap_future(self._warm_all())

    def _borrow_plan(self, job: Job) -> dict | None:
        """How a warm worker runs `job`, or None when it must go through `submit`."""
        raise NotImplementedError

    async def run(self, job: Job) -> ExecResult:
        result = await self._run_on_loop(job)
        return result if result is not None else await asyncio.wrap_future(self.submit(job))

    def run_sync(self, job: Job) -> ExecResult:
        """Blocking run: on the calling thread with an idle warm worker, else through `submit`.
        Called on an event loop whose own `run` jobs hold workers, it raises SandboxError instead of
        waiting for them (they cannot finish while it blocks their loop)."""
        result = self._run_borrowed(job)
        if result is not None:
            return result
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            loop = None
        if loop is not None:
            with self._workers_lock:
                mine = any(w.loop is loop for w in self._workers)
            if mine:
                raise SandboxError(
                    "run_sync() on an event loop whose own jobs hold this sandbox's workers would wait "
                    "for itself: await run(job) instead"
                )
        return self.submit(job).result()

    def _init_borrowing(self) -> None:
        """Call from the backend's `__init__`."""
        self._loop_lock = threading.Lock()  # guards the two below
        self._loop_jobs = 0  # jobs running for event loops now
        self._loop_waiters: deque[tuple[asyncio.AbstractEventLoop, asyncio.Future[None]]] = deque()
        self._rewarm: Future[None] | None = None  # the `_warm_all` that `run` started, if any

    def _idle_worker(self, job: Job):
        """A warm, idle worker for `job` with its lock held by the caller; None if there is none."""
        with self._workers_lock:
            workers = list(self._workers)
        for w in workers:
            if w.lock.acquire(blocking=False):
                if w.warm_for(job):
                    return w
                w.lock.release()
        return None

    def _all_alive(self) -> bool:
        with self._workers_lock:
            workers = list(self._workers)
        return len(workers) == self.config.slots and all(w.alive() for w in workers)

    def _start_missing_workers(self) -> None:
        """Some slot has no live worker: start them all in the background, one `_warm_all` at a time."""
        with self._loop_lock:
            if self._rewarm is None or self._rewarm.done():
                try:
                    self._rewarm = self._warm_all()
                except RuntimeError:  # closed meanwhile: its slot threads are gone
                    pass

    def _counted(self, result: ExecResult) -> ExecResult:
        self.stats["jobs"] += 1
        self.stats["pool_jobs"] += 1
        return result

    def _run_borrowed(self, job: Job) -> ExecResult | None:
        """`job` on the calling thread; None if it needs a slot thread (nothing of it has run then)."""
        plan = None if self._closed else self._borrow_plan(job)
        w = None if plan is None else self._idle_worker(job)
        if w is None:
            return None
        try:
            return self._counted(w.run(job, plan, borrowed=True))
        except NeedsSlotThread:
            return None
        finally:
            w.lock.release()

    async def _run_on_loop(self, job: Job) -> ExecResult | None:
        """`job` on the calling event loop; None if it needs a slot thread."""
        plan = None if self._closed else self._borrow_plan(job)
        if plan is None:
            return None
        while (w := self._idle_worker(job)) is None:
            if self._closed:
                return None
            if not self._all_alive():
                self._start_missing_workers()
                return None
            if not await self._next_loop_release():
                return None
        loop = w.loop = asyncio.get_running_loop()
        with self._loop_lock:
            self._loop_jobs += 1
        try:
            return self._counted(await w.run_async(job, plan))  # it releases the worker's lock
        except NeedsSlotThread:
            return None
        finally:
            if w.loop is loop:  # (another loop's job may have taken the worker since)
                w.loop = None
            with self._loop_lock:
                self._loop_jobs -= 1
                woken = self._released_waiters()
            for waiter in woken:
                _wake(waiter)

    def _released_waiters(self) -> list[tuple[asyncio.AbstractEventLoop, asyncio.Future[None]]]:
        """The waiters a finished loop job wakes (caller holds `_loop_lock`): the first in line, or
        all of them when it was the last loop job. A woken waiter that cannot take a worker (it found
        it dead, so it submits) does not pass its wake on; with no loop job left to wake the rest,
        they would wait for ever."""
        if self._loop_jobs == 0:
            woken = list(self._loop_waiters)
            self._loop_waiters.clear()
            return woken
        return [self._loop_waiters.popleft()] if self._loop_waiters else []

    async def _next_loop_release(self) -> bool:
        """Wait until a loop job hands its worker back; False at once when no loop job is running
        (the workers are busy with thread jobs: the caller submits instead)."""
        loop = asyncio.get_running_loop()
        fut: asyncio.Future[None] = loop.create_future()
        entry = (loop, fut)
        with self._loop_lock:
            if self._loop_jobs == 0:
                return False
            self._loop_waiters.append(entry)
        try:
            await fut
        except BaseException:
            with self._loop_lock:
                try:
                    self._loop_waiters.remove(entry)
                    handed = None
                except ValueError:  # woken already: pass the release on to the next waiter
                    handed = self._loop_waiters.popleft() if self._loop_waiters else None
            if handed is not None:
                _wake(handed)
            raise
        return True


def _wake(waiter: tuple[asyncio.AbstractEventLoop, asyncio.Future[None]]) -> None:
    loop, fut = waiter

    def settle() -> None:
        if not fut.done():
            fut.set_result(None)

    try:
        loop.call_soon_threadsafe(settle)
    except RuntimeError:  # that loop is closed: nobody waits there any more
        pass
