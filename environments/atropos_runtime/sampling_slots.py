"""Process mode's bound on groups in flight: `max_concurrent_groups` groups *sampling* at once.

A group holds its sampling slot only while its rollouts are being sampled: the env calls
`sampling_done()` once they are (before scoring), so the next group's inference starts while this
one is scored and a slow rubric never leaves the inference server idle. At most as many groups
again may be past sampling (scoring, checking, writing) at once, so a rubric slower than inference
bounds the backlog instead of letting it grow with the run. Outside `run_process` (serve, evaluate,
tests) `sampling_done()` does nothing.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable
from contextvars import ContextVar

_RELEASE: ContextVar[Callable[[], None] | None] = ContextVar("sampling_slot_release", default=None)


def sampling_done() -> None:
    """The current group's rollouts are sampled: give its sampling slot back (idempotent)."""
    release = _RELEASE.get()
    if release is not None:
        release()


class SamplingSlots:
    """At most `groups` groups sampling and `2 * groups` in flight in all (see the module docstring)."""

    def __init__(self, groups: int) -> None:
        self.groups = max(1, groups)
        self._sampling = asyncio.Semaphore(self.groups)
        self._in_flight = asyncio.Semaphore(2 * self.groups)

    @contextlib.asynccontextmanager
    async def group(self) -> AsyncIterator[None]:
        """Holds an in-flight slot for the block, and a sampling slot until `sampling_done()` or the end."""
        async with self._in_flight:
            await self._sampling.acquire()
            held = True

            def release() -> None:
                nonlocal held
                if held:
                    held = False
                    self._sampling.release()

            token = _RELEASE.set(release)
            try:
                yield
            finally:
                _RELEASE.reset(token)
                release()
