"""A pool of pre-started CAS worker processes with hard deadlines enforced from the parent.

* Workers are plain subprocesses (`python -c …` importing sympy once) speaking length-prefixed
  pickles over their stdin/stdout pipes. They never re-import the caller's `__main__` (unlike
  multiprocessing spawn/forkserver) and the parent, which may run threads and an event loop, is
  never forked.
* `run(payload, timeout)` sends one job to an idle worker and waits on its pipe. `timeout` bounds the
  job's own CPU time on the worker (read from /proc; wall time where there is none), so a loaded
  machine, which stretches a check's wall time, changes no verdict; its wall time is capped at
  `wall_factor` × `timeout` (a worker that stalls without computing). Past either, the parent
  SIGKILLs the worker's process group and a warm spare takes its place at once (a new spare
  starts in the background): nothing relies on `signal.alarm`, so calls from the main thread, other
  threads or an event loop's executor behave identically.
* Waiting for a free (or starting) worker is not the check's time: it has its own, much longer
  bound (`queue_timeout`, default `QUEUE_TIMEOUT_S`). A backlog shows as `backlog` (jobs waiting
  now) and `stats["max_wait_ms"]`, not as unverified checks.
* Each worker caps its address space (`RLIMIT_AS`) and is recycled after `max_tasks` jobs; a worker
  that dies (memory, segfault) yields an `error` outcome and is replaced.
* Thread-safe: each worker serves one caller at a time. A pool created in one process is never used
  from a forked child (the child lazily builds its own).
* `await arun(payload, timeout)` is `run` for an event loop, without a thread: the job goes to an
  idle worker, else into a FIFO queue; the answer is read in a `loop.add_reader` callback, which
  hands the freed worker the next queued job at once (a worker never idles while a job waits for
  the loop to come round). So a server spends no thread per CAS check (no hand-off, no GIL
  contention with its loop). Same deadline, kill-and-replace and recycling rules as `run`; a caller
  cancelled while its job runs just drops the answer. Sync and async callers may share one pool,
  from any number of loops.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from multiprocessing.connection import Connection
from typing import Any

from rubrics.aio import running_loop

QUEUE_TIMEOUT_S = 300.0  # how long a job may wait for a free worker (not the check's deadline)
WALL_FACTOR = 30.0  # a job's wall time is capped at this multiple of its CPU budget
_TICKS = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100

_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
_BOOT = (
    "import sys; sys.path.insert(0, sys.argv[1]); "
    "from rubrics.math.pool import serve; serve(int(sys.argv[2]))"
)


@dataclass(frozen=True)
class Outcome:
    status: str  # "ok" | "timeout" | "error"
    value: Any = None
    detail: str = ""
    cpu_s: float = 0.0  # CPU seconds the job took on its worker (what its `timeout` bounds)


def _proc_cpu(pid: int) -> float | None:
    """User + system CPU seconds of process `pid` so far (None without /proc)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            data = f.read()
    except OSError:
        return None
    fields = data[data.rindex(b")") + 2 :].split()
    return (int(fields[11]) + int(fields[12])) / _TICKS


def serve(memory_mb: int) -> None:
    """Worker main loop: read jobs on fd 0, answer on fd 1 (stdout itself is redirected to stderr)."""
    import resource

    if memory_mb:
        limit = memory_mb * 1024 * 1024
        try:
            resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
        except (ValueError, OSError):
            pass
    conn_in, conn_out = Connection(os.dup(0), writable=False), Connection(os.dup(1), readable=False)
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, 1)
    sys.setrecursionlimit(10_000)
    from rubrics.math.worker import handle

    clock = time.process_time  # every answer carries the worker's CPU seconds so far
    conn_out.send(("ready", None, clock()))
    while True:
        try:
            job = conn_in.recv()
        except (EOFError, OSError):
            return
        if job is None:
            return
        try:
            conn_out.send(("ok", handle(job), clock()))
        except MemoryError:
            conn_out.send(("error", "worker out of memory", clock()))
        except Exception as exc:  # noqa: BLE001 - reported to the parent as an error outcome
            conn_out.send(("error", f"{type(exc).__name__}: {exc}"[:300], clock()))


@dataclass(eq=False)
class _Job:
    """An `arun` call: its job, the caller's loop and future, its CPU budget (`timeout`) and the
    latest moment (monotonic) it may still wait for a worker (`queued_until`)."""

    payload: Any
    loop: asyncio.AbstractEventLoop
    future: asyncio.Future[Outcome]
    queued_until: float
    timeout: float
    timer: asyncio.TimerHandle | None = None
    sent: bool = False
    since: float = 0.0  # when it was queued, then when it was sent


class _Worker:
    def __init__(self, memory_mb: int) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-c", _BOOT, _ROOT, str(memory_mb)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
            close_fds=True,
        )
        self.send_conn = Connection(os.dup(self.proc.stdin.fileno()), readable=False)
        self.recv_conn = Connection(os.dup(self.proc.stdout.fileno()), writable=False)
        self.proc.stdin.close()
        self.proc.stdout.close()
        self.ready = False
        self.tasks = 0
        self.cpu = 0.0  # the worker's CPU seconds at its last message (a job starts from there)
        self.sent_at = 0.0

    def wait_ready(self, timeout: float) -> bool:
        if not self.ready and self.recv_conn.poll(timeout):
            try:
                kind, _, self.cpu = self.recv_conn.recv()
            except (EOFError, OSError):
                return False
            self.ready = kind == "ready"
        return self.ready

    def send(self, payload: Any) -> None:
        self.sent_at = time.monotonic()
        self.send_conn.send(payload)

    def receive(self) -> tuple[str, Any, float]:
        """The job's answer: (status, value, its CPU seconds)."""
        status, value, cpu = self.recv_conn.recv()
        used, self.cpu = cpu - self.cpu, cpu
        return status, value, used

    def used(self) -> float:
        """CPU seconds of the running job so far (its wall seconds where /proc is missing)."""
        now = _proc_cpu(self.proc.pid)
        return time.monotonic() - self.sent_at if now is None else max(now - self.cpu, 0.0)

    def left(self, timeout: float, wall_factor: float) -> float:
        """Seconds to wait before the running job may have spent its CPU budget `timeout` (CPU
        time never runs ahead of wall time); 0 once it has, or once its wall cap is past."""
        wall_left = self.sent_at + timeout * wall_factor - time.monotonic()
        return max(min(timeout - self.used(), wall_left), 0.0)

    def kill(self) -> None:
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        self.proc.wait()
        self.send_conn.close()
        self.recv_conn.close()

    def stop(self) -> None:
        try:
            self.send_conn.send(None)
            self.proc.wait(timeout=1)
            self.send_conn.close()
            self.recv_conn.close()
        except (OSError, subprocess.TimeoutExpired):
            self.kill()


class CasPool:
    """`workers` CAS processes; `run` is blocking and thread-safe (see module docstring)."""

    def __init__(
        self,
        workers: int = 1,
        max_tasks: int = 1000,
        memory_mb: int = 2048,
        *,
        queue_timeout: float = QUEUE_TIMEOUT_S,
        wall_factor: float = WALL_FACTOR,
    ) -> None:
        if workers < 1:
            raise ValueError("workers must be >= 1")
        self.max_tasks = max_tasks
        self.memory_mb = memory_mb
        self.queue_timeout = queue_timeout
        self.wall_factor = wall_factor
        self._pid = os.getpid()
        self._cond = threading.Condition()
        self._idle = [_Worker(memory_mb) for _ in range(workers)]
        self._spares: list[_Worker] = [_Worker(memory_mb)]
        for worker in self._idle:  # one-time start-up cost, paid here rather than by a check's deadline
            worker.wait_ready(60.0)
        self._jobs: list[_Job] = []  # async jobs waiting for a worker, oldest first
        self._running: dict[_Job, _Worker] = {}  # async jobs on a worker
        self._closed = False
        self._blocked = 0  # `run` callers waiting for a worker
        self.stats = {
            "jobs": 0,
            "timeouts": 0,
            "errors": 0,
            "recycled": 0,
            "queue_timeouts": 0,
            "max_wait_ms": 0,
            "cpu_ms": 0,  # CPU time of all jobs on the workers
        }

    @property
    def backlog(self) -> int:
        """Jobs waiting for a free worker now (back-pressure: a caller may hold new work back)."""
        return self._blocked + len(self._jobs)

    def _waited(self, since: float) -> None:
        ms = int((time.monotonic() - since) * 1000)
        if ms > self.stats["max_wait_ms"]:
            self.stats["max_wait_ms"] = ms

    def _checkout(self, deadline: float) -> _Worker | None:
        with self._cond:
            self._blocked += 1
            try:
                while not self._idle:
                    left = deadline - time.monotonic()
                    if left <= 0 or self._closed:
                        return None
                    self._cond.wait(left)
                return self._idle.pop() if not self._closed else None
            finally:
                self._blocked -= 1

    def _checkin(self, worker: _Worker | None) -> None:
        with self._cond:
            if worker is None:
                worker = self._spares.pop() if self._spares else _Worker(self.memory_mb)
                if not self._closed:
                    self._spares.append(_Worker(self.memory_mb))
            if self._closed:
                worker.stop()
                return
            job = None
            while self._jobs:  # the longest-waiting async job takes it (FIFO)
                job = self._jobs.pop(0)
                if not job.future.done():
                    break
                job = None
            if job is None:
                self._idle.append(worker)
                self._cond.notify()
                return
        if running_loop() is job.loop:
            self._start(worker, job)  # at once: the worker never waits for a loop iteration
            return
        try:
            job.loop.call_soon_threadsafe(self._start, worker, job)
        except RuntimeError:  # that job's loop is closed: the next job or the idle list
            self._checkin(worker)

    def run(self, payload: Any, timeout: float, *, queue_timeout: float | None = None) -> Outcome:
        """Run one job with a budget of `timeout` CPU seconds on its worker (module docstring);
        past it the worker is killed: `timeout`. Waiting for a worker (up to `queue_timeout`,
        default the pool's) is not part of the budget."""
        if self._closed:
            return Outcome("error", detail="pool closed")
        since = time.monotonic()
        queued_until = since + (self.queue_timeout if queue_timeout is None else queue_timeout)
        worker = self._checkout(queued_until)
        if worker is None:
            return self._queue_timeout()
        self.stats["jobs"] += 1
        try:
            if not worker.wait_ready(max(queued_until - time.monotonic(), 0.0)):
                if worker.proc.poll() is not None:
                    raise EOFError("worker exited while starting")
                self._checkin(worker)
                return self._queue_timeout("CAS worker still starting")
            self._waited(since)
            worker.send(payload)
            while not worker.recv_conn.poll(worker.left(timeout, self.wall_factor)):
                if worker.left(timeout, self.wall_factor) <= 0:
                    return self._kill(worker, timeout)
            status, value, cpu = worker.receive()
        except (EOFError, OSError, BrokenPipeError) as exc:
            worker.kill()
            self.stats["errors"] += 1
            self._checkin(None)
            return Outcome("error", detail=f"worker died: {type(exc).__name__}")
        return self._finish(worker, status, value, cpu)

    def _queue_timeout(self, what: str = "no free worker") -> Outcome:
        """Past the bound on waiting for a worker (never the check's own budget)."""
        self.stats["queue_timeouts"] += 1
        return Outcome("timeout", detail=f"{what} (past the queue bound)")

    def _kill(self, worker: _Worker, timeout: float) -> Outcome:
        """Past the running job's deadline: kill its worker (a spare takes its place)."""
        cpu = worker.used()
        worker.kill()
        self.stats["timeouts"] += 1
        self.stats["cpu_ms"] += round(cpu * 1000)
        self._checkin(None)
        return Outcome("timeout", detail=f"CAS deadline {timeout:.2f}s CPU", cpu_s=cpu)

    def _finish(self, worker: _Worker, status: str, value: Any, cpu: float = 0.0) -> Outcome:
        worker.tasks += 1
        self.stats["cpu_ms"] += round(cpu * 1000)
        if worker.tasks >= self.max_tasks:  # stopped in the background: the caller never waits
            threading.Thread(target=worker.stop, daemon=True).start()
            self.stats["recycled"] += 1
            self._checkin(None)
        else:
            self._checkin(worker)
        if status != "ok":
            self.stats["errors"] += 1
            return Outcome("error", detail=str(value), cpu_s=cpu)
        return Outcome("ok", value, cpu_s=cpu)

    async def arun(self, payload: Any, timeout: float, *, queue_timeout: float | None = None) -> Outcome:
        """`run` for an event loop, without a thread (see module docstring)."""
        if self._closed:
            return Outcome("error", detail="pool closed")
        loop = asyncio.get_running_loop()
        wait = self.queue_timeout if queue_timeout is None else queue_timeout
        now = time.monotonic()
        job = _Job(payload, loop, loop.create_future(), now + wait, timeout, since=now)
        with self._cond:
            if self._closed:  # closed meanwhile (`close` settles only the jobs queued before it)
                return Outcome("error", detail="pool closed")
            worker = self._idle.pop() if self._idle else None
            if worker is None:
                self._jobs.append(job)
        if worker is None:
            job.timer = loop.call_later(max(wait, 0.0), self._expire, job)
        else:
            self._start(worker, job)
        return await job.future  # cancelled: the job is dropped (its worker runs on to its answer)

    def _start(self, worker: _Worker, job: _Job) -> None:
        """On the job's loop: run `job` on `worker` (waiting for its start-up message first, which
        counts as queueing)."""
        if job.timer is not None:
            job.timer.cancel()
        left = job.queued_until - time.monotonic()
        if job.future.done() or left <= 0:
            if not job.future.done():
                _settle(job, self._queue_timeout())
            self._checkin(worker)
            return
        self.stats["jobs"] += 1
        with self._cond:
            self._running[job] = worker
        if worker.ready:
            self._send(worker, job)
        else:
            job.timer = job.loop.call_later(left, self._on_deadline, worker, job)
            job.loop.add_reader(worker.recv_conn.fileno(), self._on_boot, worker, job)

    def _on_boot(self, worker: _Worker, job: _Job) -> None:
        job.loop.remove_reader(worker.recv_conn.fileno())
        if job not in self._running:  # `close` took it
            return
        if worker.wait_ready(0.0):
            job.timer.cancel()  # type: ignore[union-attr]
            self._send(worker, job)
        else:
            self._died(worker, job, "worker exited while starting")

    def _send(self, worker: _Worker, job: _Job) -> None:
        self._waited(job.since)
        try:
            worker.send(job.payload)
        except OSError as exc:
            self._died(worker, job, f"worker died: {type(exc).__name__}")
            return
        job.sent = True
        job.timer = job.loop.call_later(max(job.timeout, 0.0), self._on_deadline, worker, job)
        job.loop.add_reader(worker.recv_conn.fileno(), self._on_answer, worker, job)

    def _ended(self, worker: _Worker, job: _Job) -> bool:
        """Take `job` off its worker (False if `close` already did)."""
        with self._cond:
            if self._running.pop(job, None) is None:
                return False
        job.loop.remove_reader(worker.recv_conn.fileno())
        return True

    def _on_answer(self, worker: _Worker, job: _Job) -> None:
        if not self._ended(worker, job):
            return
        job.timer.cancel()  # type: ignore[union-attr]
        try:
            status, value, cpu = worker.receive()
        except (EOFError, OSError) as exc:
            self._died(worker, job, f"worker died: {type(exc).__name__}", ended=True)
            return
        _settle(job, self._finish(worker, status, value, cpu))  # the worker is handed on first

    def _on_deadline(self, worker: _Worker, job: _Job) -> None:
        if job.sent and job in self._running:
            left = worker.left(job.timeout, self.wall_factor)
            if left > 0:  # a loaded machine: the job has not had its CPU time yet
                job.timer = job.loop.call_later(left, self._on_deadline, worker, job)
                return
        if not self._ended(worker, job):
            return
        if not job.sent:  # still starting: it stays in the pool, as with `run`
            _settle(job, self._queue_timeout("CAS worker still starting"))
            self._checkin(worker)
            return
        _settle(job, self._kill(worker, job.timeout))

    def _died(self, worker: _Worker, job: _Job, detail: str, ended: bool = False) -> None:
        if not ended and not self._ended(worker, job):
            return
        if job.timer is not None:
            job.timer.cancel()
        worker.kill()
        self.stats["errors"] += 1
        _settle(job, Outcome("error", detail=detail))
        self._checkin(None)

    def _abandon(self, worker: _Worker, job: _Job) -> None:
        """On the job's loop, after `close`: kill its worker; the caller gets `error`."""
        if self._ended(worker, job):
            job.timer.cancel()  # type: ignore[union-attr]
            worker.kill()
            _settle(job, Outcome("error", detail="pool closed"))

    def _expire(self, job: _Job) -> None:
        """On the job's loop, at its deadline, if it never got a worker."""
        with self._cond:
            if job not in self._jobs:
                return
            self._jobs.remove(job)
        _settle(job, self._queue_timeout())

    @property
    def usable(self) -> bool:
        return not self._closed and os.getpid() == self._pid

    def close(self) -> None:
        """Stop every worker. Safe to call more than once; callers in `run` get `error`/`timeout`."""
        with self._cond:
            if self._closed:
                return
            self._closed = True
            idle, self._idle = self._idle + self._spares, []
            self._spares = []
            self._cond.notify_all()
            jobs, self._jobs = self._jobs, []
            running = list(self._running.items())
        for job in jobs:
            with contextlib.suppress(RuntimeError):
                job.loop.call_soon_threadsafe(_settle, job, Outcome("error", detail="pool closed"))
        for job, worker in running:  # busy workers are stopped too, as blocking callers' are
            try:
                job.loop.call_soon_threadsafe(self._abandon, worker, job)
            except RuntimeError:  # its loop is gone: nobody reads that worker any more
                worker.kill()
        if os.getpid() == self._pid:
            for worker in idle:
                worker.stop()

    def __enter__(self) -> CasPool:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _settle(job: _Job, outcome: Outcome) -> None:
    if not job.future.done():
        job.future.set_result(outcome)


_default: CasPool | None = None
_default_lock = threading.Lock()


def default_pool() -> CasPool:
    """The process-wide pool `check_answer` uses: `RLVR_MATH_WORKERS` workers (default 1) plus a warm
    spare; rebuilt lazily in a forked child."""
    global _default
    with _default_lock:
        if _default is None or not _default.usable:
            _default = CasPool(workers=int(os.environ.get("RLVR_MATH_WORKERS", "1")))
        return _default
