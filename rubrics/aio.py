"""Async plumbing that works from any event loop and any thread, concurrently.

Rubrics are shared objects: one instance may be called from a trainer's main thread, from TRL's
async reward loop, from a veRL thread pool and from a reward server at once. asyncio's own
`Semaphore`/`Lock` bind to the first loop that waits on them and then fail ("bound to a different
event loop") or hang on every other loop, so rubrics never keep asyncio primitives in their state.

* `Limiter(n)`: an async (weighted) semaphore usable from any loop and thread (`async with
  limiter:`, or `acquire(k)`/`release(k)`). Fair (FIFO); a waiter cancelled while its units are being
  handed over gives them back. `Limiter(1)` is a lock. Picklable (a copy starts empty).
* `run_sync(coro)`: runs `coro` on the process's one persistent reward loop (a daemon thread started
  on first use, restarted in a forked child) and blocks for the result. Sync trainer adapters use it,
  so every sync call, from any thread, shares one loop: pooled judge connections and in-flight
  de-duplication survive from one training step to the next. Calling it from the reward loop itself
  would deadlock and raises instead.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import os
import threading
from collections import deque
from collections.abc import Coroutine
from typing import Any, TypeVar

T = TypeVar("T")


class Limiter:
    """At most `capacity` units held at once, across every event loop and thread (see module doc).

    `acquire(n)` takes n units at once (all or nothing, so callers taking several can never deadlock
    each other); grants are first come, first served."""

    def __init__(self, capacity: int) -> None:
        if capacity < 1:
            raise ValueError(f"capacity must be >= 1, got {capacity}")
        self.capacity = capacity
        self._lock = threading.Lock()
        self._free = capacity
        self._waiters: deque[tuple[asyncio.AbstractEventLoop, asyncio.Future[None], int]] = deque()

    @property
    def held(self) -> int:
        return self.capacity - self._free

    @property
    def waiting(self) -> int:
        """Units asked for by queued callers."""
        return sum(n for _, _, n in self._waiters)

    async def acquire(self, n: int = 1) -> None:
        if not 1 <= n <= self.capacity:
            raise ValueError(f"cannot acquire {n} of a capacity of {self.capacity}")
        loop = asyncio.get_running_loop()
        with self._lock:
            if self._free >= n and not self._waiters:
                self._free -= n
                return
            waiter: asyncio.Future[None] = loop.create_future()
            entry = (loop, waiter, n)
            self._waiters.append(entry)
        try:
            await waiter
        except asyncio.CancelledError:
            with self._lock:
                queued = entry in self._waiters
                if queued:
                    self._waiters.remove(entry)
            if queued:
                self._wake()  # a smaller request behind us may fit now
            elif waiter.done() and not waiter.cancelled():
                self.release(n)  # the units reached us just as we were cancelled: pass them on
            # (granted but still pending: `_grant` sees the cancel and passes them on)
            raise

    def release(self, n: int = 1) -> None:
        with self._lock:
            if self._free + n > self.capacity:
                raise RuntimeError("Limiter released more often than acquired")
            self._free += n
        self._wake()

    def _wake(self) -> None:
        here = running_loop()
        with self._lock:
            while self._waiters and self._waiters[0][2] <= self._free:
                loop, waiter, n = self._waiters.popleft()
                try:  # the units move to the waiter (on its own loop: no self-pipe write, no syscall)
                    if loop is here:
                        loop.call_soon(self._grant, waiter, n)
                    else:
                        loop.call_soon_threadsafe(self._grant, waiter, n)
                except RuntimeError:  # its loop is closed: that waiter is gone
                    continue
                self._free -= n

    def _grant(self, waiter: asyncio.Future[None], n: int) -> None:
        if waiter.done():  # cancelled before the units arrived
            self.release(n)
        else:
            waiter.set_result(None)

    async def __aenter__(self) -> Limiter:
        await self.acquire()
        return self

    async def __aexit__(self, *exc: object) -> None:
        self.release()

    def __getstate__(self) -> dict[str, Any]:
        return {"capacity": self.capacity}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(state["capacity"])  # type: ignore[misc]


def running_loop() -> asyncio.AbstractEventLoop | None:
    """The event loop running in this thread, else None."""
    try:
        return asyncio.get_running_loop()
    except RuntimeError:
        return None


# --- the persistent reward loop for synchronous callers ------------------------------------------

_state: dict[str, Any] = {"pid": None, "loop": None, "thread": None}
_state_lock = threading.Lock()


def _reset_after_fork() -> None:
    global _state_lock
    _state_lock = threading.Lock()
    _state.update(pid=None, loop=None, thread=None)


os.register_at_fork(after_in_child=_reset_after_fork)


def reward_loop() -> asyncio.AbstractEventLoop:
    """The process's persistent loop for sync callers, started on first use (a daemon thread)."""
    with _state_lock:
        thread = _state["thread"]
        if _state["pid"] != os.getpid() or thread is None or not thread.is_alive():
            loop = asyncio.new_event_loop()
            thread = threading.Thread(target=loop.run_forever, name="rlvr-reward-loop", daemon=True)
            thread.start()
            _state.update(pid=os.getpid(), loop=loop, thread=thread)
        return _state["loop"]


def run_sync(coro: Coroutine[Any, Any, T], timeout: float | None = None) -> T:
    """Run `coro` on the reward loop and wait for it (from any thread, with or without a running loop).
    On `timeout` the coroutine is cancelled and `TimeoutError` raised."""
    loop = reward_loop()
    try:
        running = asyncio.get_running_loop()
    except RuntimeError:
        running = None
    if running is loop:
        coro.close()
        raise RuntimeError("run_sync called on the reward loop itself (it would deadlock): await instead")
    future = asyncio.run_coroutine_threadsafe(coro, loop)
    try:
        return future.result(timeout)
    except concurrent.futures.TimeoutError:
        future.cancel()
        raise TimeoutError(f"reward call exceeded {timeout}s") from None
