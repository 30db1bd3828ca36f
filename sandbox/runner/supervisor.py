"""The harness process: runs every test of a spec (`run_spec`, `main`), forks one child per stdio
test or session (`supervise`), enforces the CPU and wall limits, judges what each child reports and
writes the records to the result channel. Stdlib only."""

from __future__ import annotations

import importlib  # noqa: F401 - importing it renames _frozen_importlib's names: never after a snapshot
import io
import json
import math
import os
import select
import signal
import struct
import sys
import time

from .child import _child
from .guards import _JOB_DIR, _fd_guard
from .snapshot import _pristine
from .wire import CHANNEL_FD, MAX_CHILD_MESSAGE, NONCE_BYTES, SPEC_FILE, _write_all, take_messages

BUDGET_RESERVE_S = 3.0  # of the job's wall budget, kept to report the records (see `run_spec`)
CPU_POLL_S = 0.05  # how often a running child's CPU time is checked against the limit
_TICKS = os.sysconf("SC_CLK_TCK")
# `json.dumps` with separators builds an encoder per call (~10 page faults in the harness after each
# fork); this one is made once. Never in a child: the solution could rebind its separators.
_COMPACT = json.JSONEncoder(separators=(",", ":")).encode

_UNREAPED: list[int] = []  # killed children whose exit status no verdict needs
# the signals that end a child for a fault or a limit (SIGABRT: CPython's own fatal errors abort too);
# SIGKILL (memory), SIGXCPU (time) and SIGSYS (`fd_filter`) have verdicts of their own. Nothing in
# the sandbox signals a test child but the harness (SIGKILL, after its verdict), so a child that dies
# by any other signal, or stops, did it itself: `signal.raise_signal`, `alarm`/`setitimer`,
# `pidfd_send_signal` raise no audit event (`os.kill` does: the child's hook flags it first)
_FAULT_SIGNALS = frozenset(
    getattr(signal, name)
    for name in ("SIGSEGV", "SIGBUS", "SIGFPE", "SIGILL", "SIGABRT", "SIGTRAP", "SIGPIPE", "SIGXFSZ")
    if hasattr(signal, name)
)
_PRELOAD = (
    "math",
    "cmath",
    "re",
    "collections",
    "itertools",
    "functools",
    "heapq",
    "bisect",
    "string",
    "typing",
    "random",
    "copy",
    "operator",
)


def proc_cpu(pid: int) -> float | None:
    """CPU seconds (user + system, all threads) a live child has used so far, from /proc."""
    try:
        fd = os.open(f"/proc/{pid}/stat", os.O_RDONLY)  # read after every test: no file object
        try:
            data = os.read(fd, 4096)
        finally:
            os.close(fd)
        fields = data[data.rindex(b")") + 2 :].split()
        return (int(fields[11]) + int(fields[12])) / _TICKS
    except (OSError, ValueError, IndexError):
        return None


def proc_run_delay(pid: int) -> float:
    """Seconds a live child has spent runnable but waiting for a CPU (the second field of
    /proc/PID/schedstat); 0.0 where the kernel does not say. Read only when a wall deadline passes."""
    try:
        fd = os.open(f"/proc/{pid}/schedstat", os.O_RDONLY)
        try:
            data = os.read(fd, 256)
        finally:
            os.close(fd)
        return int(data.split()[1]) / 1e9
    except (OSError, ValueError, IndexError):
        return 0.0


# ----------------------------------------------------------------------------- the harness


def _input_fd(text: str) -> int:
    data = text.encode()
    try:
        fd = os.memfd_create("stdin", 0)
    except (AttributeError, OSError):
        import tempfile

        fd = os.dup(tempfile.TemporaryFile(dir=".").fileno())
    _write_all(fd, data)
    os.lseek(fd, 0, os.SEEK_SET)
    return fd


_STDIO: dict = {}  # file types of a child's stdin/stdout/stderr -> the streams such children get


def _child_stdio(files: tuple[int, int, int]) -> tuple:
    """The child's stdio streams, built once for each kind of files and kept. A stream keeps only
    the numbers 0-2 (the child puts its own descriptors there) and what its set-up probes saw,
    which depends on the type of file alone (memfd or /dev/null in, pipe or /dev/null out). The
    harness never uses them, and each child reads and writes its own copy-on-write copy. Building
    and freeing them per session cost the harness ~60 page faults (each page it writes after a fork
    faults)."""
    key = tuple(os.fstat(fd).st_mode & 0o170000 for fd in files)  # S_IFMT
    streams = _STDIO.get(key)
    if streams is None:
        streams = _STDIO[key] = _prepared_stdio(files)
    return streams


def _prepared_stdio(files: tuple[int, int, int]) -> tuple:
    """The child's sys.stdin/stdout/stderr, built here before the fork (allocating them in the child
    costs ~100 copy-on-write page faults). Their set-up probes (fstat, lseek) must see the child's own
    `files`, so fds 0-2 point at those meanwhile; ours are put back before returning."""
    saved = [os.dup(fd) for fd in (0, 1, 2)]
    try:
        for target, fd in enumerate(files):
            os.dup2(fd, target)
        return (
            io.TextIOWrapper(
                io.BufferedReader(io.FileIO(0, "r", closefd=False)), encoding="utf-8", errors="replace"
            ),
            io.TextIOWrapper(
                io.BufferedWriter(io.FileIO(1, "w", closefd=False), 1 << 16),
                encoding="utf-8",
                errors="replace",
                write_through=False,
            ),
            io.TextIOWrapper(io.FileIO(2, "w", closefd=False), encoding="utf-8", errors="replace"),
        )
    finally:
        for target, fd in enumerate(saved):
            os.dup2(fd, target)
            os.close(fd)


def supervise(spec: dict, chunk: list, rlimits: tuple = ()) -> list[dict]:
    """Fork a child for `chunk` ([(index, test)]), judge what it reports; >= 1 record, in order."""
    _reap()
    nonce = os.urandom(NONCE_BYTES)
    stdio = chunk[0][1]["kind"] == "stdio"
    reach = ((), ()) if stdio else _pristine(spec, chunk)  # built here, updated in the child
    res_r, res_w = os.pipe()
    if stdio:
        out_r, out_w = os.pipe()
        out_cap = int(chunk[0][1].get("max_output") or (1 << 20))
        in_fd = _input_fd(chunk[0][1].get("input", ""))
    else:
        out_r, out_w, out_cap = None, os.open(os.devnull, os.O_WRONLY), 0
        in_fd = os.open(os.devnull, os.O_RDONLY)
    err_w = os.open(os.devnull, os.O_WRONLY)
    files = (in_fd, out_w, err_w)
    streams = _child_stdio(files)
    guard = _fd_guard(stdio)
    started = time.monotonic()
    pid = os.fork()
    if pid == 0:
        try:
            _child(spec, chunk, nonce, res_w, files, streams, rlimits, reach, guard)
        finally:
            os._exit(70)
    streams = None
    for fd in (res_w, *files):
        os.close(fd)
    try:
        os.setpgid(pid, pid)
    except OSError:
        pass
    limit = float(spec["time_limit_s"])
    wall = limit * float(spec.get("wall_factor", 3.0)) + 0.5
    res_cap = int(spec.get("max_value_bytes") or MAX_CHILD_MESSAGE) + 4096
    out, buf, pending, records = bytearray(), bytearray(), [], []
    status = usage = verdict = stopped = None
    ready, pos, mark, cpu_mark, polled = stdio, 0, started, 0.0, started
    deadline = started + wall
    extended = 0.0  # run-queue wait already added to a deadline (`proc_run_delay`)
    ends_at = spec.get("_ends_at", float("inf"))  # the job's wall budget, less a reserve (`run_spec`)
    sel = select.poll()  # not a `selectors` selector: its Python layer costs the harness ~25 page faults
    streams = {res_r: buf} if out_r is None else {res_r: buf, out_r: out}
    for fd in streams:
        sel.register(fd, select.POLLIN)
    try:
        pidfd = os.pidfd_open(pid)
        sel.register(pidfd, select.POLLIN)
    except (AttributeError, OSError):
        pidfd = None
    while pos < len(chunk) and verdict is None:
        if status is None:
            reaped, status_now, usage_now = os.wait4(pid, os.WNOHANG | os.WUNTRACED)
            if reaped and os.WIFSTOPPED(status_now):  # stopped itself: its test would never finish
                verdict, stopped = "stopped", os.WSTOPSIG(status_now)
                break
            if reaped:
                status, usage = status_now, usage_now
        if status is not None and not streams:
            break
        now = time.monotonic()
        if now >= deadline:
            # the wall deadline is a safety net for a child that sleeps or blocks; time it spent
            # runnable but waiting for a CPU (a busy machine) is the queue's, not the check's
            # up to the job's wall budget: beyond it the check is unverified ("starved"), not failed
            queued = proc_run_delay(pid) if status is None else 0.0
            if queued > extended and now < ends_at:
                step = min(queued - extended, ends_at - deadline)
                deadline, extended = deadline + step, extended + step
                continue
            verdict = "starved" if queued > extended else "timeout"
            break
        wait = min(deadline - now, CPU_POLL_S) if pidfd is not None else min(0.005, deadline - now)
        events = sel.poll(math.ceil(max(min(wait, 0.5) if status is not None else wait, 0) * 1000))
        if not events and status is not None:
            break
        # CPU time is the limit (the wall deadline is only a safety net), read from /proc at most
        # every CPU_POLL_S: a read per wake-up (each message) costs more than the frames' own CPU
        if status is None and (not events or time.monotonic() - polled >= CPU_POLL_S):
            polled = time.monotonic()
            used = proc_cpu(pid)
            if used is not None and used - cpu_mark > limit:
                verdict = "timeout"
                break
        for fd, _ in events:
            if fd == pidfd:
                sel.unregister(pidfd)
                os.close(pidfd)
                pidfd = None
                continue
            target = streams[fd]
            data = os.read(fd, 1 << 16)
            if not data:
                sel.unregister(fd)
                os.close(fd)  # a warm worker runs many tests: nothing may stay open
                del streams[fd]
                continue
            target += data
            if len(target) > (out_cap if fd == out_r else res_cap):
                verdict = "output"
        messages = take_messages(buf, nonce)
        if messages is None:
            verdict = "forged"
            break
        for tag, index, cpu, body in messages:
            now = time.monotonic()
            if stdio or (not ready and tag != "R"):
                pending.append((tag, body))  # judged when the child is gone
                continue
            if tag == "R" and not ready and index == chunk[0][0]:
                ready, mark, deadline = True, now, now + wall
                cpu_mark = proc_cpu(pid) or cpu_mark
                continue
            if pos >= len(chunk):
                break  # every test is judged: whatever follows the last one is ignored
            if index != chunk[pos][0]:
                verdict = "forged"
                break
            record = _message_record(chunk[pos], tag, body, now - mark, cpu, limit)
            records.append(record)
            pos, mark, deadline = pos + 1, now, now + wall
            cpu_mark += cpu  # the test's own CPU, from its frame: no /proc read per test
            if record["outcome"] in ("hack", "internal"):
                verdict = "stop"
                break
    try:
        os.killpg(pid, signal.SIGKILL)
    except OSError:
        pass
    for fd in list(streams) + ([pidfd] if pidfd is not None else []):
        os.close(fd)
    if pos >= len(chunk) or verdict == "stop":
        if status is None:
            _UNREAPED.append(pid)  # every test is judged: reap later instead of waiting for the teardown
        return records
    if status is None:
        _, status, usage = os.wait4(pid, 0)
    index, test = chunk[pos]
    record = {"type": "result", "index": index, "time_s": round(time.monotonic() - mark, 4)}
    if verdict == "forged":
        return records + [{**record, "outcome": "hack", "hack": "malformed or forged result message"}]
    if verdict == "stopped":
        why = f"stopped itself ({_signal_name(stopped)}) before its test finished"
        return records + [{**record, "outcome": "hack", "hack": why}]
    cpu = usage.ru_utime + usage.ru_stime - cpu_mark if usage is not None else None
    if verdict == "starved" and not (cpu is not None and cpu > limit):
        error = (
            f"machine too busy: the check waited {extended:.1f} s for a CPU and the job ran out of wall time"
        )
        return records + [{**record, "outcome": "internal", "error": error}]
    record = _exit_record(record, stdio, verdict, status, cpu, limit, bytes(out), pending)
    if ready or record["outcome"] == "hack":
        return records + [record]
    # the solution failed before any test could run: the same outcome holds for every test here
    return records + [{**record, "index": i} for i, _ in chunk]


def _message_record(
    item: tuple, tag: str, body: bytes, elapsed: float, cpu: float = 0.0, limit: float = 0.0
) -> dict:
    """A session child's message about one test → result record (CPU over `limit` is a timeout)."""
    index, test = item
    record = {"type": "result", "index": index, "time_s": round(elapsed, 4), "cpu_s": round(cpu, 4)}
    if tag == "H":
        return {**record, "outcome": "hack", "hack": body.decode(errors="replace")}
    if limit and cpu > limit:
        return {**record, "outcome": "timeout"}
    if tag == "I":
        return {**record, "outcome": "internal", "error": body.decode(errors="replace")[:2000]}
    if tag == "M":
        return {**record, "outcome": "memory"}
    if tag == "E":
        return {**record, "outcome": "error", "error": _json_or_text(body)}
    if tag == "N":
        return {**record, "outcome": "invalid", "returned": _json_or_text(body)}
    if tag == "V" and test["kind"] == "call":
        return {**record, "outcome": "ok", "values": body.decode()}
    if tag == "P" and test["kind"] == "assert":
        return {**record, "outcome": "ok"}
    return {**record, "outcome": "hack", "hack": f"unexpected message {tag!r}"}


def _reap() -> None:
    for pid in list(_UNREAPED):
        try:
            done, _ = os.waitpid(pid, os.WNOHANG)
        except ChildProcessError:
            done = pid
        if done:
            _UNREAPED.remove(pid)


def _exit_record(
    record: dict,
    stdio: bool,
    verdict: str | None,
    status: int,
    cpu: float | None,
    limit: float,
    out: bytes,
    pending: list[tuple[str, bytes]],
) -> dict:
    """The outcome of the test a child was on when it ended (stdio: its only test)."""
    tags = [tag for tag, _ in pending]
    if "H" in tags:
        return {**record, "outcome": "hack", "hack": pending[tags.index("H")][1].decode(errors="replace")}
    if stdio and tags[:1] == ["R"]:  # the solution ran: a stdio child's frames and memory are its own,
        pending, tags = pending[1:], tags[1:]  # so it can sign a frame; a harness failure it cannot be
        if "I" in tags or "R" in tags:
            return {**record, "outcome": "hack", "hack": "harness message sent while the solution ran"}
    if len(pending) > 1:
        return {**record, "outcome": "hack", "hack": "more than one result message"}
    if verdict == "output":
        return {**record, "outcome": "output", "stdout_bytes": len(out)}
    sig = os.WTERMSIG(status) if os.WIFSIGNALED(status) else None
    if verdict == "timeout" or sig == signal.SIGXCPU or (cpu is not None and cpu > limit):
        return {**record, "outcome": "timeout"}
    if pending:
        tag, body = pending[0]
        if tag in "IME":
            return _message_record((record["index"], {"kind": "stdio"}), tag, body, record["time_s"])
        return {**record, "outcome": "hack", "hack": f"unexpected message {tag!r}"}
    if sig is not None:
        if sig == signal.SIGKILL:
            return {**record, "outcome": "memory", "signal": sig}
        if sig == signal.SIGSYS:  # `fd_filter` (or the sandbox's filter: a foreign system call ABI)
            return {**record, "outcome": "hack", "hack": "forbidden system call: replacing descriptor 0-2 "
                    "or the result pipe (or a foreign system call ABI)"}  # fmt: skip
        if sig not in _FAULT_SIGNALS:  # no fault or limit sends it: the child ended itself
            why = f"ended itself with {_signal_name(sig)} before its test finished"
            return {**record, "outcome": "hack", "hack": why}
        return {
            **record,
            "outcome": "error",
            "signal": sig,
            "error": {"type": "Signal", "message": f"killed by {signal.Signals(sig).name}"},
        }
    code = os.WEXITSTATUS(status)
    if stdio:
        if code == 0:
            return {**record, "outcome": "ok", "stdout": out.decode("utf-8", errors="replace")}
        return {**record, "outcome": "error", "error": {"type": "Exit", "message": f"exit code {code}"}}
    return {**record, "outcome": "hack", "hack": f"exited (code {code}) before the test finished"}


def _signal_name(sig: int) -> str:
    try:
        return signal.Signals(sig).name
    except ValueError:  # a real-time signal
        return f"signal {sig}"


def _json_or_text(body: bytes) -> object:
    try:
        return json.loads(body)
    except ValueError:
        return body.decode(errors="replace")[:2000]


def _non_dumpable() -> None:
    """PR_SET_DUMPABLE 0: the children (same uid, no capabilities) can then neither ptrace this
    process nor open its /proc/<pid>/mem or fd/* (a warm pool's worker does the same)."""
    import ctypes

    if ctypes.CDLL(None, use_errno=True).prctl(4, 0, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_DUMPABLE, 0) failed")


def main() -> int:
    _non_dumpable()
    for fd in (0, 1, 2):  # keep 0-2 taken so that no pipe of ours lands there
        try:
            os.fstat(fd)
        except OSError:
            os.open(os.devnull, os.O_RDWR)
    try:
        os.fstat(CHANNEL_FD)
    except OSError:
        sys.stderr.write("runner: no result channel on fd 3\n")
        return 2
    with open(SPEC_FILE, encoding="utf-8") as handle:
        spec = json.load(handle)
    os.unlink(SPEC_FILE)
    if sum(t["kind"] == "stdio" for t in spec["tests"]) > 1:  # many children: import common modules once
        for name in _PRELOAD:
            try:
                __import__(name)
            except ImportError:
                pass
    run_spec(spec)
    _reap()  # whatever is still dying is reaped by the sandbox's init
    return 0


def run_spec(spec: dict, channel_fd: int = CHANNEL_FD, rlimits: tuple = ()) -> None:
    """Run every test of `spec`, writing the records (`hello`, one `result` per test run, `done`) to
    `channel_fd`, one write per child (a session's records travel together; only a complete record
    stream ending in `done` counts, so nothing is lost by not streaming them one by one). A warm
    pool's worker calls this directly (see `sandbox.harness`); it reaps and kills whatever is left
    afterwards and then calls `reset()`."""
    tests = list(enumerate(spec["tests"]))
    out = bytearray()
    # a check's wall deadline moves by the time it waited for a CPU, but stops short of the job's
    # wall budget (the host kills the job then): a reserve is left to report what ran
    budget = float(spec.get("wall_budget_s") or "inf")
    spec["_ends_at"] = time.monotonic() + budget - min(BUDGET_RESERVE_S, budget / 4)
    _JOB_DIR[0] = os.getcwd()

    def emit(record: dict) -> None:
        data = _COMPACT(record).encode()
        out.extend(struct.pack(">I", len(data)) + data)

    emit({"type": "hello", "version": 1, "tests": len(tests)})
    count, pos = 0, 0
    while pos < len(tests):
        if tests[pos][1]["kind"] == "stdio":
            chunk = tests[pos : pos + 1]
        else:  # a session: consecutive call/assert tests share one child
            end = pos
            while end < len(tests) and tests[end][1]["kind"] != "stdio":
                end += 1
            chunk = tests[pos:end]
        stop = False
        for record in supervise(spec, chunk, rlimits):
            emit(record)
            count += 1
            outcome = record["outcome"]
            # stdio/call verdicts are the host's: only what failed here can stop the run early
            if outcome in ("hack", "internal") or (spec.get("stop_on_error") and outcome != "ok"):
                stop = True
                break
        _write_all(channel_fd, bytes(out))
        out.clear()
        if stop:
            break
        pos = count
    emit({"type": "done", "count": count})
    _write_all(channel_fd, bytes(out))


def reset() -> None:
    """Forget the killed-but-unreaped children (their pids are gone once the caller has reaped all)."""
    _UNREAPED.clear()
