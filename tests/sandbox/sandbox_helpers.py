"""Shared helpers for the sandbox tests (imported by test modules in this folder)."""

from __future__ import annotations

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
