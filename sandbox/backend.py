"""What every pool backend shares (bubblewrap, Docker): job files and environment, the warm
worker's preloads, limit classification, `ExecResult` assembly and warming every slot thread.

Below `bwrap`, `pool`, `borrow` and `docker` in the import graph: it imports no backend.
"""

from __future__ import annotations

import os
import posixpath
import signal
import sys
import threading
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor

from sandbox.cgroups import Slot
from sandbox.core import ExecResult, Job, LimitHit, Limits

SCRATCH = "/tmp"
START_BARRIER_S = 60.0  # how long `warm_slots` waits for every slot thread to be free
BASE_ENV = {
    "PATH": "/usr/local/bin:/usr/bin:/bin",
    "HOME": SCRATCH,
    "TMPDIR": SCRATCH,
    "LANG": "C.UTF-8",
    "PYTHONDONTWRITEBYTECODE": "1",
}
# Where a sandbox looks for its interpreter: it sees the host's /usr read-only, never a venv's or
# pyenv's python (those usually live under /root or a home the sandbox's uid cannot read).
SANDBOX_PYTHONS = ("/usr/bin/python3", "/usr/local/bin/python3")
VISIBLE = ("/usr/", "/bin/", "/sbin/", "/lib/", "/lib64/")  # host paths a sandbox sees (read-only)


def sandbox_python() -> str:
    """The first of `SANDBOX_PYTHONS` on this host (the first name if none: `python_problem` says so)."""
    return next((p for p in SANDBOX_PYTHONS if os.access(p, os.X_OK)), SANDBOX_PYTHONS[0])


def python_problem(python: str) -> str | None:
    """Why `python` cannot be the interpreter of a sandbox that mounts the host's /usr (one line
    with the fix), or None. The interpreter's stdlib comes with it from /usr; the worker and the
    harness need nothing else (stdlib only; their own files are handed over, `sandbox.staging`)."""
    fix = (
        f"install one under /usr (apt-get install -y python3) or pass python=<path under /usr>; this "
        f"process's own {sys.executable} is not visible inside the sandbox"
    )
    if not python.startswith(VISIBLE):
        return f"the sandbox's interpreter {python} is outside the host dirs a sandbox sees (/usr, /bin, /lib*): {fix}"
    if not os.path.exists(python):
        return f"the sandbox's interpreter {python} does not exist on this host: {fix}"
    if not os.stat(python).st_mode & 0o001:
        return f"the sandbox's interpreter {python} is not executable by other users (the sandbox's uid): chmod o+rx it"
    return None


def _one_line(text: str) -> str:
    """`text` on one line (a bytes repr's \\n escapes and real newlines become spaces)."""
    return " ".join(text.replace("\\n", " ").split())


# Modules the warm worker imports once. Not `threading` or `random` (or `statistics`, which imports
# random): their at-fork hooks cost ~0.2-0.3 ms in every forked job; a job that needs them imports them.
PRELOAD = (
    "abc",
    "array",
    "ast",
    "bisect",
    "collections",
    "contextlib",
    "copy",
    "dataclasses",
    "decimal",
    "enum",
    "fractions",
    "functools",
    "heapq",
    "io",
    "itertools",
    "json",
    "math",
    "operator",
    "re",
    "runpy",
    "string",
    "sys",
    "textwrap",
    "traceback",
    "types",
    "typing",
)


def _validate_rel(path: str) -> str:
    norm = posixpath.normpath(path)
    if not path or path.startswith("/") or norm.startswith("..") or norm in (".", "") or "\0" in path:
        raise ValueError(f"job file path must be relative and stay inside the scratch dir: {path!r}")
    return norm


def _as_bytes(content: str | bytes) -> bytes:
    return content.encode() if isinstance(content, str) else bytes(content)


def job_env(job: Job) -> dict[str, str]:
    env = dict(BASE_ENV)
    for k, v in job.env.items():
        if not k or "=" in k or "\0" in k or "\0" in v:
            raise ValueError(f"bad environment variable {k!r}")
        env[k] = v
    return env


def classify(
    reason: str,
    exit_code: int | None,
    sig: int | None,
    stderr: bytes,
    oom: bool,
    pids_hit: bool,
    cpu_s: float = 0.0,
    cpu_limit_s: float = float("inf"),
    wall_s: float = 0.0,
) -> LimitHit:
    """Which limit ended the job. Exit codes and signals decide; stderr only names the errno."""
    if reason == "timeout":
        return LimitHit.WALL_TIME
    if reason == "output":
        return LimitHit.OUTPUT
    if oom:
        return LimitHit.MEMORY
    if sig == signal.SIGXCPU or (sig == signal.SIGKILL and max(cpu_s, wall_s) >= cpu_limit_s - 0.05):
        # a pid-1 job ignores SIGXCPU and gets SIGKILL at the hard limit; the launcher's rusage may miss
        # its CPU time, and nothing else SIGKILLs without a timeout/OOM, so wall >= limit is the fallback
        return LimitHit.CPU_TIME
    if sig == signal.SIGXFSZ:
        return LimitHit.FILE_SIZE
    if exit_code not in (0, None):
        tail = stderr[-2048:]
        if b"MemoryError" in tail:
            return LimitHit.MEMORY
        if b"[Errno 27] File too large" in tail or b"[Errno 28] No space left" in tail:
            return LimitHit.FILE_SIZE
        if pids_hit or b"[Errno 11] Resource temporarily unavailable" in tail:
            return LimitHit.PROCESSES
    return LimitHit.NONE


def warm_slots(pool: ThreadPoolExecutor, slots: int, warm: Callable[[], None]) -> Future[None]:
    """Run `warm` once on EVERY slot thread of `pool` (a slot's worker is started only by its own
    thread): each call waits at a barrier until all `slots` threads hold one, so no thread takes two.
    The future is done when all are warm (the first failure, if any, is its exception)."""
    barrier = threading.Barrier(slots)

    def one() -> None:
        barrier.wait(START_BARRIER_S)
        warm()

    futures = [pool.submit(one) for _ in range(slots)]
    done: Future[None] = Future()

    lock = threading.Lock()

    def settle(_: Future) -> None:
        with lock:
            if all(f.done() for f in futures) and not done.done():
                errors = [f.exception() for f in futures if f.exception() is not None]
                done.set_exception(errors[0]) if errors else done.set_result(None)

    for f in futures:
        f.add_done_callback(settle)
    return done


class SlotResults:
    """Per-job limit bookkeeping and `ExecResult` assembly shared by the backends."""

    name = ""

    def _prepare_slot(
        self, slot: Slot | None, limits: Limits, memory_mb: int, extra_pids: int = 1
    ) -> tuple[int, int]:
        """Set the slot's limits for this job. pids.max counts the job's processes plus the launcher
        (bwrap), `extra_pids` more (a warm worker), and on v1 the slot thread itself."""
        if slot is None or slot.version == "none":
            return 0, 0
        overhead = extra_pids + (1 if slot.version == "v1" and slot.holds_thread else 0)
        slot.set_limits(memory_mb, limits.processes + overhead)
        return slot.counters()

    def _result(
        self,
        cap,
        slot,
        reason,
        exit_code,
        sig,
        oom0,
        pids0,
        wall,
        cpu,
        cpu_limit,
        peak=None,
        sweep=True,
        refresh=True,
    ) -> ExecResult:
        """`refresh=False`: the caller has just refreshed the slot's counters (one read per job)."""
        oom = pids_hit = False
        if slot is not None and slot.version != "none":
            if sweep:
                slot.kill_all()  # one-shot safety net (the pid namespace is already gone)
            oom_now, pids_now = slot.counters(refresh=refresh)
            oom, pids_hit = oom_now > oom0, pids_now > pids0
        stderr = bytes(cap.data["stderr"])
        return ExecResult(
            exit_code=exit_code,
            signal=sig,
            stdout=bytes(cap.data["stdout"]),
            stderr=stderr,
            stdout_truncated=cap.truncated["stdout"],
            stderr_truncated=cap.truncated["stderr"],
            wall_time_s=wall,
            cpu_time_s=cpu,
            peak_memory_mb=peak,
            limit_hit=classify(reason, exit_code, sig, stderr, oom, pids_hit, cpu, cpu_limit, wall),
            backend=self.name,
            channel=bytes(cap.data.get("channel", b"")),
            channel_truncated=cap.truncated.get("channel", False),
        )
