"""Warm pool for the bubblewrap backend: one fork-server worker per slot (host side).

Each slot thread owns a `Worker`: a long-lived `bwrap ... python3 _worker.py` whose interpreter has
already started and imported common modules. A Python job is sent to it over a private socket with
fresh pipes for stdout/stderr/channel; the worker forks a child that becomes the job (see
`sandbox/_worker.py`). Isolation per job is the same as one-shot (fresh process, wiped private
scratch, nothing left running); on any limit hit, protocol error or death the worker is killed
and a new one starts on the next job (counted in `BwrapSandbox.stats`).

Harness jobs (`sandbox.harness.harness_job`, recognised by exact content in `job_plan`) run the
trusted test harness inside the worker (PID 1), which forks only the test session children. Only a
slot thread starts a worker; `run_sync` and `run` may run a job on an idle warm worker from the
calling thread or event loop (holding `Worker.lock`; see `sandbox.borrow`).
"""

from __future__ import annotations

import array
import asyncio
import base64
import functools
import json
import os
import select
import socket
import threading
import time
from concurrent.futures import Future

from sandbox import _proc, staging
from sandbox.backend import SlotResults, _as_bytes, _validate_rel, job_env
from sandbox.borrow import NeedsSlotThread
from sandbox.cgroups import Slot
from sandbox.core import ExecResult, Job, Limits, SandboxError
from sandbox.harness import harness_spec

WORKER_SRC = str(staging.PACKAGE_DIR / staging.IN_SANDBOX["worker.py"])  # the host's copy (benchmarks)
WORKER_DST = staging.dest("worker.py")  # the worker imports the trusted harness from next to itself
FLAGS = {"-u": "unbuffered", "-I": "isolated", "-B": None, "-E": None, "-s": None, "-S": None, "-q": None}
START_TIMEOUT_S = 20.0
# a non-root user's worker (no cgroups): tasks its user may start elsewhere while it lives (`host_nproc`)
WORKER_HEADROOM = 4096


@functools.lru_cache(maxsize=8)
def _python_names(python: str) -> frozenset[str]:
    """The command names that mean the sandbox's interpreter (cached: realpath costs lstat calls)."""
    return frozenset(
        {"python3", os.path.basename(os.path.realpath(python)), python, os.path.realpath(python)}
    )


def job_plan(job: Job, python: str) -> dict | None:
    """How a warm worker runs `job`: the harness in the worker itself (`sandbox.harness`), a Python
    command in a forked child (`python_plan`), or None (the job runs one-shot)."""
    spec = harness_spec(job, _python_names(python))
    if spec is not None:
        return {"mode": "harness", "harness": spec}
    return python_plan(job.command, python)


def python_plan(command: tuple[str, ...], python: str) -> dict | None:
    """If `command` is a plain `python3 [flags] (FILE | -c CODE | -m MOD) args...`, how to run it in
    the worker; None for anything else (it then runs one-shot)."""
    if not command:
        return None
    if command[0] not in _python_names(python):
        return None
    plan = {"unbuffered": False, "isolated": False}
    rest = list(command[1:])
    while rest and rest[0] in FLAGS:
        key = FLAGS[rest.pop(0)]
        if key:
            plan[key] = True
    if not rest:
        return None
    head = rest.pop(0)
    if head in ("-c", "-m"):
        if not rest:
            return None
        plan.update(mode="code" if head == "-c" else "module", target=rest.pop(0), args=rest)
    elif head.startswith("-"):
        return None
    else:
        plan.update(mode="file", target=head, args=rest)
    return plan


class Worker:
    """One warm worker per slot. Only its slot thread starts it; any thread may run a job on it while
    holding `lock` (the slot thread, or a `run_sync` caller that borrowed it while idle)."""

    extra_pids = 2  # processes in the slot besides the job: the launcher (bwrap) and the worker

    def __init__(self, box: SlotResults, slot: Slot | None):
        self.box = box
        self.slot = slot
        self.proc = None
        self.sock: socket.socket | None = None
        self.err_fd: int | None = None
        self.scratch_mb: int | None = None
        self.lock = threading.Lock()
        self._stop_lock = threading.Lock()  # `stop` from several threads (see there)
        self.loop = None  # the event loop whose job runs here now (`sandbox.borrow`), if any

    # ------------------------------------------------------------ lifecycle
    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def ensure(self, scratch_mb: int = Limits().scratch_mb) -> None:
        if self.alive() and self.scratch_mb == scratch_mb:
            return
        self.stop()
        self._start(scratch_mb)

    def _start(self, scratch_mb: int) -> None:
        host = self._launch(scratch_mb)
        self.sock, self.scratch_mb = host, scratch_mb
        self.box.stats["worker_starts"] += 1
        ready, _, _ = select.select([host], [], [], START_TIMEOUT_S)
        try:
            msg = host.recv(4096) if ready else b""
        except OSError:
            msg = b""
        hello = json.loads(msg) if msg else {}
        if not hello.get("ready"):
            why = hello.get("error") or self.stderr_tail()  # its own word, else what it printed
            self.stop()
            raise SandboxError(f"warm worker failed to start: {why!r}")

    def _launch(self, scratch_mb: int) -> socket.socket:
        """Start `bwrap ... python3 -I worker.py 3` in this slot; return the host end of its socket."""
        box = self.box
        cfg = box.config
        host, inside = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        inside_fd = _proc.high_fd(inside.detach())
        self.err_fd = _proc.memfd_with(b"", "worker-stderr")
        limits = Limits(scratch_mb=scratch_mb)
        sc_fd = box.seccomp_fd()
        data_fds: list[int] = []  # the in-sandbox files, handed over (`sandbox.staging`)
        try:
            mounts = box.in_sandbox_mounts(data_fds)
        except BaseException:
            for fd in (inside_fd, sc_fd, *data_fds):
                if fd is not None:
                    os.close(fd)
            host.close()
            raise
        argv = box.bwrap_argv(limits, extra=mounts, seccomp_fd=sc_fd)
        argv += ["--", cfg.python, "-I", WORKER_DST, "3", ",".join(cfg.preload)]
        # the worker keeps no limits a job would need to raise; each job lowers its own after fork
        rl = [(r, v) for r, v in _proc.job_rlimits(limits, None) if r in _worker_rlimits()]
        if box.cgroups is None:  # the worker's jobs get their own, counted in its namespace
            rl.append((_proc.resource.RLIMIT_NPROC, box.host_nproc(cfg.slots * (64 + 8), WORKER_HEADROOM)))
        keep = ([sc_fd] if sc_fd is not None else []) + data_fds
        pre = box.preexec(self.slot, rl, keep=keep, channel_w=inside_fd)
        if self.slot is not None and self.slot.version != "none":
            self.slot.set_limits(cfg.worker_overhead_mb + scratch_mb + 64, 64)
        null = os.open("/dev/null", os.O_RDONLY | os.O_CLOEXEC)
        try:
            self.proc = _proc.spawn(argv, stdin=null, stdout=self.err_fd, stderr=self.err_fd, preexec=pre)
        except BaseException:
            host.close()
            raise
        finally:
            os.close(inside_fd)
            os.close(null)
            for fd in (sc_fd, *data_fds):
                if fd is not None:
                    os.close(fd)
        return host

    def stderr_tail(self) -> bytes:
        if self.err_fd is None:
            return b""
        size = os.fstat(self.err_fd).st_size
        return os.pread(self.err_fd, 2000, max(0, size - 2000))

    def stop(self) -> None:
        """Kill the worker and release its socket and stderr file, each exactly once. Threads may
        call this at the same time (the sandbox's close on an executor thread, a kill thread that
        recycles or abandons the worker): a second close of a descriptor number could close one
        that another thread has opened since."""
        with self._stop_lock:
            sock, err_fd, self.sock, self.err_fd = self.sock, self.err_fd, None, None
            if sock is not None:
                sock.close()  # a healthy worker exits on EOF; the kill below makes sure
            self._kill()
            if err_fd is not None:
                os.close(err_fd)
            self.proc = None

    def _kill(self) -> None:
        if self.proc is not None:
            _proc.kill_tree(self.proc)
            _proc.reap(self.proc)

    # ------------------------------------------------------------ jobs
    def run(self, job: Job, plan: dict, retry: bool = True, borrowed: bool = False) -> ExecResult:
        """Run `job` (caller holds `lock`). `borrowed`: not on the slot thread, so raise NeedsSlotThread
        instead of starting a worker (before anything of the job has run)."""
        if borrowed and not self.warm_for(job):
            raise NeedsSlotThread
        self.ensure(job.limits.scratch_mb)
        flight = self._send(job, plan)
        try:
            reason = (
                "done"
                if flight.reply
                else flight.cap.pump(flight.deadline, self.sock.fileno(), flight.on_reply)
            )
            wall = time.monotonic() - flight.t0
            if self._broken(flight, reason):
                self._recycle(flight.cap)
        finally:
            flight.cap.close()
        result = self._finish(flight, reason, wall)
        if result is not None:
            return result
        if retry:
            if borrowed:
                raise NeedsSlotThread  # the retry (a fresh worker) belongs to the slot thread
            return self.run(job, plan, retry=False)
        raise SandboxError(f"warm worker failed: {self.stderr_tail()!r}")

    async def run_async(self, job: Job, plan: dict) -> ExecResult:
        """`run` on the calling event loop. The caller holds `lock` and the worker is `warm_for(job)`;
        this releases the lock. The pipes and the control socket are read by loop callbacks, so no
        thread waits for the job and no GIL changes hands per system call. Killing the worker (a
        limit hit, or this call cancelled mid-job: nothing of the job survives) runs in a thread,
        never on the loop; a cancelled call frees the worker only once it is gone. Raises
        NeedsSlotThread where `run` would retry on a fresh worker."""
        try:
            flight = self._send(job, plan)
        except BaseException:
            self.lock.release()
            raise
        try:
            reason = "done" if flight.reply else await self._pump_on_loop(flight)
        except BaseException:
            flight.cap.close()
            threading.Thread(target=self._abandon, name="worker-kill", daemon=True).start()
            raise
        wall = time.monotonic() - flight.t0
        if self._broken(flight, reason):
            kill = self._kill_in_thread(flight.cap)
            try:
                await asyncio.wrap_future(kill)
            except BaseException:  # cancelled while the worker is killed: free it after that
                kill.add_done_callback(lambda _: (flight.cap.close(), self.lock.release()))
                raise
        try:
            result = self._finish(flight, reason, wall)
        finally:
            flight.cap.close()
            self.lock.release()
        if result is None:
            raise NeedsSlotThread
        return result

    def warm_for(self, job: Job) -> bool:
        """Started, alive and with the scratch size `job` needs: a borrower may run it here."""
        return self.alive() and self.scratch_mb == job.limits.scratch_mb

    def _send(self, job: Job, plan: dict) -> _Flight:
        """Hand `job` to the worker: its spec and descriptors go over the control socket."""
        box, limits = self.box, job.limits
        spec = dict(plan)
        spec["env"] = job_env(job)
        spec["files"] = [
            [_validate_rel(p), base64.b64encode(_as_bytes(c)).decode()]
            for p, c in (job.files.items() if plan["mode"] != "harness" else ())
        ]
        spec["rlimits"] = box.job_rlimits(limits)
        owned = [_proc.memfd_with(json.dumps(spec).encode(), "spec"), _proc.memfd_with(job.stdin, "stdin")]
        out_r, out_w = _proc.pipe()
        err_r, err_w = _proc.pipe()
        owned += [out_w, err_w]
        reads = {"stdout": out_r, "stderr": err_r}
        if job.channel:
            chan_r, chan_w = _proc.pipe()
            owned.append(chan_w)
            reads["channel"] = chan_r
        memory = limits.memory_mb + limits.scratch_mb + box.config.worker_overhead_mb
        oom0, pids0 = box._prepare_slot(self.slot, limits, memory, extra_pids=self.extra_pids)
        flight = _Flight(self.sock, limits, _proc.Capture(reads, limits.output_bytes), oom0, pids0)
        try:
            try:
                self.sock.sendmsg([b"job"], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", owned))])
            except OSError:
                flight.reply["dead"] = True
        finally:
            for fd in owned:
                os.close(fd)
        return flight

    async def _pump_on_loop(self, flight: _Flight) -> str:
        """`Capture.pump` as loop readers: 'done' (pipes closed and the reply read), 'timeout' or
        'output' (a cap was exceeded)."""
        loop = asyncio.get_running_loop()
        cap, sock_fd = flight.cap, flight.sock.fileno()
        settled: asyncio.Future[str] = loop.create_future()
        watched = set(cap.fds.values())

        def finish(reason: str) -> None:
            if not settled.done():
                settled.set_result(reason)

        def on_pipe(name: str) -> None:
            try:
                over = cap._read(name) == "output"
            except OSError as e:
                return fail(e)
            if over:
                finish("output")
            elif name not in cap.open:  # EOF
                fd = cap.fds[name]
                loop.remove_reader(fd)
                watched.discard(fd)
                if not watched:
                    finish("done")

        def on_sock() -> None:
            loop.remove_reader(sock_fd)
            watched.discard(sock_fd)
            try:
                flight.on_reply()
            except ValueError as e:  # not JSON: the worker is broken, as `run` would raise
                return fail(e)
            if not watched:
                finish("done")

        def fail(e: Exception) -> None:
            if not settled.done():
                settled.set_exception(e)

        for name, fd in cap.fds.items():
            loop.add_reader(fd, on_pipe, name)
        loop.add_reader(sock_fd, on_sock)
        watched.add(sock_fd)
        timer = loop.call_later(max(0.0, flight.deadline - time.monotonic()), finish, "timeout")
        try:
            return await settled
        finally:
            timer.cancel()
            for fd in watched:
                loop.remove_reader(fd)

    def _broken(self, flight: _Flight, reason: str) -> bool:
        """Whether the worker must go after this job (a limit hit, death, protocol error, or its ask)."""
        reply = flight.reply
        return reason != "done" or bool(reply.get("dead") or reply.get("recycle")) or "status" not in reply

    def _recycle(self, cap: _proc.Capture) -> None:
        self.box.stats["worker_recycles"] += 1
        self.stop()  # kills the whole sandbox: nothing of this job survives
        cap.drain()

    def _kill_in_thread(self, cap: _proc.Capture) -> Future[None]:
        """`_recycle` on a thread of its own. The future is running at once, so cancelling an await
        of it cannot stop the kill, and its callbacks run without any event loop."""
        done: Future[None] = Future()
        done.set_running_or_notify_cancel()

        def kill() -> None:
            try:
                self._recycle(cap)
            except BaseException as e:
                done.set_exception(e)
            else:
                done.set_result(None)

        threading.Thread(target=kill, name="worker-kill", daemon=True).start()
        return done

    def _abandon(self) -> None:
        """A loop job was given up mid-way (cancelled, or its pump failed): kill the worker, free it."""
        try:
            self.box.stats["worker_recycles"] += 1
            self.stop()
        finally:
            self.lock.release()

    def _finish(self, flight: _Flight, reason: str, wall: float) -> ExecResult | None:
        """The job's result; None when the worker died before running it (retry it on a fresh one).
        Raises SandboxError when the worker reported an error of its own."""
        box, slot, reply, limits = self.box, self.slot, flight.reply, flight.limits
        counted = slot is not None and slot.version != "none"
        oom = counted and slot.counters(True)[0] > flight.oom0  # refreshed once; `_result` reuses it
        if reason == "done" and "status" not in reply and not oom:
            if reply.get("error"):
                raise SandboxError(f"warm worker failed: {reply['error']!r}")
            return None
        if "status" in reply:
            code = os.waitstatus_to_exitcode(reply["status"])
            exit_code, sig = (code, None) if code >= 0 else (None, -code)
        else:  # killed by us (limit) or by the OOM killer together with its worker
            exit_code, sig = None, 9
        return box._result(
            flight.cap,
            slot,
            reason,
            exit_code,
            sig,
            flight.oom0,
            flight.pids0,
            wall,
            cpu=reply.get("cpu", 0.0),
            cpu_limit=limits.cpu_time_s,
            peak=reply.get("maxrss_kb", 0) / 1024 or None,
            sweep=False,
            refresh=False,
        )


class _Flight:
    """One job between its hand-over to a worker and its reply."""

    __slots__ = ("sock", "limits", "cap", "oom0", "pids0", "reply", "t0", "deadline")

    def __init__(self, sock: socket.socket, limits: Limits, cap: _proc.Capture, oom0: int, pids0: int):
        self.sock, self.limits, self.cap, self.oom0, self.pids0 = sock, limits, cap, oom0, pids0
        self.reply: dict = {}
        self.t0 = time.monotonic()
        self.deadline = self.t0 + limits.wall_time_s

    def on_reply(self) -> bool:
        """Read the worker's reply (EOF or a broken socket reads as its death); True: it is in."""
        try:
            data = self.sock.recv(65536)
        except OSError:
            data = b""
        self.reply.update(json.loads(data) if data else {"dead": True})
        return True


def _worker_rlimits() -> set[int]:
    r = _proc.resource
    return {r.RLIMIT_CORE, r.RLIMIT_MSGQUEUE, r.RLIMIT_NOFILE}
