"""Per-slot cgroups for memory and pids limits (cgroup v1 and v2), without per-job migration.

A `CgroupSet` owns one directory per controller for this sandbox instance
(`rlvr-sandbox-<pid>-<rand>`), created under the caller's own cgroup where that is writable (v1) or
under the v2 root, with one child per slot. Jobs are born inside their slot instead of being moved
there per job (moving a task costs ~15 ms on cgroup v1):

* v1: the slot's launcher thread writes its own thread id into the slot's `tasks` files once; every
  process it forks afterwards starts in the slot.
* v2: threads cannot sit in different domain cgroups, so the spawned process moves itself
  (`cgroup.procs`) before it execs. This is the documented per-job cost on v2 hosts.

Library code never migrates the calling process as a whole, and `close()` kills what is left in
each slot (never the host process itself) and removes every directory it created. Directories
left by a crashed process (its pid is gone) are swept on the next start.
"""

from __future__ import annotations

import errno
import os
import re
import secrets
import signal
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path("/sys/fs/cgroup")
PREFIX = "rlvr-sandbox-"
V1_CONTROLLERS = ("memory", "pids")
RMDIR_WAIT_S = 2.0


class CgroupError(RuntimeError):
    """Cgroups cannot be used here; the message says why."""


def detect() -> str:
    """'v2' (unified with memory+pids), 'v1' (memory and pids hierarchies), or 'none'."""
    if (ROOT / "cgroup.controllers").exists():
        ctrls = (ROOT / "cgroup.controllers").read_text().split()
        return "v2" if {"memory", "pids"} <= set(ctrls) else "none"
    if all((ROOT / c / "tasks").exists() for c in V1_CONTROLLERS):
        return "v1"
    return "none"


def _own_v1_path(controller: str) -> Path:
    for line in Path("/proc/self/cgroup").read_text().splitlines():
        _, ctrls, path = line.split(":", 2)
        if controller in ctrls.split(","):
            return ROOT / controller / path.lstrip("/")
    return ROOT / controller


def _read(path: Path) -> str:
    """A small control file's text with three syscalls (these are read after every job)."""
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    try:
        return os.read(fd, 4096).decode()
    finally:
        os.close(fd)


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _kill_and_rmdir(path: Path, procs_file: str) -> None:
    """Kill every process listed in a (leaf) cgroup, except this one, then remove the directory tree."""
    for child in sorted((p for p in path.rglob("*") if p.is_dir()), key=lambda p: -len(p.parts)):
        _kill_and_rmdir_leaf(child, procs_file)
    _kill_and_rmdir_leaf(path, procs_file)


def _kill_and_rmdir_leaf(path: Path, procs_file: str, wait_s: float = RMDIR_WAIT_S) -> None:
    """Kill what is in the cgroup and remove it. Killed processes and exited threads (v1: our slot
    threads) leave it asynchronously, so rmdir may say EBUSY for a moment: retry until `wait_s`."""
    deadline = time.monotonic() + wait_s
    while True:
        kill_cgroup_procs(path / procs_file)
        try:
            path.rmdir()
            return
        except FileNotFoundError:
            return
        except OSError as e:
            if e.errno != errno.EBUSY or time.monotonic() >= deadline:
                return  # still busy: the next start's sweep removes it
        time.sleep(0.005)


def kill_cgroup_procs(procs_path: Path) -> int:
    """SIGKILL every pid listed in `procs_path` other than this process. Returns how many were signalled."""
    me = os.getpid()
    n = 0
    try:
        pids = [int(x) for x in procs_path.read_text().split()]
    except (OSError, ValueError):
        return 0
    for pid in pids:
        if pid == me:
            continue
        try:
            os.kill(pid, signal.SIGKILL)
            n += 1
        except OSError:
            pass
    return n


@dataclass
class Slot:
    """One slot's cgroup directories (one per controller on v1, one on v2)."""

    index: int
    version: str
    dirs: dict[str, Path] = field(default_factory=dict)
    holds_thread: bool = True  # v1: our launcher thread sits in it (counts against pids.max)
    _counters: tuple[int, int] | None = None  # (oom kills, pids.max refusals) after the last job
    _memory_mb: int | None = None
    _pids: int | None = None

    # -- limits (cheap file writes; done only when the value changes) --
    def set_limits(self, memory_mb: int, pids: int) -> None:
        if memory_mb != self._memory_mb:
            if self.version == "v1":
                mem = self.dirs["memory"]
                nbytes = str(memory_mb << 20)
                # memsw (memory+swap) must stay >= limit: raise order depends on direction.
                files = ["memory.limit_in_bytes", "memory.memsw.limit_in_bytes"]
                if self._memory_mb is not None and memory_mb > self._memory_mb:
                    files.reverse()
                for f in files:
                    if (mem / f).exists():
                        (mem / f).write_text(nbytes)
            else:
                d = self.dirs["unified"]
                (d / "memory.max").write_text(str(memory_mb << 20))
                if (d / "memory.swap.max").exists():
                    (d / "memory.swap.max").write_text("0")
            self._memory_mb = memory_mb
        if pids != self._pids:
            d = self.dirs["pids"] if self.version == "v1" else self.dirs["unified"]
            (d / "pids.max").write_text(str(pids))
            self._pids = pids

    def oom_kills(self) -> int:
        """Monotonic count of OOM kills (or limit failures) in this slot."""
        try:
            if self.version == "v1":
                text = _read(self.dirs["memory"] / "memory.oom_control")
                m = re.search(r"oom_kill (\d+)", text)
                if m:
                    return int(m.group(1))
                return int(_read(self.dirs["memory"] / "memory.failcnt"))
            text = _read(self.dirs["unified"] / "memory.events")
        except OSError:  # the cgroup is gone (its container died)
            return 0
        m = re.search(r"oom_kill (\d+)", text)
        return int(m.group(1)) if m else 0

    def pids_events(self) -> int:
        """How often a fork was refused by pids.max (v2 and newer v1 kernels); 0 if unknown."""
        d = self.dirs["pids"] if self.version == "v1" else self.dirs["unified"]
        try:
            m = re.search(r"max (\d+)", _read(d / "pids.events"))
        except OSError:
            return 0
        return int(m.group(1)) if m else 0

    def counters(self, refresh: bool = False) -> tuple[int, int]:
        """(oom kills, pids.max refusals). Cached between jobs: the value after job N is the value
        before job N+1, so each job costs two reads, not four."""
        if refresh or self._counters is None:
            self._counters = (self.oom_kills(), self.pids_events())
        return self._counters

    def reset_peak(self) -> None:
        if self.version == "v1":
            try:
                (self.dirs["memory"] / "memory.max_usage_in_bytes").write_text("0")
            except OSError:
                pass

    def peak_mb(self) -> float | None:
        f = (
            self.dirs["memory"] / "memory.max_usage_in_bytes"
            if self.version == "v1"
            else self.dirs["unified"] / "memory.peak"
        )
        try:
            return int(f.read_text()) / (1 << 20)
        except (OSError, ValueError):
            return None

    # -- placement --
    def join_thread(self) -> None:
        """v1 only: move the calling thread (not the process) into the slot, once."""
        tid = str(threading.get_native_id())
        for ctrl in V1_CONTROLLERS:
            (self.dirs[ctrl] / "tasks").write_text(tid)

    @property
    def procs_file(self) -> str | None:
        """v2: the `cgroup.procs` path a child writes "0" into before exec; None on v1."""
        return str(self.dirs["unified"] / "cgroup.procs") if self.version == "v2" else None

    def kill_all(self) -> int:
        """SIGKILL whatever is left in the slot (never this process)."""
        n = 0
        for d in self.dirs.values():
            n += kill_cgroup_procs(d / "cgroup.procs")
        return n


class CgroupSet:
    """This instance's cgroup tree: `slots` leaf cgroups. Raise `CgroupError` if not possible here."""

    def __init__(self, slots: int):
        self.version = detect()
        if self.version == "none":
            raise CgroupError("no usable cgroup hierarchy with memory and pids controllers")
        self.name = f"{PREFIX}{os.getpid()}-{secrets.token_hex(3)}"
        self.bases: dict[str, Path] = {}
        self.slots: list[Slot] = []
        try:
            self._create(slots)
        except OSError as e:
            self.close()
            raise CgroupError(f"cannot create cgroups ({e})") from e

    def _parents(self) -> dict[str, Path]:
        if self.version == "v1":
            return {c: _own_v1_path(c) for c in V1_CONTROLLERS}
        return {"unified": ROOT}

    def _create(self, n: int) -> None:
        for key, parent in self._parents().items():
            sweep_stale(parent, "cgroup.procs")
            base = parent / self.name
            base.mkdir()
            self.bases[key] = base
            if self.version == "v2":
                for p in (parent, base):
                    (p / "cgroup.subtree_control").write_text("+memory +pids")
        for i in range(n):
            slot = Slot(i, self.version)
            for key, base in self.bases.items():
                d = base / f"slot-{i}"
                d.mkdir()
                slot.dirs[key] = d
            self.slots.append(slot)

    def close(self) -> None:
        for base in self.bases.values():
            if base.exists():
                _kill_and_rmdir(base, "cgroup.procs")
        self.bases = {}


def sweep_stale(parent: Path, procs_file: str = "cgroup.procs") -> int:
    """Remove `rlvr-sandbox-<pid>-*` trees under `parent` whose creating process is gone."""
    n = 0
    try:
        entries = list(parent.iterdir())
    except OSError:
        return 0
    for entry in entries:
        m = re.fullmatch(rf"{PREFIX}(\d+)-[0-9a-f]+", entry.name)
        if m and entry.is_dir() and not _pid_alive(int(m.group(1))):
            _kill_and_rmdir(entry, procs_file)
            n += 1
    return n


__all__ = ["CgroupError", "CgroupSet", "Slot", "detect", "kill_cgroup_procs", "sweep_stale"]
