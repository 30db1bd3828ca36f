"""The sandbox contract: a `Job` goes in, an `ExecResult` comes out.

`sandbox/` knows nothing about rewards. Backends (bubblewrap, Docker, ...) implement `Sandbox` and
are chosen by name through `get_sandbox`. A backend that cannot isolate on this host refuses with
`SandboxUnavailable` (saying why); it never silently runs code unsandboxed.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import Enum
from typing import Protocol, runtime_checkable

CHANNEL_FD = 3


def default_slots() -> int:
    """One more slot than the CPUs this process may run on. While a job's result travels back to
    the host and the next job is sent, the extra slot keeps every CPU busy. On 2 CPUs, 3 slots
    scored HumanEval 6-11% faster than 2 and ran trivial jobs ~10% faster; 4 slots were no better
    (`benchmarks/results/code_bench.md`). The slot count of both pools unless configured."""
    try:
        cpus = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        cpus = os.cpu_count() or 1
    return cpus + 1


class SandboxUnavailable(RuntimeError):
    """The backend cannot provide isolation on this host; the message says why."""


class SandboxError(RuntimeError):
    """The sandbox itself failed (not the job): treat the job as unverifiable, never as a zero."""


class LimitHit(str, Enum):
    """Which limit ended (or truncated) the job, if any."""

    NONE = "none"
    WALL_TIME = "wall_time"
    CPU_TIME = "cpu_time"
    MEMORY = "memory"
    PROCESSES = "processes"
    OUTPUT = "output"
    FILE_SIZE = "file_size"


@dataclass(frozen=True)
class Limits:
    """Resource limits for one job. Network is always off unless `network` is True."""

    wall_time_s: float = 10.0
    cpu_time_s: float = 10.0
    memory_mb: int = 512
    processes: int = 32
    output_bytes: int = 1 << 20  # per stream; more is dropped and flagged as truncated
    file_size_mb: int = 16
    network: bool = False
    scratch_mb: int = 64  # size of the private writable scratch dir (the job's cwd)


@dataclass(frozen=True)
class Job:
    """Files (relative path -> content) written into a fresh scratch dir, then `command` runs there."""

    command: tuple[str, ...]
    files: Mapping[str, str | bytes] = field(default_factory=dict)
    stdin: bytes = b""
    limits: Limits = field(default_factory=Limits)
    env: Mapping[str, str] = field(default_factory=dict)  # added to a scrubbed environment
    # When True the command gets a private result channel as file descriptor CHANNEL_FD (write end of a
    # pipe the host reads; stdout/stderr stay separate). Trusted harnesses report over it and close it
    # in any child that runs untrusted code, so printed output can never pose as a result.
    channel: bool = False


@dataclass(frozen=True)
class ExecResult:
    """What happened. `exit_code` is None when the process was killed by `signal`."""

    exit_code: int | None
    signal: int | None
    stdout: bytes
    stderr: bytes
    stdout_truncated: bool = False
    stderr_truncated: bool = False
    wall_time_s: float = 0.0
    cpu_time_s: float = 0.0
    peak_memory_mb: float | None = None
    limit_hit: LimitHit = LimitHit.NONE
    backend: str = ""
    channel: bytes = b""  # what was written to CHANNEL_FD (capped like stdout), empty if not requested
    channel_truncated: bool = False

    @property
    def ok(self) -> bool:
        return self.exit_code == 0 and self.limit_hit is LimitHit.NONE


@runtime_checkable
class Sandbox(Protocol):
    """A named isolation backend. `run` is async; `close` releases pools/containers."""

    name: str

    async def run(self, job: Job) -> ExecResult: ...

    async def close(self) -> None: ...
