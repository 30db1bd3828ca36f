"""Host-side process plumbing shared by the backends: spawning with exact fds, capped collection.

Everything here is blocking and runs on a backend's slot thread, never on an event loop.
"""

from __future__ import annotations

import fcntl
import math
import os
import resource
import select
import signal
import subprocess
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from sandbox.core import CHANNEL_FD, Limits

HIGH_FD = 10


def high_fd(fd: int) -> int:
    """Move a close-on-exec fd to a number >= HIGH_FD so it can never collide with 0-3 in a child."""
    if fd >= HIGH_FD:
        return fd
    new = fcntl.fcntl(fd, fcntl.F_DUPFD_CLOEXEC, HIGH_FD)
    os.close(fd)
    return new


def pipe() -> tuple[int, int]:
    """A close-on-exec pipe (read, write), both ends numbered >= HIGH_FD."""
    r, w = os.pipe()
    return high_fd(r), high_fd(w)


def memfd_with(data: bytes, name: str = "sandbox") -> int:
    """A close-on-exec memfd holding `data` at offset 0 (stdin or a file payload, no writer thread)."""
    fd = high_fd(os.memfd_create(name))
    view = memoryview(data)
    while view:
        n = os.write(fd, view)
        view = view[n:]
    os.lseek(fd, 0, os.SEEK_SET)
    return fd


def job_rlimits(limits: Limits, nproc_backstop: int | None) -> list[tuple[int, int]]:
    """Per-process rlimits for a job: CPU, address space, file size, no core dumps, no POSIX mqueues."""
    cpu = max(1, int(limits.cpu_time_s + 0.999))
    out = [
        (resource.RLIMIT_CPU, cpu),
        (resource.RLIMIT_AS, limits.memory_mb << 20),
        (resource.RLIMIT_FSIZE, limits.file_size_mb << 20),
        (resource.RLIMIT_CORE, 0),
        (resource.RLIMIT_MSGQUEUE, 0),
        (resource.RLIMIT_NOFILE, 256),
    ]
    if nproc_backstop:
        out.append((resource.RLIMIT_NPROC, nproc_backstop))
    return out


def uid_tasks(uid: int) -> int:
    """Tasks (threads included) whose real uid is `uid`, from /proc: what the kernel counts against
    RLIMIT_NPROC for that uid. Tasks gone while reading are skipped."""
    total = 0
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            with open(f"/proc/{entry.name}/status", "rb") as f:
                status = f.read()
        except OSError:
            continue
        fields = dict(line.split(b":", 1) for line in status.splitlines() if b":" in line)
        if int(fields.get(b"Uid", b"-1 ").split()[0]) == uid:
            total += int(fields.get(b"Threads", b"1"))
    return total


def make_preexec(
    *,
    uid: int | None,
    gid: int | None,
    cgroup_procs: str | None,
    rlimits: Sequence[tuple[int, int]],
    keep: Sequence[int],
    channel_w: int | None,
) -> Callable[[], None]:
    """Child-side set-up before exec (runs after fork, single-threaded, before `bwrap`).

    Order: join the v2 cgroup (needs root), drop to the sandbox uid/gid with no supplementary
    groups, lower rlimits, then make the fd table exact: `channel_w` becomes CHANNEL_FD, the `keep`
    fds become inheritable and every other inheritable fd >= 3 is closed (we run with
    close_fds=False so that fd CHANNEL_FD can be placed; close-on-exec fds vanish at exec).
    """

    def preexec() -> None:
        if cgroup_procs:
            with open(cgroup_procs, "w") as f:
                f.write("0")
        if gid is not None:
            os.setgroups([])
            os.setgid(gid)
        if uid is not None:
            os.setuid(uid)
        for res, val in rlimits:
            soft, hard = resource.getrlimit(res)
            new = val if hard == resource.RLIM_INFINITY else min(val, hard)
            resource.setrlimit(res, (new, new))
        if channel_w is not None:
            os.dup2(channel_w, CHANNEL_FD)
            os.set_inheritable(CHANNEL_FD, True)
        lowest = CHANNEL_FD + 1 if channel_w is not None else 3
        keep_set = set(keep)
        for fd in keep_set:
            os.set_inheritable(fd, True)
        for name in os.listdir("/proc/self/fd"):
            fd = int(name)
            if fd >= lowest and fd not in keep_set:
                try:
                    if os.get_inheritable(fd):
                        os.close(fd)
                except OSError:
                    pass

    return preexec


def spawn(argv: Sequence[str], *, stdin: int, stdout: int, stderr: int, preexec: Callable[[], None]):
    """Start `argv` in a new session with exactly the fds `preexec` arranges."""
    return subprocess.Popen(
        list(argv),
        stdin=stdin,
        stdout=stdout,
        stderr=stderr,
        close_fds=False,
        start_new_session=True,
        preexec_fn=preexec,  # noqa: PLW1509 - minimal, fork-safe set-up; see make_preexec
    )


@dataclass
class Capture:
    """Capped capture of several pipes plus an optional 'done' fd (pidfd or control socket).

    One `poll` object per capture (no epoll descriptor to create, fill and close per job)."""

    fds: dict[str, int]
    cap: int
    data: dict[str, bytearray] = field(default_factory=dict)
    truncated: dict[str, bool] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.poller = select.poll()
        self.names: dict[int, str] = {}
        for name, fd in self.fds.items():
            os.set_blocking(fd, False)
            self.poller.register(fd, select.POLLIN)
            self.names[fd] = name
            self.data[name] = bytearray()
            self.truncated[name] = False
        self.open = set(self.fds)

    def pump(
        self, deadline: float, done_fd: int | None = None, on_done: Callable[[], bool] | None = None
    ) -> str:
        """Read until the pipes close and `done_fd` fired. Returns 'done', 'timeout' or 'output'.

        `on_done` is called when `done_fd` is readable; it returns True when the job has finished
        (e.g. the exit record arrived) and may be called again if it returns False.
        """
        finished = done_fd is None
        if done_fd is not None:
            self.poller.register(done_fd, select.POLLIN)
        try:
            while self.open or not finished:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return "timeout"
                for fd, _ in self.poller.poll(math.ceil(remaining * 1000)):
                    if fd == done_fd:
                        if on_done is None or on_done():
                            finished = True
                            self.poller.unregister(done_fd)
                        continue
                    if self._read(self.names[fd]) == "output":
                        return "output"
            return "done"
        finally:
            if done_fd is not None and not finished:
                try:
                    self.poller.unregister(done_fd)
                except KeyError:
                    pass

    def _read(self, name: str) -> str:
        fd = self.fds[name]
        try:
            chunk = os.read(fd, 1 << 16)
        except BlockingIOError:
            return ""
        if not chunk:
            self.poller.unregister(fd)
            self.open.discard(name)
            return ""
        buf = self.data[name]
        room = self.cap - len(buf)
        if len(chunk) > room:
            buf += chunk[: max(room, 0)]
            self.truncated[name] = True
            return "output"
        buf += chunk
        return ""

    def drain(self) -> None:
        """After a kill: take what is already buffered (non-blocking), within the cap."""
        for name in list(self.open):
            for _ in range(64):
                try:
                    chunk = os.read(self.fds[name], 1 << 16)
                except (BlockingIOError, OSError):
                    break
                if not chunk:
                    break
                buf = self.data[name]
                room = self.cap - len(buf)
                if len(chunk) > room:
                    buf += chunk[: max(room, 0)]
                    self.truncated[name] = True
                    break
                buf += chunk

    def close(self) -> None:
        for fd in self.fds.values():
            try:
                os.close(fd)
            except OSError:
                pass


def kill_tree(proc: subprocess.Popen) -> None:
    """SIGKILL the launcher's process group; namespaced children die with it (die-with-parent / pid ns)."""
    for target in (lambda: os.killpg(proc.pid, signal.SIGKILL), proc.kill):
        try:
            target()
        except OSError:
            pass


def reap(proc: subprocess.Popen) -> tuple[int, resource.struct_rusage | None]:
    """Blocking wait4 on the launcher; records the status on the Popen object. Returns (status, rusage)."""
    try:
        _, status, ru = os.wait4(proc.pid, 0)
    except ChildProcessError:
        return (proc.returncode if proc.returncode is not None else -1), None
    proc.returncode = os.waitstatus_to_exitcode(status)
    return proc.returncode, ru


def decode_status(code: int) -> tuple[int | None, int | None]:
    """Launcher exit code -> (exit_code, signal). bwrap/docker report death by signal N as 128+N."""
    if code < 0:
        return None, -code
    if 128 < code <= 128 + 64:
        return None, code - 128
    return code, None
