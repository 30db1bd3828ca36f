"""Async plumbing that works from any event loop and any thread, concurrently.

Rubrics are shared objects: one instance may be called from a trainer's main thread, from TRL's
async reward loop, from a veRL thread pool and from a reward server at once. asyncio's own
`Semaphore`/`Lock` bind to the first loop that waits on them and then fail ("bound to a different
event loop") or hang on every other loop, so rubrics never keep asyncio primitives in their state.

* `Limiter(n)`: an async semaphore usable from any loop and thread (`async with limiter:`). Fair
  (FIFO); a waiter cancelled while its slot is being handed over gives the slot back. `Limiter(1)`
  is a lock. Picklable (a copy starts empty).
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
    """At most `capacity` holders at once, across every event loop and thread (see module doc)."""

    def __init__(self, capacity: int) -> None:
        if capacity < 1:
            raise ValueError(f"capacity must be >= 1, got {capacity}")
        self.capacity = capacity
        self._lock = threading.Lock()
        self._held = 0
        self._waiters: deque[tuple[asyncio.AbstractEventLoop, asyncio.Future[None]]] = deque()

    @property
    def held(self) -> int:
        return self._held

    @property
    def waiting(self) -> int:
        return len(self._waiters)

    async def acquire(self) -> None:
        loop = asyncio.get_running_loop()
        with self._lock:
            if self._held < self.capacity and not self._waiters:
                self._held += 1
                return
            waiter: asyncio.Future[None] = loop.create_future()
            entry = (loop, waiter)
            self._waiters.append(entry)
        try:
            await waiter
        except asyncio.CancelledError:
            with self._lock:
                queued = entry in self._waiters
                if queued:
                    self._waiters.remove(entry)
            if not queued and waiter.done() and not waiter.cancelled():
                self.release()  # the slot reached us just as we were cancelled: pass it on
            # (not queued and still pending/cancelled: `_grant` will see the cancel and pass it on)
            raise

    def release(self) -> None:
        with self._lock:
            while self._waiters:
                loop, waiter = self._waiters.popleft()
                try:
                    loop.call_soon_threadsafe(self._grant, waiter)  # the slot moves to the waiter
                    return
                except RuntimeError:  # its loop is closed: that waiter is gone
                    continue
            if self._held <= 0:
                raise RuntimeError("Limiter released more often than acquired")
            self._held -= 1

    def _grant(self, waiter: asyncio.Future[None]) -> None:
        if waiter.done():  # cancelled before the slot arrived
            self.release()
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
