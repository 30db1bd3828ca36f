"""Sandbox per-job overhead: trivial solution + 5 asserts, sequential and with 2 concurrent workers.

Modes (all measured in the same run, ratios against the baselines printed at the end):
  bare        subprocess `python3 -I -c HARNESS` per job, no isolation (baseline)
  fork_ceiling  the warm worker's image forking one child per job, nothing else (`fork_ceiling.py`): no
              host round trip, protocol or isolation; what any fork-per-job pool can at most reach here
  host_pool   unsandboxed warm pool (`--in-flight` workers): the bwrap pool's worker and host code, same fork-per-job
              protocol, minus namespaces/seccomp/cgroups/uid drop (pool baseline: ratios = isolation cost)
  bwrap       one-shot bubblewrap sandbox per job (BwrapSandbox, warm_pool=False)
  bwrap_pool  bubblewrap warm pool (BwrapSandbox, warm_pool=True), driven by `run_sync` from threads
  bwrap_loop  the same pool driven by `await run(job)` from one event loop (how the rubrics call it)
  docker_run  `docker run --rm -i` per job (network none, read-only, non-root, limits) (docker baseline)
  docker_pool Docker warm pool (DockerSandbox), `run_sync` from threads
  docker_loop the same, `await run(job)` from one event loop
Docker modes need a running engine and the local image (scripts/ci_host_setup.sh); else they are skipped.
Every pool is warmed (`warm_up`: all slots' workers started) before timing: a warm pool pays its
start once per process. Latency: p50/p99 over all rounds (sequential, then `--in-flight` jobs at once:
threads, or tasks on one event loop for the *_loop modes). `--in-flight` defaults to the pools' default
slot count (one more than the CPUs, `sandbox.core.default_slots`), and every mode gets the same: the
pools are built with that many slots, bare runs that many subprocesses at a time. Throughput: median of
the per-round rates of the in-flight bursts (`jobs/s per round`); `hpool/tput` = host_pool jobs/s / mode
jobs/s.

Measured on a 2-vCPU VM, 3 in flight (the default), 3 runs, 2026-12-03, load 1.5-3.0
(`benchmarks/results/sandbox_bench.md`):

  mode          jobs/s     tput/bare  of fork_ceiling
  bare          148-184    1.00x
  fork_ceiling  1372-1489  8.0-9.4x   100%
  host_pool     637-707    3.8-4.3x   46-48%
  bwrap_pool    617-756    4.1-4.4x   45-51%

Isolation costs ~0-5% of throughput over the same unsandboxed pool and ~0.3-0.5 ms of p50. ">= 4x
bare" holds on that machine; on the VM before it the same code measured 3.0-3.4x (the fork and its
page faults cost more there). What keeps the pool at half the fork ceiling is its per-job protocol:
the Python work between forks (spec, files, stdio, sweep, reply), whose every written page faults
after a fork, and the host's side. Moving that work to a process that never forks (a fork server)
did not help: its own loop still wrote 160 pages, and the moved work is still CPU (results file:
the ablation and the fork-server A/B).

Usage: python benchmarks/sandbox_bench.py [--jobs N] [--docker-jobs M] [--rounds R] [--in-flight K]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import socket
import statistics
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from fork_ceiling import ForkCeiling  # noqa: E402

from sandbox import _proc  # noqa: E402
from sandbox.bwrap import PRELOAD, BwrapConfig, BwrapSandbox, SlotResults  # noqa: E402
from sandbox.core import Job, SandboxUnavailable, default_slots  # noqa: E402
from sandbox.docker import DockerConfig, DockerSandbox  # noqa: E402
from sandbox.pool import WORKER_SRC, Worker, python_plan  # noqa: E402

SOLUTION = "def add(a, b):\n    return a + b\n"
TESTS = "".join(f"assert add({i}, {i + 1}) == {2 * i + 1}\n" for i in range(5))
PROGRAM = SOLUTION + TESTS + "print('ok')\n"
PYTHON = "/usr/bin/python3"  # the interpreter the sandboxes run, so every mode pays the same start-up

# The unsandboxed warm pool: the bwrap pool's own worker code (`sandbox/_worker.py`: job spec memfd +
# fds over SCM_RIGHTS, files written to a scratch dir, a fork per job, reply, scratch wiped) and the same
# host side (`sandbox.pool.Worker.run`), minus bwrap, namespaces, seccomp, cgroups and the uid drop.
# Without a pid namespace there is no `kill(-1)` sweep: the job's own session is killed instead.
HOST_WORKER = r"""
import importlib.util, os, resource, shutil, signal, sys, tempfile
spec = importlib.util.spec_from_file_location("worker", sys.argv[1])
w = importlib.util.module_from_spec(spec)
spec.loader.exec_module(w)
for name in filter(None, sys.argv[3].split(",")):
    __import__(name)
w.SCRATCH = tempfile.mkdtemp(prefix="hostpool-")
import socket
w._settle()
ctrl = socket.socket(fileno=int(sys.argv[2]))
null = os.open("/dev/null", os.O_RDWR); os.dup2(null, 0); os.dup2(null, 1); os.close(null)
w._send(ctrl, {"ready": True})
while True:
    fds = w._recv_job(ctrl)
    if fds is None:
        shutil.rmtree(w.SCRATCH, ignore_errors=True)
        break
    job = w.json.loads(w._read_fd(fds[0]))
    written = w._write_files(job["files"])
    w._set_env(job["env"])
    pid, status, ru = w._run_job(job, fds, written, ctrl)
    try:
        os.killpg(pid, signal.SIGKILL)
    except OSError:
        pass
    w._send(ctrl, {"status": status, "cpu": ru.ru_utime + ru.ru_stime, "maxrss_kb": ru.ru_maxrss,
                   "recycle": False})
    for entry in os.scandir(w.SCRATCH):
        shutil.rmtree(entry.path) if entry.is_dir(follow_symlinks=False) else os.unlink(entry.path)
"""


class HostBox(SlotResults):
    """Just enough of a backend for `sandbox.pool.Worker`: no slots, no cgroups, no isolation."""

    name = "host_pool"

    def __init__(self) -> None:
        self.config = BwrapConfig()
        self.cgroups = None
        self.stats = {"worker_starts": 0, "worker_recycles": 0}

    def job_rlimits(self, limits):
        return _proc.job_rlimits(limits, None)


class HostWorker(Worker):
    def _launch(self, scratch_mb: int) -> socket.socket:
        host, inside = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        inside_fd = inside.detach()
        os.set_inheritable(inside_fd, True)
        self.err_fd = _proc.memfd_with(b"", "worker-stderr")
        argv = [PYTHON, "-I", "-c", HOST_WORKER, WORKER_SRC, str(inside_fd), ",".join(PRELOAD)]
        try:
            self.proc = subprocess.Popen(
                argv, stdin=subprocess.DEVNULL, stdout=self.err_fd, stderr=self.err_fd, pass_fds=[inside_fd]
            )
        finally:
            os.close(inside_fd)
        return host


class HostPool:
    """Unsandboxed warm fork-server workers (the pool baseline). Runs as the current user, no isolation."""

    def __init__(self, n: int):
        box = HostBox()
        self.workers = [HostWorker(box, None) for _ in range(n)]
        self.free = list(self.workers)
        self.lock = threading.Lock()
        self.job = Job(command=("python3", "main.py"), files={"main.py": PROGRAM})

    def run(self, _code: str) -> bool:
        with self.lock:
            worker = self.free.pop()
        try:
            res = worker.run(self.job, python_plan(self.job.command, PYTHON))
            return res.ok and res.stdout == b"ok\n"
        finally:
            with self.lock:
                self.free.append(worker)

    def close(self) -> None:
        for worker in self.workers:
            worker.stop()


def bare(code: str) -> bool:
    p = subprocess.run([PYTHON, "-I", "-c", code], capture_output=True, start_new_session=True)
    return p.returncode == 0 and p.stdout == b"ok\n"


DOCKER = "/usr/bin/docker" if os.path.exists("/usr/bin/docker") else "docker"


def docker_run(code: str) -> bool:
    argv = [
        DOCKER,
        "run",
        "--rm",
        "-i",
        "--network=none",
        "--read-only",
        "--tmpfs",
        "/tmp:size=64m",
        "--memory=512m",
        "--pids-limit=64",
        "--cap-drop=ALL",
        "--security-opt=no-new-privileges",
        "--user",
        "65534:65534",
        "--log-driver=none",
        "-v",
        "/usr:/usr:ro",
        "rlvr-sandbox:local",
        PYTHON,
        "-I",
        "-c",
        code,
    ]
    p = subprocess.run(argv, capture_output=True)
    return p.returncode == 0 and p.stdout == b"ok\n"


def sandboxed(box):
    job = Job(command=("python3", "main.py"), files={"main.py": PROGRAM})

    def run(_code: str) -> bool:
        res = box.run_sync(job)
        return res.ok and res.stdout == b"ok\n"

    return run


class OnLoop:
    """A sandbox driven by `await run(job)` from one event loop: `burst(n_seq, n_conc)` runs one round
    (n_seq one at a time, then n_conc with `in_flight` at once) on a fresh loop and returns the latencies."""

    def __init__(self, box, in_flight: int):
        self.job = Job(command=("python3", "main.py"), files={"main.py": PROGRAM})
        self.box = box
        self.in_flight = in_flight

    async def _one(self, lat: list[float]) -> bool:
        t = time.perf_counter()
        res = await self.box.run(self.job)
        lat.append((time.perf_counter() - t) * 1000)
        return res.ok and res.stdout == b"ok\n"

    def burst(self, n_seq: int, n_conc: int) -> tuple[list[float], list[float], float]:
        async def main():
            seq, conc = [], []
            for _ in range(n_seq):
                assert await self._one(seq), "wrong verdict"
            gate = asyncio.Semaphore(self.in_flight)

            async def gated():
                async with gate:
                    return await self._one(conc)

            t0 = time.perf_counter()
            assert all(await asyncio.gather(*(gated() for _ in range(n_conc)))), "wrong verdict in flight"
            return seq, conc, n_conc / (time.perf_counter() - t0)

        return asyncio.run(main())


class Ceiling:
    """The fork ceiling (`fork_ceiling.py`) in `measure`'s terms: one round is `burst(n_seq, n_conc)`."""

    def __init__(self, in_flight: int) -> None:
        self.forks = ForkCeiling(PYTHON, PRELOAD, procs=in_flight)

    def burst(self, n_seq: int, n_conc: int) -> tuple[list[float], list[float], float]:
        seq, ok = self.forks.sequential([PROGRAM] * n_seq, expect="ok\n")
        conc, rate, ok_conc = self.forks.concurrent([PROGRAM] * n_conc, expect="ok\n")
        assert ok == n_seq and ok_conc == n_conc, "wrong verdict in the fork ceiling"
        return seq, conc, rate


def _pct(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q * len(xs)))]


def measure(modes: dict, counts: dict, rounds: int, in_flight: int) -> dict:
    """Interleaved rounds: every mode runs its share of sequential jobs, then a burst of concurrent jobs
    on `in_flight` threads, round after round, so that all modes see the same background load."""
    lat = {m: [] for m in modes}
    conc_lat = {m: [] for m in modes}
    rates = {m: [] for m in modes}  # jobs/s of each round's concurrent burst
    for fn in modes.values():  # warm-up
        if hasattr(fn, "burst"):  # OnLoop, Ceiling
            fn.burst(2, 2)
            continue
        for _ in range(2):
            assert fn(PROGRAM), "wrong verdict during warm-up"
    for _ in range(rounds):
        for m, fn in modes.items():
            n_seq, n_conc = (max(1, c // rounds) for c in counts[m])
            if hasattr(fn, "burst"):
                seq, conc, rate = fn.burst(n_seq, n_conc)
                lat[m] += seq
                conc_lat[m] += conc
                rates[m].append(rate)
                continue
            for _ in range(n_seq):
                t = time.perf_counter()
                assert fn(PROGRAM), "wrong verdict"
                lat[m].append((time.perf_counter() - t) * 1000)

            def one(_, fn=fn, m=m):
                t = time.perf_counter()
                ok = fn(PROGRAM)
                conc_lat[m].append((time.perf_counter() - t) * 1000)
                return ok

            with ThreadPoolExecutor(in_flight) as ex:
                t0 = time.perf_counter()
                assert all(ex.map(one, range(n_conc))), "wrong verdict under concurrency"
                rates[m].append(n_conc / (time.perf_counter() - t0))
    return {
        m: {
            "p50": statistics.median(lat[m]),
            "p99": _pct(lat[m], 0.99),
            "c_p50": statistics.median(conc_lat[m]),
            "c_p99": _pct(conc_lat[m], 0.99),
            "jobs_s": statistics.median(rates[m]),
            "rates": rates[m],
        }
        for m in modes
    }


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--jobs", type=int, default=400, help="concurrent jobs per fast mode (sequential = half)")
    ap.add_argument("--docker-jobs", type=int, default=16, help="concurrent jobs for docker_run")
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument("--in-flight", type=int, default=default_slots(), help="jobs at once (and pool slots)")
    args = ap.parse_args()
    n, nd, k = args.jobs, args.docker_jobs, args.in_flight
    hp = HostPool(k)
    ceiling = Ceiling(k)
    oneshot = BwrapSandbox(BwrapConfig(slots=k, warm_pool=False))
    pool = BwrapSandbox(BwrapConfig(slots=k, warm_pool=True))
    asyncio.run(pool.warm_up())
    modes = {
        "bare": bare,
        "fork_ceiling": ceiling,
        "host_pool": hp.run,
        "bwrap": sandboxed(oneshot),
        "bwrap_pool": sandboxed(pool),
        "bwrap_loop": OnLoop(pool, k),
    }
    counts = {
        "bare": (n // 4, n // 2),
        "fork_ceiling": (n // 2, n),
        "host_pool": (n // 2, n),
        "bwrap": (n // 8, n // 4),
        "bwrap_pool": (n // 2, n),
        "bwrap_loop": (n // 2, n),
    }
    skipped, dbox = [], None
    try:
        dbox = DockerSandbox(DockerConfig(slots=k))
    except SandboxUnavailable as e:
        skipped.append(f"docker: {e}")
    else:
        asyncio.run(dbox.warm_up())
        modes.update(docker_run=docker_run, docker_pool=sandboxed(dbox), docker_loop=OnLoop(dbox, k))
        counts.update(docker_run=(nd // 2, nd), docker_pool=(n // 2, n), docker_loop=(n // 2, n))
    try:
        results = measure(modes, counts, args.rounds, k)
    finally:
        hp.close()
        ceiling.forks.close()
        oneshot.close_sync()
        pool.close_sync()
        if dbox is not None:
            dbox.close_sync()

    load = os.getloadavg()[0]
    print(
        f"sandbox_bench: trivial solution + 5 asserts, {k} in flight, cpus={os.cpu_count()}, load avg {load:.1f}"
    )
    print(
        f"{'mode':13s} {'p50 ms':>8s} {'p99 ms':>8s} {'kw p50':>8s} {'kw p99':>8s} {'jobs/s':>8s} "
        f"{'p50/bare':>9s} {'tput/bare':>10s} {'p50/hpool':>10s} {'hpool/tput':>10s}  jobs/s per round"
    )
    b, hpool = results["bare"], results["host_pool"]
    for mode, r in results.items():
        lat = f"{r['p50']:8.1f} {r['p99']:8.1f} {r['c_p50']:8.1f} {r['c_p99']:8.1f} {r['jobs_s']:8.1f}"
        ratios = (
            f"{r['p50'] / b['p50']:8.2f}x {r['jobs_s'] / b['jobs_s']:9.2f}x {r['p50'] / hpool['p50']:9.2f}x"
            f" {hpool['jobs_s'] / r['jobs_s']:9.2f}x"
        )
        print(f"{mode:13s} {lat} {ratios}  " + " ".join(f"{x:.0f}" for x in r["rates"]))
    for why in skipped:
        print(f"skipped {why}")
    bp, bl, bw = results["bwrap_pool"], results["bwrap_loop"], results["bwrap"]
    print("targets:")
    print(f"  bwrap_pool p50 within 1.2x of host_pool: {bp['p50'] / hpool['p50']:.2f}x")
    print(f"  bwrap_pool throughput within 1.2x of host_pool: {hpool['jobs_s'] / bp['jobs_s']:.2f}x")
    print(f"  bwrap_pool throughput >= 4x bare:       {bp['jobs_s'] / b['jobs_s']:.2f}x")
    print(f"  bwrap_loop throughput >= 4x bare:       {bl['jobs_s'] / b['jobs_s']:.2f}x")
    fc = results["fork_ceiling"]
    print(f"  (the fork ceiling itself:               {fc['jobs_s'] / b['jobs_s']:.2f}x bare;"
          f" bwrap_pool reaches {bp['jobs_s'] / fc['jobs_s']:.0%} of it, host_pool {hpool['jobs_s'] / fc['jobs_s']:.0%})")  # fmt: skip
    print(f"  one-shot bwrap p50 within 2.5x of bare: {bw['p50'] / b['p50']:.2f}x")
    if "docker_pool" in results:
        dp, dr = results["docker_pool"], results["docker_run"]
        print(f"  docker_pool throughput >= 30x docker_run: {dp['jobs_s'] / dr['jobs_s']:.1f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
