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


# Escape probes shared by the job suite (test_sandbox_escape.py) and the Python session suite
# (test_python_session.py): each runs the same as a script and as a session cell, and prints what it
# found; detectors are harmless (the job's own parent, its own pid, a key of its own).
PROC_SNOOPING = (
    "import os\n"
    "pids = sorted(int(p) for p in os.listdir('/proc') if p.isdigit())\n"
    "print(len(pids))\n"
    "for p in ('/proc/kcore', '/proc/sys/kernel/hostname', '/proc/1/mem', '/proc/1/environ'):\n"
    "    try:\n        print('READ', p) if open(p, 'rb').read(1) else None\n"
    "    except OSError:\n        pass\n"
    "try:\n    open('/proc/sys/kernel/hostname', 'w').write('x'); print('WROTE')\n"
    "except OSError:\n    pass\n"
)


def proc_snooping_contained(out: str) -> bool:
    """Only the sandbox's own processes in /proc; kernel memory, PID 1's memory, the hostname unwritable."""
    lines = out.split("\n")
    return int(lines[0]) <= 3 and not any(
        line.startswith(("READ /proc/kcore", "READ /proc/1/mem", "WROTE")) for line in lines
    )


KEYRING_ADD = (
    "import ctypes, platform\n"
    "nr = {'x86_64': 248, 'aarch64': 217}[platform.machine()]\n"
    "libc = ctypes.CDLL(None, use_errno=True)\n"
    "print(libc.syscall(nr, b'user', b'rlvr-leak', b'secret-1', 8, -4) > 0)\n"  # add_key(..., USER_KEYRING)
)
KEYRING_READ = (
    "import ctypes, platform\n"
    "nr = {'x86_64': 249, 'aarch64': 218}[platform.machine()]\n"
    "libc = ctypes.CDLL(None, use_errno=True)\n"
    "print(libc.syscall(nr, b'user', b'rlvr-leak', None, 0) > 0)\n"  # request_key finds it?
)
FOREIGN_ABI = (  # x32 syscall numbers (bit 30) would bypass an x86_64-only deny list: killed instead
    "import ctypes, platform\n"
    "if platform.machine() == 'x86_64':\n    ctypes.CDLL(None).syscall(0x40000000 | 39)\n"  # x32 getpid
    "print('SURVIVED' if platform.machine() == 'x86_64' else 'skip')\n"
)
MEMORY_SYSCALLS = (  # ptrace, process_vm_readv, pidfd_getfd on the job's own parent: EPERM each
    "import ctypes, os, platform\n"
    "nrs = {'x86_64': (101, 310, 438), 'aarch64': (117, 270, 438)}[platform.machine()]\n"
    "libc = ctypes.CDLL(None, use_errno=True)\n"
    "buf = ctypes.create_string_buffer(1)\n"
    "iov = (ctypes.c_void_p * 2)(ctypes.addressof(buf), 1)\n"
    "calls = [(nrs[0], 16, os.getppid(), 0, 0), (nrs[1], os.getppid(), iov, 1, iov, 1, 0),\n"
    "         (nrs[2], os.pidfd_open(os.getpid()), 0, 0)]\n"
    "for args in calls:\n"
    "    print(libc.syscall(*args), ctypes.get_errno())\n"
)
MEMORY_SYSCALLS_DENIED = "-1 1\n-1 1\n-1 1\n"
