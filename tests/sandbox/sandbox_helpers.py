"""Shared helpers for the sandbox tests (imported by test modules in this folder)."""

from __future__ import annotations

import os
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


def pids_bound(box, processes: int) -> int:
    """Fewer processes than this is what a job limited to `processes` may reach on `box`: its own
    cap where the backend writes the job's cgroup (bwrap with cgroups; Docker's workers whose
    container cgroup is writable here, as root), else the backstop the backend documents (bwrap
    without cgroups, e.g. a non-root user: RLIMIT_NPROC, slots x (processes + 8), counted in the
    sandbox; Docker: the container's pids limit)."""
    if type(box).__name__ == "DockerSandbox":
        per_job = all(w.slot is not None for w in box._workers) and box._workers
        return processes if per_job else box.config.pids
    return processes if box.cgroups else box.config.slots * (processes + 8)


def sandbox_uid(box=None) -> int:
    """The uid a job of `box` (default: bwrap) runs as: Docker's image user, 65534; bwrap's 65534
    when the host process is root (it drops to it), else the user's own (a non-root user cannot
    switch uid, and has nothing more privileged)."""
    if type(box).__name__ == "DockerSandbox" or os.geteuid() == 0:
        return 65534
    return os.getuid()
