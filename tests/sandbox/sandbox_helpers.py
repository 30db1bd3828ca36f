"""Shared helpers for the sandbox tests (imported by test modules in this folder)."""

from __future__ import annotations

import threading

from sandbox.core import Job, Limits

SUM = "import sys; print(sum(map(int, sys.stdin.read().split())))"


def py(code: str, stdin: bytes = b"", channel: bool = False, **limits) -> Job:
    """A Python job whose program is main.py in the scratch dir."""
    return Job(
        command=("python3", "main.py"),
        files={"main.py": code},
        stdin=stdin,
        channel=channel,
        limits=Limits(**limits),
    )


def assert_healthy(box) -> None:
    """The sandbox still runs a correct job after an abuse case."""
    res = box.run_sync(py(SUM, stdin=b"1 2 3"))
    assert res.ok, res
    assert res.stdout == b"6\n"


def slot_thread_calls(box, seen: threading.Event | None = None) -> list[int]:
    """Record the thread of every job that reaches one of `box`'s slot threads (and set `seen`)."""
    calls: list[int] = []
    inner = box._run_blocking

    def spy(job):
        calls.append(threading.get_ident())
        if seen is not None:
            seen.set()
        return inner(job)

    box._run_blocking = spy
    return calls
