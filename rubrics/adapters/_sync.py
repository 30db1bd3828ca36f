"""Run a coroutine to completion from synchronous trainer code, whether or not a loop is running."""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

T = TypeVar("T")


def run_sync(coro: Coroutine[Any, Any, T]) -> T:
    """`asyncio.run(coro)`, or the same on a helper thread when this thread already runs a loop."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(coro)
    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="rlvr-sync") as pool:
        return pool.submit(asyncio.run, coro).result()
