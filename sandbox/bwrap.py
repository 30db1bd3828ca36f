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
import functools
import os
import posixpath
import shutil
import subprocess
import threading
import time
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from queue import SimpleQueue

from sandbox import _proc, seccomp, staging
from sandbox.backend import (
    PRELOAD,
    SCRATCH,
    SlotResults,
    _as_bytes,
    _one_line,
    _validate_rel,
    job_env,
    python_problem,
    sandbox_python,
)
from sandbox.borrow import WarmBorrowing
from sandbox.cgroups import CgroupError, CgroupSet, Slot
from sandbox.core import ExecResult, Job, Limits, SandboxError, SandboxUnavailable, default_slots
from sandbox.pool import Worker, job_plan

PROBE_WALL_S = 60.0  # a probe job's wall limit (generous: the host may be busy)


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
    # interpreter inside the sandbox, from the read-only host /usr (`sandbox.backend.sandbox_python`)
    python: str = field(default_factory=sandbox_python)
    preload: tuple[str, ...] = PRELOAD  # modules the warm worker imports once
    shm_mb: int = 16
    worker_overhead_mb: int = 96  # memory allowance for the warm worker on top of the job's limit


class BwrapSandbox(WarmBorrowing, SlotResults):
    """The bubblewrap backend. `await run(job)`, `run_sync(job)`, `close()`; see the module doc."""

    name = "bwrap"

    def __init__(self, config: BwrapConfig | None = None):
        self.config = cfg = config or BwrapConfig()
        self._root = os.geteuid() == 0
        if shutil.which(cfg.bwrap) is None:
            raise SandboxUnavailable(
                f"bubblewrap not found ({cfg.bwrap!r}); fix: apt-get install -y bubblewrap"
            )
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
        w = self._local.worker
        if w is None:
            w = self._local.worker = Worker(self, self._local.slot)
            with self._workers_lock:
                self._workers.append(w)
        return w

    def _run_blocking(self, job: Job) -> ExecResult:
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
        """A job's rlimits as set inside the sandbox (a pool worker sets them on each job): there
        RLIMIT_NPROC counts the sandbox's own tasks, the backstop where no cgroup caps pids."""
        return _proc.job_rlimits(limits, self._nproc_backstop(limits))

    def _nproc_backstop(self, limits: Limits) -> int | None:
        return None if self.cgroups else self.config.slots * (limits.processes + 8)

    def host_nproc(self, allowance: int, headroom: int = 0) -> int:
        """RLIMIT_NPROC to set before `bwrap` starts (no cgroups): `allowance` more tasks. Root drops
        to the sandbox uid, which runs nothing else. A non-root user's sandbox runs as that user, and
        the kernel checks the limit a user namespace was created with against every task of the uid
        (the user's shell, vLLM's threads, ...), so the allowance is added to the tasks it runs now,
        plus `headroom` for a sandbox that lives on while the user's other tasks come and go."""
        return allowance if self._root else _proc.uid_tasks(os.getuid()) + allowance + headroom

    def _oneshot_rlimits(self, limits: Limits) -> list[tuple[int, int]]:
        """A one-shot job's rlimits, set on the host before `bwrap` starts: the backstop counted as
        `host_nproc` counts it there."""
        backstop = self._nproc_backstop(limits)
        return _proc.job_rlimits(limits, backstop and self.host_nproc(backstop))

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
            pre = self.preexec(slot, self._oneshot_rlimits(limits), keep, chan_w)
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
        """Run a shell command, then a Python job (through a warm worker when the pool is on) in the
        real sandbox; return why jobs cannot run here, one line with the fix, or None."""
        problem = python_problem(self.config.python)
        if problem:
            return problem
        limits = Limits(wall_time_s=PROBE_WALL_S)
        try:
            res = self._pool.submit(
                self._run_oneshot, Job(("/bin/sh", "-c", "exit 7"), limits=limits)
            ).result()
        except (SandboxError, OSError, subprocess.SubprocessError) as e:
            return _with_fix(f"bubblewrap cannot create a sandbox here: {e}")
        if res.exit_code != 7:
            return _with_fix(f"bubblewrap probe failed (exit {res.exit_code}): {res.stderr[-300:]!r}")
        job = Job((self.config.python, "-c", "print(6*7)"), limits=limits)
        try:
            res = self._pool.submit(self._probe_python, job).result()
        except (SandboxError, OSError, subprocess.SubprocessError) as e:
            return _one_line(f"bubblewrap runs commands but not a Python job: {e}")
        if res.stdout.strip() != b"42":
            return _one_line(
                f"{self.config.python} failed in the sandbox (exit {res.exit_code}, limit "
                f"{res.limit_hit.value}): {res.stderr[-300:]!r}"
            )
        return None

    def _probe_python(self, job: Job) -> ExecResult:
        """On a slot thread: run `job` as a caller's would be (a warm worker when the pool is on),
        then stop that worker again and zero the stats: a pool starts workers on first use or
        `warm_up()`, and counts only the caller's jobs."""
        try:
            return self._run_blocking(job)
        finally:
            w = self._local.worker
            if w is not None:
                with w.lock:
                    w.stop()
            self.stats.update(dict.fromkeys(self.stats, 0))

    def in_sandbox_mounts(self, owned: list[int]) -> list[str]:
        """bwrap options that put the in-sandbox files (`sandbox.staging`) at their `DEST` without
        the sandbox's uid reading the install path: memfds, or the staged copy on an old bwrap."""
        if _has_bind_data(self.config.bwrap):
            return staging.bind_data_args(owned)
        root = staging.staged_dir()
        closed = [p for p in [root, *map(str, Path(root).parents)] if not os.stat(p).st_mode & 0o001]
        if self._root and closed:  # bwrap opens the copy as the sandbox's uid
            raise SandboxUnavailable(
                f"{_old_bwrap(self.config.bwrap)}: its copy of the sandbox's files is in {closed[0]}, "
                "which other users cannot enter; fix: set TMPDIR=/tmp or upgrade bubblewrap to 0.5+"
            )
        mounts: list[str] = []
        for name in staging.IN_SANDBOX:
            mounts += ["--ro-bind", f"{root}/{name}", staging.dest(name)]
        return mounts


def _old_bwrap(bwrap: str) -> str:
    return f"{bwrap} has no --ro-bind-data (bubblewrap < 0.5)"


@functools.cache
def _has_bind_data(bwrap: str) -> bool:
    """Whether this bubblewrap has `--ro-bind-data` (0.5 and later)."""
    try:
        out = subprocess.run([bwrap, "--help"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.SubprocessError):
        return False
    return "--ro-bind-data" in out.stdout + out.stderr


# bubblewrap's words for "no user namespaces here" and the fix (one line each)
_USERNS_FIX = (
    "enable unprivileged user namespaces (sysctl -w kernel.unprivileged_userns_clone=1; on Ubuntu "
    "24.04+ also kernel.apparmor_restrict_unprivileged_userns=0); inside a container, run it with "
    "--security-opt seccomp=unconfined --security-opt apparmor=unconfined (or use the docker backend)"
)
_FIXES = (
    (  # EAGAIN: a task limit, not a missing feature (checked first: the same message names the namespace)
        "Resource temporarily unavailable",
        "the user is at its task limit (RLIMIT_NPROC counts every process and thread of the uid, "
        "sandboxes included; see `ulimit -u`): raise it, or run as root (cgroups cap each sandbox instead)",
    ),
    ("creating new namespace", _USERNS_FIX),
    ("uid map", _USERNS_FIX),
    ("new namespace failed", _USERNS_FIX),
    (
        "Can't mount proc",
        "the container hides /proc from new namespaces: run it with --privileged or "
        "--security-opt systempaths=unconfined (or use the docker backend)",
    ),
    ("Permission denied", "the sandbox's uid cannot read a path it needs: report this as a bug"),
)


def _with_fix(reason: str) -> str:
    """`reason` on one line, with the fix for a failure bubblewrap is known to report."""
    fix = next((f for needle, f in _FIXES if needle.lower() in reason.lower()), None)
    return _one_line(f"{reason}; fix: {fix}" if fix else reason)
