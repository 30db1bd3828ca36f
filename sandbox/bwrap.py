"""bubblewrap backend: one fresh namespace sandbox per job, or a warm pool of fork-servers for Python.

Isolation per job (both paths):
* runs as an unprivileged host uid (default 65534; when the host process is root it drops to it
  before starting bwrap), inside a new user namespace with every capability dropped,
  no-new-privileges, and no further user namespaces;
* new mount/pid/net/ipc/uts/cgroup namespaces: only loopback, only the sandbox's own processes;
* read-only /usr (+ the /bin, /lib* links), a private size-capped tmpfs as cwd (/tmp), a small
  /dev/shm, everything else (/, /dev) read-only, no /etc, no host home, project or other jobs;
* scrubbed environment, rlimits (CPU, address space, file size, fds, no core, no mqueues),
  per-slot cgroup for memory and pids (see `sandbox.cgroups`; no per-job migration on cgroup v1);
* wall clock enforced by the host: the launcher is killed and the pid namespace dies with it
  (die-with-parent, command or worker is pid 1), so nothing survives the job.

Concurrency: `slots` launcher threads, each owning a cgroup slot and (optionally) one warm worker;
extra jobs queue (back-pressure). A warm-pool job may run on an idle warm worker straight from the
caller's thread or event loop (`sandbox.borrow`); blocking work (starting, killing or reaping a
sandbox) never runs on the caller's event loop.
"""

from __future__ import annotations

import asyncio
import os
import posixpath
import shutil
import signal
import subprocess
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from queue import SimpleQueue

from sandbox import _proc, seccomp
from sandbox.borrow import WarmBorrowing
from sandbox.cgroups import CgroupError, CgroupSet, Slot
from sandbox.core import ExecResult, Job, LimitHit, Limits, SandboxError, SandboxUnavailable, default_slots

SCRATCH = "/tmp"
START_BARRIER_S = 60.0  # how long `warm_slots` waits for every slot thread to be free
BASE_ENV = {
    "PATH": "/usr/local/bin:/usr/bin:/bin",
    "HOME": SCRATCH,
    "TMPDIR": SCRATCH,
    "LANG": "C.UTF-8",
    "PYTHONDONTWRITEBYTECODE": "1",
}
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


@dataclass(frozen=True)
class BwrapConfig:
    """How the bubblewrap backend runs. Defaults work for a root or unprivileged host process."""

    # concurrent jobs; each slot = one launcher thread, one cgroup, one warm worker
    slots: int = field(default_factory=default_slots)
    warm_pool: bool = True  # run `python3 ...` jobs by forking a pre-started interpreter
    uid: int = 65534  # host uid to drop to when the host process is root
    gid: int = 65534
    cgroups: str = "auto"  # "auto" (use when possible), "required" (else unavailable), "off"
    bwrap: str = "bwrap"
    python: str = "/usr/bin/python3"  # interpreter inside the sandbox (from the read-only /usr)
    preload: tuple[str, ...] = PRELOAD  # modules the warm worker imports once
    shm_mb: int = 16
    worker_overhead_mb: int = 96  # memory allowance for the warm worker on top of the job's limit


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


class BwrapSandbox(WarmBorrowing, SlotResults):
    """The bubblewrap backend. `await run(job)`, `run_sync(job)`, `close()`; see the module doc."""

    name = "bwrap"

    def __init__(self, config: BwrapConfig | None = None):
        self.config = cfg = config or BwrapConfig()
        self._root = os.geteuid() == 0
        if shutil.which(cfg.bwrap) is None:
            raise SandboxUnavailable(f"bubblewrap not found ({cfg.bwrap!r}); apt-get install -y bubblewrap")
        self.cgroups: CgroupSet | None = None
        self.notes: list[str] = []
        if cfg.cgroups != "off":
            try:
                self.cgroups = CgroupSet(cfg.slots)
            except (CgroupError, OSError) as e:
                if cfg.cgroups == "required":
                    raise SandboxUnavailable(f"cgroups required but unavailable: {e}") from e
                self.notes.append(f"no cgroups ({e}); memory/pids limited by rlimits only")
        self._seccomp = seccomp.program()
        if self._seccomp is None:
            self.notes.append("no seccomp filter for this architecture")
        self._free: SimpleQueue[Slot | None] = SimpleQueue()
        for i in range(cfg.slots):
            self._free.put(self.cgroups.slots[i] if self.cgroups else Slot(i, "none"))
        self._local = threading.local()
        self._workers: list = []
        self._workers_lock = threading.Lock()
        self._pool = ThreadPoolExecutor(cfg.slots, "bwrap-slot", initializer=self._init_thread)
        self._closed = False
        self._init_borrowing()
        self.stats = {"jobs": 0, "pool_jobs": 0, "worker_starts": 0, "worker_recycles": 0}
        reason = self._probe()
        if reason:
            self._shutdown()
            raise SandboxUnavailable(reason)

    # ---------------------------------------------------------------- public API
    def submit(self, job: Job) -> Future[ExecResult]:
        if self._closed:
            raise SandboxError("sandbox is closed")
        return self._pool.submit(self._run_blocking, job)

    async def close(self) -> None:
        await asyncio.get_running_loop().run_in_executor(None, self._shutdown)

    def close_sync(self) -> None:
        self._shutdown()

    def describe(self) -> str:
        cg = self.cgroups.version if self.cgroups else "none"
        notes = "".join(f"; {n}" for n in self.notes)
        return f"bwrap (slots={self.config.slots}, cgroups={cg}, warm_pool={self.config.warm_pool}{notes})"

    # ---------------------------------------------------------------- slot threads
    def _init_thread(self) -> None:
        slot = self._free.get()
        self._local.slot = slot
        self._local.worker = None
        if slot is not None and slot.version == "v1":
            slot.join_thread()

    def _warm_slot(self) -> None:
        if self.config.warm_pool:
            w = self._worker()
            with w.lock:
                w.ensure()

    def _worker(self):
        from sandbox.pool import Worker

        w = self._local.worker
        if w is None:
            w = self._local.worker = Worker(self, self._local.slot)
            with self._workers_lock:
                self._workers.append(w)
        return w

    def _run_blocking(self, job: Job) -> ExecResult:
        from sandbox.pool import job_plan

        self.stats["jobs"] += 1
        if self.config.warm_pool and not job.limits.network:
            plan = job_plan(job, self.config.python)
            if plan is not None:
                self.stats["pool_jobs"] += 1
                w = self._worker()
                with w.lock:
                    return w.run(job, plan)
        return self._run_oneshot(job)

    def _borrow_plan(self, job: Job) -> dict | None:
        from sandbox.pool import job_plan

        if not self.config.warm_pool or job.limits.network:
            return None
        return job_plan(job, self.config.python)

    def _shutdown(self) -> None:
        if self._closed:
            return
        self._closed = True
        with self._workers_lock:
            workers = list(self._workers)
        for w in workers:
            w.stop()
        self._pool.shutdown(wait=True)
        if self.cgroups:
            self.cgroups.close()

    # ---------------------------------------------------------------- argv
    def seccomp_fd(self) -> int | None:
        """A fresh memfd holding the seccomp program (bwrap reads it once), or None."""
        return _proc.memfd_with(self._seccomp, "seccomp") if self._seccomp else None

    def bwrap_argv(
        self, limits: Limits, *, extra: list[str] | None = None, seccomp_fd: int | None = None
    ) -> list[str]:
        """bwrap options shared by one-shot jobs and warm workers (everything before the files)."""
        cfg = self.config
        uid = cfg.uid if self._root else os.getuid()
        gid = cfg.gid if self._root else os.getgid()
        a = [cfg.bwrap, "--unshare-all", "--unshare-user", "--disable-userns"]
        if limits.network:
            a.append("--share-net")
        a += ["--die-with-parent", "--new-session", "--as-pid-1", "--cap-drop", "ALL"]
        a += ["--uid", str(uid), "--gid", str(gid), "--hostname", "sandbox", "--clearenv"]
        a += ["--ro-bind", "/usr", "/usr"]
        for p in ("/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32"):
            if os.path.islink(p):
                a += ["--symlink", os.readlink(p), p]
            elif os.path.isdir(p):
                a += ["--ro-bind", p, p]
        a += ["--proc", "/proc", "--dev", "/dev"]
        a += ["--size", str(cfg.shm_mb << 20), "--tmpfs", "/dev/shm"]
        a += ["--size", str(limits.scratch_mb << 20), "--tmpfs", SCRATCH, "--chdir", SCRATCH]
        a += extra or []
        a += ["--remount-ro", "/dev", "--remount-ro", "/"]
        if seccomp_fd is not None:
            a += ["--seccomp", str(seccomp_fd)]
        return a

    def job_rlimits(self, limits: Limits) -> list[tuple[int, int]]:
        backstop = None if self.cgroups else self.config.slots * (limits.processes + 8)
        return _proc.job_rlimits(limits, backstop)

    def preexec(self, slot: Slot | None, rlimits, keep, channel_w):
        return _proc.make_preexec(
            uid=self.config.uid if self._root else None,
            gid=self.config.gid if self._root else None,
            cgroup_procs=slot.procs_file if slot is not None and slot.version == "v2" else None,
            rlimits=rlimits,
            keep=keep,
            channel_w=channel_w,
        )

    # ---------------------------------------------------------------- one-shot
    def _run_oneshot(self, job: Job) -> ExecResult:
        if not job.command:
            raise ValueError("job.command is empty")
        limits = job.limits
        slot: Slot | None = self._local.slot
        env = job_env(job)
        owned: list[int] = []  # fds to close in the parent after spawn
        try:
            stdin_fd = _proc.memfd_with(job.stdin, "stdin")
            owned.append(stdin_fd)
            out_r, out_w = _proc.pipe()
            err_r, err_w = _proc.pipe()
            st_r, st_w = _proc.pipe()
            owned += [out_w, err_w, st_w]
            reads = {"stdout": out_r, "stderr": err_r, "status": st_r}
            chan_w = None
            if job.channel:
                chan_r, chan_w = _proc.pipe()
                owned.append(chan_w)
                reads["channel"] = chan_r
            extra = ["--json-status-fd", str(st_w)]
            for k, v in env.items():
                extra += ["--setenv", k, v]
            keep = [st_w]
            sc_fd = self.seccomp_fd()
            if sc_fd is not None:
                owned.append(sc_fd)
                keep.append(sc_fd)
            made_dirs: set[str] = set()
            for path, content in job.files.items():
                rel = _validate_rel(path)
                parent = posixpath.dirname(rel)
                if parent and parent not in made_dirs:
                    extra += ["--dir", f"{SCRATCH}/{parent}"]
                    made_dirs.add(parent)
                data = _as_bytes(content)
                fd = _proc.memfd_with(data, "file")
                owned.append(fd)
                keep.append(fd)
                extra += ["--perms", "0755" if data.startswith(b"#!") else "0644", "--file", str(fd)]
                extra.append(f"{SCRATCH}/{rel}")
            argv = self.bwrap_argv(limits, extra=extra, seccomp_fd=sc_fd) + ["--", *job.command]
            oom0, pids0 = self._prepare_slot(slot, limits, limits.memory_mb + limits.scratch_mb + 64)
            pre = self.preexec(slot, self.job_rlimits(limits), keep, chan_w)
            cap = _proc.Capture(reads, limits.output_bytes)
            t0 = time.monotonic()
            proc = _proc.spawn(argv, stdin=stdin_fd, stdout=out_w, stderr=err_w, preexec=pre)
        except BaseException:
            for fd in owned:
                os.close(fd)
            raise
        for fd in owned:
            os.close(fd)
        pidfd = os.pidfd_open(proc.pid)
        try:
            reason = cap.pump(t0 + limits.wall_time_s, pidfd)
            if reason != "done":
                _proc.kill_tree(proc)
                cap.drain()
            code, ru = _proc.reap(proc)
        finally:
            os.close(pidfd)
            cap.close()
        wall = time.monotonic() - t0
        status = bytes(cap.data["status"])
        if reason == "done" and b"child-pid" not in status:
            raise SandboxError(f"bwrap failed to start the job: {bytes(cap.data['stderr'][-500:])!r}")
        exit_code, sig = _proc.decode_status(code)
        return self._result(
            cap,
            slot,
            reason,
            exit_code,
            sig,
            oom0,
            pids0,
            wall,
            cpu=(ru.ru_utime + ru.ru_stime) if ru else 0.0,
            cpu_limit=limits.cpu_time_s,
            peak=(ru.ru_maxrss / 1024) if ru else None,
        )

    # ---------------------------------------------------------------- probe
    def _probe(self) -> str | None:
        """Run a trivial command in the real sandbox once; return why it cannot work, or None."""
        job = Job(command=("/bin/sh", "-c", "exit 7"), limits=Limits(wall_time_s=10))
        try:
            res = self._pool.submit(self._run_oneshot, job).result()
        except (SandboxError, OSError, subprocess.SubprocessError) as e:
            return f"bubblewrap cannot create a sandbox here: {e}"
        if res.exit_code != 7:
            return f"bubblewrap probe failed (exit {res.exit_code}): {res.stderr[-300:]!r}"
        return None
