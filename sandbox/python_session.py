"""A stateful Python tool in the sandbox: one interpreter per episode, opened from a warm pool.

    async with python_sessions() as pool:          # a bwrap warm pool of its own (docker: backend=)
        async with pool.session() as s:            # one interpreter; killed when the block ends
            r = await s.run("x = 21")
            r = await s.run("x * 2")               # r.output == "42\\n"

Isolation is the code rubric's: the interpreter is a job of the same warm pool (`sandbox.pool`,
`sandbox/_worker.py`), forked from a pre-started worker inside its own sandbox (no network,
read-only system, private scratch as cwd, unprivileged uid, seccomp, cgroup memory/pids). A session
holds one worker of a pool that only sessions use (`max_sessions` of them; more sessions wait for
one); when it closes, the interpreter is killed, the worker kills whatever is left and wipes the
scratch dir, and the next session gets the clean worker. Another session never sees its variables,
files or processes. When this process exits, bwrap's --die-with-parent ends every sandbox.

A call (`PythonSession.run`) is a notebook cell: globals persist between calls; stdout and stderr are
captured together, in order; if the last statement is an expression (and the code does not end in
`;`), its repr is appended unless it is None (`sandbox/_repl.py`). Results (`ToolCallResult`):
* an exception is `error` (the traceback as the REPL prints it), a normal result: the session lives;
* output beyond `output_bytes` is cut and ends with "[output truncated at N bytes]";
* time: at `timeout_s` (wall) or `cpu_s` (CPU of the interpreter) the call is interrupted in the
  interpreter (`CallTimeout` traceback, `timed_out`) and the session keeps its state. Code that
  does not stop then (it blocks the signal, catches the exception, or sits in one long C call) is
  killed `grace_s` later: `timed_out` and `reset`, the session restarts (variables and files gone);
* an interpreter that dies (os._exit, a fatal signal, the kernel's memory limit, the session's
  CPU budget) is `reset` too, with the cause in `error`; the next call starts a fresh one;
* memory is the interpreter's (RLIMIT_AS `memory_mb`, a session setting): an allocation beyond it
  raises MemoryError in the call (state kept);
* processes a call starts are killed when it returns; threads live on (as in Jupyter).
`infra_error` is set only when the sandbox failed (no worker could start, a worker died by itself,
the session or pool is closed), never by anything the code does: rewards treat it as "could not
run", not as the code's failure. `run` never raises for these; opening a session raises SandboxError.
"""

from __future__ import annotations

import array
import asyncio
import contextlib
import functools
import json
import os
import signal
import socket
import threading
import time
import weakref
from collections.abc import AsyncIterator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from sandbox import _proc
from sandbox._session_wire import START_TIMEOUT_S, Interpreter, _interpreter_pidfd
from sandbox.backend import job_env, warm_slots
from sandbox.core import Job, Limits, SandboxError


@dataclass(frozen=True)
class SessionLimits:
    """Per-call limits (`timeout_s`, `cpu_s`, `output_bytes`: `run` may override them) and the
    session's own: the interpreter's memory, processes, file size, scratch dir and lifetime CPU."""

    timeout_s: float = 10.0  # wall time of a call; interrupted then, killed `grace_s` later
    cpu_s: float = 10.0  # CPU time of a call (the interpreter's, all threads)
    output_bytes: int = 64 << 10  # stdout+stderr+repr of a call; the traceback is capped alike
    memory_mb: int = 512  # address space of the interpreter (and of each process it starts)
    processes: int = 16
    file_size_mb: int = 16
    scratch_mb: int = 64  # the private cwd (/tmp); one size per pool
    session_cpu_s: float = 3600.0  # RLIMIT_CPU of the interpreter over its life (a backstop)
    grace_s: float = 1.0  # after timeout_s, before an interpreter that did not stop is killed

    def job_limits(self) -> Limits:
        return Limits(
            wall_time_s=self.timeout_s,
            cpu_time_s=self.session_cpu_s,
            memory_mb=self.memory_mb,
            processes=self.processes,
            output_bytes=self.output_bytes,
            file_size_mb=self.file_size_mb,
            scratch_mb=self.scratch_mb,
        )


@dataclass(frozen=True)
class ToolCallResult:
    """One call. `output`: what it printed, then the last expression's repr; `error`: the traceback
    (or why the session was reset); `infra_error`: the sandbox failed, the code's outcome is unknown."""

    output: str
    error: str | None = None
    truncated: bool = False
    timed_out: bool = False
    seconds: float = 0.0
    infra_error: str | None = None
    reset: bool = False  # the interpreter is gone: the next call starts with nothing defined

    @property
    def ok(self) -> bool:
        return self.error is None and self.infra_error is None and not self.timed_out

    @property
    def text(self) -> str:
        """What a REPL would show: the output, then the traceback (or the infrastructure failure)."""
        if self.infra_error is not None:
            return f"[the tool could not run: {self.infra_error}]\n"
        return self.output + (self.error or "")


@functools.cache
def repl_source() -> str:
    """The interpreter loop's source (`sandbox/_repl.py`), sent as a `python3 -c` job."""
    return (Path(__file__).resolve().parent / "_repl.py").read_text(encoding="utf-8")


def _thread_worker(box):
    """The calling slot thread's worker (bwrap creates it on first use; Docker at thread start)."""
    return box._worker() if hasattr(box, "_worker") else box._local_worker()


class PythonSession:
    """One interpreter for one episode. `async with pool.session() as s`, or `await pool.open()` and
    `await s.close()`. Calls are serialised. See the module doc for what a call returns."""

    def __init__(self, pool: PythonSessionPool, limits: SessionLimits):
        self.pool, self.limits = pool, limits
        self.calls = self.resets = 0
        self._worker = None
        self._interp: Interpreter | None = None
        self._oom0 = 0
        self._lock = asyncio.Lock()
        self._closed = False

    async def __aenter__(self) -> PythonSession:
        await self.open()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def open(self) -> None:
        """Start the interpreter now (SandboxError if it cannot); `run` would start it otherwise."""
        async with self._lock:
            if self._closed:
                raise SandboxError("the Python session is closed")
            if self._interp is None:
                await self._start()

    async def run(
        self,
        code: str,
        *,
        timeout_s: float | None = None,
        cpu_s: float | None = None,
        output_bytes: int | None = None,
    ) -> ToolCallResult:
        """Run `code` as the next cell. Never raises for sandbox failures (see `infra_error`)."""
        lim = self.limits
        wall = lim.timeout_s if timeout_s is None else timeout_s
        cpu = lim.cpu_s if cpu_s is None else cpu_s
        cap = lim.output_bytes if output_bytes is None else output_bytes
        if wall <= 0 or cpu <= 0 or cap < 0:
            raise ValueError("timeout_s and cpu_s must be > 0 and output_bytes >= 0")
        async with self._lock:
            if self._closed:
                return ToolCallResult("", infra_error="the Python session is closed")
            try:
                return await self._run(code, wall, cpu, cap)
            except BaseException:  # cancelled mid-call: nothing of the interpreter can be trusted
                self._abandon()
                raise

    async def _run(self, code: str, wall: float, cpu: float, cap: int) -> ToolCallResult:
        if self._interp is None:
            try:
                await self._start()
            except SandboxError as e:
                return ToolCallResult("", infra_error=str(e))
        self.calls += 1
        self.pool.stats["calls"] += 1
        kind, reply, out, total, seconds = await self._interp.call(code, wall, cpu, cap, self.limits.grace_s)
        if kind != "reply":
            return await self._after_loss(kind, out, total, cap, wall, seconds)
        error = reply.get("error")  # the interpreter's word: the code could have forged it
        if error is not None and not isinstance(error, str):
            error = repr(error)
        return _result(out, total, cap, error, seconds, timed_out=reply.get("timeout") is not None)

    async def close(self) -> None:
        """Kill the interpreter and give the worker back (clean) to the pool. Idempotent."""
        if self._closed:
            return
        self._closed = True
        if self._interp is not None:
            self._interp.kill()
        async with self._lock:
            if self._interp is not None:
                await self._end(kill=True)
            if self._worker is not None:
                w, self._worker = self._worker, None
                self.pool._release(w)
            self.pool._sessions.discard(self)

    def __del__(self) -> None:
        if not self._closed and (self._worker is not None or self._interp is not None):
            self._abandon()

    # ------------------------------------------------------------ internals
    async def _start(self) -> None:
        """A fresh interpreter on our worker, or on a claimed one; SandboxError if none starts."""
        for attempt in range(2):
            if self._worker is None:
                self._worker = await self.pool._claim()
            w = self._worker
            try:
                self._interp, self._oom0 = _send_job(w, self.limits), _oom_kills(w)
            except (OSError, SandboxError):  # the worker is gone: another one
                await self._discard()
                if attempt:
                    raise SandboxError("the sandbox worker died before the session started") from None
                continue
            try:
                await self._interp.hello()
            except SandboxError:
                await self._discard()
                raise
            self._interp.pidfd = _interpreter_pidfd(w)
            self.pool.stats["interpreters"] += 1
            return

    async def _after_loss(self, kind: str, out: bytes, total: int, cap: int, wall: float, seconds: float):
        """The interpreter hung, died or garbled its replies: end it (the worker cleans up), and
        say why; the next call starts a fresh one."""
        reply = await self._end(kill=kind != "dead")
        self.resets += 1
        self.pool.stats["resets"] += 1
        lost = " The session was reset: variables, imports and files are gone."
        if kind == "hung":
            why = f"CallTimeout: the call did not stop at its time limit ({wall:g} s) and was killed."
            return _result(out, total, cap, why + lost, seconds, timed_out=True, reset=True)
        if kind == "garbled":
            why = "SessionError: the code wrote to the tool's reply channel; the interpreter was killed."
            return _result(out, total, cap, why + lost, seconds, reset=True)
        if reply.get("dead") and not reply.get("oom"):
            why = f"the sandbox worker died: {reply['why']}"
            return _result(out, total, cap, None, seconds, reset=True, infra=why)
        return _result(out, total, cap, _death(reply, self.limits) + lost, seconds, reset=True)

    async def _end(self, kill: bool) -> dict:
        """End the interpreter and wait for its worker's report ({"status": ...}; {"dead": True,
        "why": ..., "oom": bool} if the worker went too). A worker that cannot go on is discarded."""
        interp, self._interp = self._interp, None
        w = self._worker
        if kill and not interp.kill() and w is not None:
            await self._discard()  # no way to kill the interpreter alone: its whole sandbox goes
        interp.close()
        if self._worker is None:
            return {"status": signal.SIGKILL, "killed": True}
        reply = await _worker_reply(w, START_TIMEOUT_S)
        if reply.get("dead"):
            reply["oom"] = _oom_kills(w) > self._oom0
            reply["why"] = w.stderr_tail().decode(errors="replace")[-300:] or "no message"
        if reply.get("dead") or reply.get("recycle") or "status" not in reply or not w.alive():
            await self._discard()
        return reply

    async def _discard(self) -> None:
        """Stop our worker (its sandbox and all in it) and hand its slot back for a fresh one."""
        w, self._worker = self._worker, None
        if w is not None:
            await self.pool._discard(w)

    def _abandon(self) -> None:
        """Without awaiting (cancelled, or garbage): kill everything of ours in a thread."""
        interp, self._interp = self._interp, None
        w, self._worker = self._worker, None
        if interp is not None:
            interp.kill()
            interp.close()
        if w is not None:
            self.pool._discard_in_thread(w)


def _result(out, total, cap, error, seconds, *, timed_out=False, reset=False, infra=None):
    text = out[:cap].decode("utf-8", errors="replace")
    truncated = total > cap
    if truncated:
        text += ("" if text.endswith("\n") or not text else "\n") + f"[output truncated at {cap} bytes]\n"
    if error is not None and len(error.encode()) > cap:
        error = error.encode()[:cap].decode(errors="ignore") + f"\n[traceback truncated at {cap} bytes]\n"
        truncated = True
    if error is not None and not error.endswith("\n"):
        error += "\n"
    return ToolCallResult(text, error, truncated, timed_out, seconds, infra, reset)


def _death(reply: dict, limits: SessionLimits) -> str:
    """Why the interpreter ended, from its wait status (or the kernel's OOM kill of its sandbox)."""
    if reply.get("oom"):
        return f"MemoryError: the sandbox's memory limit ({limits.memory_mb} MB) was exceeded; it was killed."
    code = os.waitstatus_to_exitcode(reply["status"]) if "status" in reply else -signal.SIGKILL
    if code >= 0:
        return f"SessionError: the interpreter exited (code {code})."
    sig = -code
    if sig == signal.SIGXCPU:
        return f"SessionError: the session used up its CPU time ({limits.session_cpu_s:g} s)."
    name = signal.Signals(sig).name if sig in signal.valid_signals() else f"signal {sig}"
    return f"SessionError: the interpreter was killed by {name}."


def _oom_kills(w) -> int:
    slot = w.slot
    return slot.counters(refresh=True)[0] if slot is not None and slot.version != "none" else 0


def _send_job(w, limits: SessionLimits) -> Interpreter:
    """Hand the worker a job that is the interpreter: its stdin is our request pipe, stdout and
    stderr one output pipe, the result channel our reply pipe (`sandbox/_worker.py`'s protocol)."""
    if not w.alive() or w.sock is None:
        raise SandboxError("the sandbox worker is not running")
    box = w.box
    job_limits = limits.job_limits()
    spec = {
        "mode": "code",
        "target": repl_source(),
        "args": ["0", "3", "sweep"],
        "unbuffered": False,
        "isolated": True,
        "env": job_env(Job(command=("python3",))),
        "files": [],
        "rlimits": box.job_rlimits(job_limits),
    }
    memory = limits.memory_mb + limits.scratch_mb + box.config.worker_overhead_mb
    box._prepare_slot(w.slot, job_limits, memory, extra_pids=w.extra_pids)
    req_r, req_w = _proc.pipe()
    out_r, out_w = _proc.pipe()
    chan_r, chan_w = _proc.pipe()
    spec_fd = _proc.memfd_with(json.dumps(spec).encode(), "spec")
    sent = [spec_fd, req_r, out_w, out_w, chan_w]
    try:
        w.sock.sendmsg([b"job"], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", sent))])
    except OSError:
        for fd in (req_w, out_r, chan_r):
            os.close(fd)
        raise
    finally:
        for fd in (spec_fd, req_r, out_w, chan_w):
            os.close(fd)
    return Interpreter(req_w, out_r, chan_r)


async def _worker_reply(w, timeout_s: float) -> dict:
    """The worker's report on its job (the interpreter), or {"dead": True} (EOF, or none in time)."""
    loop = asyncio.get_running_loop()
    got: asyncio.Future = loop.create_future()
    sock = w.sock
    if sock is None:
        return {"dead": True}

    def on_reply() -> None:
        try:
            data = sock.recv(65536)
            reply = json.loads(data) if data else {"dead": True}
        except (OSError, ValueError):
            reply = {"dead": True}
        if not got.done():
            got.set_result(reply)

    loop.add_reader(sock.fileno(), on_reply)
    try:
        return await asyncio.wait_for(got, timeout_s)
    except asyncio.TimeoutError:
        return {"dead": True}
    finally:
        loop.remove_reader(sock.fileno())


class PythonSessionPool:
    """Python sessions on a warm-pool sandbox of their own (one worker per concurrent session).
    Build it with `python_sessions(...)`; `session()` / `open()` give a session, `close()` ends all."""

    def __init__(self, sandbox, limits: SessionLimits, open_timeout_s: float = 300.0):
        self.sandbox, self.limits, self.open_timeout_s = sandbox, limits, open_timeout_s
        self.stats = {"sessions": 0, "interpreters": 0, "calls": 0, "resets": 0, "worker_discards": 0}
        self._job = Job(command=("python3",), limits=limits.job_limits())
        self._sessions: weakref.WeakSet[PythonSession] = weakref.WeakSet()
        self._waiters: list[asyncio.Future] = []
        self._refilling = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._closed = False

    async def start(self) -> None:
        """Start every worker (a session then opens without waiting for one)."""
        self._loop = asyncio.get_running_loop()
        await self._refill()

    def session(self, limits: SessionLimits | None = None, **overrides: Any) -> PythonSession:
        """A session (opened by `async with` or `open()`), with the pool's limits or `limits`, or
        those with `overrides` (e.g. `timeout_s=5`). The scratch size is the pool's."""
        limits = replace(limits or self.limits, **overrides)
        if limits.scratch_mb != self.limits.scratch_mb:
            raise ValueError("scratch_mb is one size per pool")
        if self._closed:
            raise SandboxError("the Python session pool is closed")
        s = PythonSession(self, limits)
        self._sessions.add(s)
        self.stats["sessions"] += 1
        return s

    async def open(self, limits: SessionLimits | None = None, **overrides: Any) -> PythonSession:
        s = self.session(limits, **overrides)
        await s.open()
        return s

    async def close(self) -> None:
        """Kill every session's interpreter and the pool's sandbox."""
        if self._closed:
            return
        self._closed = True
        self._wake()
        try:
            await asyncio.gather(*(s.close() for s in list(self._sessions)), return_exceptions=True)
        finally:
            await self.sandbox.close()

    # ------------------------------------------------------------ workers
    async def _claim(self):
        """An idle warm worker, its lock held for the session; waits for one (SandboxError after
        `open_timeout_s`, or when workers cannot start)."""
        deadline = time.monotonic() + self.open_timeout_s
        box = self.sandbox
        while True:
            if self._closed:
                raise SandboxError("the Python session pool is closed")
            left = deadline - time.monotonic()
            if left <= 0:
                raise SandboxError(f"no Python session free within {self.open_timeout_s:g} s")
            w = box._idle_worker(self._job)
            if w is not None:
                return w
            with box._workers_lock:
                workers = list(box._workers)
            if len(workers) < box.config.slots or any(not w.alive() and not w.lock.locked() for w in workers):
                await self._refill()
                continue
            fut = asyncio.get_running_loop().create_future()
            self._waiters.append(fut)
            try:
                await asyncio.wait_for(fut, left)
            except asyncio.TimeoutError:
                pass
            finally:
                with contextlib.suppress(ValueError):
                    self._waiters.remove(fut)

    async def _refill(self) -> None:
        """Have every slot thread start its worker if it is not running and no session holds it."""
        if self._refilling is None or self._refilling.done():
            self._refilling = warm_slots(self.sandbox._pool, self.sandbox.config.slots, self._refill_slot)
        try:
            await asyncio.wrap_future(self._refilling)
        except SandboxError:
            raise
        except Exception as e:  # noqa: BLE001 - any failure to start a worker is the sandbox's
            raise SandboxError(f"cannot start a Python session's sandbox: {type(e).__name__}: {e}") from e
        finally:
            self._wake()

    def _refill_slot(self) -> None:
        w = _thread_worker(self.sandbox)
        if w.lock.acquire(blocking=False):
            try:
                w.ensure(self.limits.scratch_mb)
            finally:
                w.lock.release()

    def _release(self, w) -> None:
        w.lock.release()
        self._wake()

    async def _discard(self, w) -> None:
        self.stats["worker_discards"] += 1
        await asyncio.to_thread(w.stop)
        self._release(w)

    def _discard_in_thread(self, w) -> None:
        self.stats["worker_discards"] += 1

        def stop() -> None:
            try:
                w.stop()
            finally:
                w.lock.release()
                loop = self._loop
                if loop is not None and not loop.is_closed():
                    with contextlib.suppress(RuntimeError):
                        loop.call_soon_threadsafe(self._wake)

        threading.Thread(target=stop, name="python-session-stop", daemon=True).start()

    def _wake(self) -> None:
        waiters, self._waiters = self._waiters, []
        for fut in waiters:
            if not fut.done():
                fut.set_result(None)


@contextlib.asynccontextmanager
async def python_sessions(
    backend: str = "bwrap",
    *,
    max_sessions: int = 8,
    limits: SessionLimits | None = None,
    open_timeout_s: float = 300.0,
    **options: Any,
) -> AsyncIterator[PythonSessionPool]:
    """A pool of Python sessions on its own warm-pool sandbox (`backend`: "bwrap", "docker" or
    "auto"; `options`: the backend's config fields) with `max_sessions` workers, all started before
    it is yielded. Raises SandboxUnavailable when the backend cannot isolate here."""
    from sandbox.registry import get_sandbox

    limits = limits or SessionLimits()
    box = await asyncio.to_thread(get_sandbox, backend, slots=max_sessions, **options)
    if not hasattr(box, "_idle_worker"):
        await box.close()
        raise SandboxError(f"the {box.name} backend has no warm pool for Python sessions")
    pool = PythonSessionPool(box, limits, open_timeout_s)
    try:
        await pool.start()
        yield pool
    finally:
        await pool.close()


__all__ = [
    "Interpreter",
    "PythonSession",
    "PythonSessionPool",
    "SessionLimits",
    "ToolCallResult",
    "python_sessions",
    "repl_source",
]
