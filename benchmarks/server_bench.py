#!/usr/bin/env python3
r"""Reward-server benchmark: `rlvr-reward-server` vs a naive inline FastAPI server, same run, same items.

    python benchmarks/server_bench.py [--concurrency 64] [--seconds 10] [--rounds 3] [--workers 1 2]

Both servers run under uvicorn with the same settings in their own processes on 127.0.0.1. The naive
server is what one writes first: a FastAPI `/score` route with a pydantic body that calls the same
math checker (`rubrics.math.verify`, process-wide CAS pool) inline and returns a dict. Ours is the real
console command (`python -m rubrics.server.cli --rubric math`), with 2 CAS workers in all (like the
naive server's pool) whatever its number of processes. The load is `--concurrency` keep-alive
connections from a separate process (a minimal HTTP/1.1 client, so the client costs little CPU),
each posting distinct math items back to back for `--seconds`: the completions and golds of
`benchmarks/data/math_cases.jsonl`, cycled, each under its own prompt id, so our result cache never
hits (the servers do the same checking work). Reported per server: req/s, p50/p99 latency, errors, the
server's peak RSS, and the CPU time per request of the server processes (event loops), of their CAS
workers and of the load generator, with the cores all three kept busy (on a 2-core machine the
client shares the cores, so 2 / total-CPU-per-request is the ceiling on req/s); ratios are against the
naive server of the same round; the load average is read at the start and end of each round.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing as mp
import os
import pathlib
import socket
import statistics
import subprocess
import sys
import time
from collections.abc import Sequence

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

NAIVE = """
from fastapi import FastAPI
from pydantic import BaseModel
from rubrics.math import verify

app = FastAPI()

class Req(BaseModel):
    rubric: str
    prompt: str = ""
    completion: str
    answer: str
    id: str | None = None

@app.post("/score")
async def score(req: Req):
    v = verify(req.completion, req.answer)
    ok = v.reason not in ("timeout", "error")
    return {"score": (1.0 if v.correct else 0.0) if ok else None, "status": v.reason, "id": req.id}

@app.get("/readyz")
async def readyz():
    verify("\\\\boxed{x+1}", "1+x")  # start the CAS pool
    return {"ready": True}
"""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def bodies(n: int) -> list[bytes]:
    cases = [json.loads(line) for line in (ROOT / "benchmarks/data/math_cases.jsonl").open()]
    out = []
    for i in range(n):
        c = cases[i % len(cases)]
        item = {"rubric": "math", "prompt": f"Problem {i}", "completion": c["pred"], "answer": c["gold"]}
        out.append(json.dumps(item).encode())
    return out


# --- load generator (own process) --------------------------------------------------------------


async def _conn(port: int, work: list[bytes], start: int, stride: int, stop: float, lat: list, errs: list):
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    i = start
    while time.perf_counter() < stop:
        body = work[i % len(work)]
        i += stride
        head = f"POST /score HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n"
        t0 = time.perf_counter()
        writer.write(head.encode() + body)
        status = await reader.readline()
        length = 0
        while (line := await reader.readline()) not in (b"\r\n", b""):
            if line.lower().startswith(b"content-length:"):
                length = int(line.split(b":")[1])
        await reader.readexactly(length)
        lat.append(time.perf_counter() - t0)
        if b" 200 " not in status:
            errs.append(status)
    writer.close()


def load(port: int, concurrency: int, seconds: float, n_items: int, out: mp.Queue) -> None:
    work = bodies(n_items)

    async def run() -> tuple[list, list, float, float]:
        cpu0 = time.process_time()
        lat: list[float] = []
        errs: list[bytes] = []
        t0 = time.perf_counter()
        stop = t0 + seconds
        await asyncio.gather(
            *(_conn(port, work, k, concurrency, stop, lat, errs) for k in range(concurrency))
        )
        return lat, errs, time.perf_counter() - t0, time.process_time() - cpu0

    out.put(asyncio.run(run()))


# --- servers -----------------------------------------------------------------------------------


def start(
    kind: str, port: int, workers: int, tmp: pathlib.Path, extra: Sequence[str] = ()
) -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "RLVR_MATH_WORKERS": "2"}
    if kind == "naive":
        (tmp / "naive_server.py").write_text(NAIVE)
        cmd = [
            sys.executable,
            "-m",
            "uvicorn",
            "naive_server:app",
            "--port",
            str(port),
            "--log-level",
            "warning",
            "--no-access-log",
        ]
        return subprocess.Popen(cmd, cwd=tmp, env={**env, "PYTHONPATH": f"{tmp}:{ROOT}"})
    cmd = [
        sys.executable,
        "-m",
        "rubrics.server.cli",
        "--rubric",
        "math",
        "--port",
        str(port),
        "--workers",
        str(workers),
    ]
    cmd += ["--math-workers", str(max(1, 2 // workers)), *extra]  # 2 CAS workers in all, as the naive pool
    return subprocess.Popen(cmd, cwd=ROOT, env=env)


def wait_ready(port: int, timeout: float = 120) -> None:
    import httpx

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if httpx.get(f"http://127.0.0.1:{port}/readyz", timeout=30).status_code == 200:
                return
        except httpx.TransportError:
            pass
        time.sleep(0.1)
    raise RuntimeError(f"server on {port} never ready")


def _tree(pid: int) -> list[int]:
    kids = subprocess.run(["ps", "-o", "pid=", "--ppid", str(pid)], capture_output=True, text=True).stdout
    return [pid] + [p for k in kids.split() for p in _tree(int(k))]


def cpu_s(pid: int) -> tuple[float, float]:
    """CPU seconds so far of a server's processes and of its CAS workers (reaped ones included)."""
    tick = os.sysconf("SC_CLK_TCK")
    server = cas = 0.0
    for p in _tree(pid):
        try:
            fields = pathlib.Path(f"/proc/{p}/stat").read_text().rsplit(")", 1)[1].split()
            cmd = pathlib.Path(f"/proc/{p}/cmdline").read_bytes()
        except OSError:  # exited meanwhile
            continue
        own, reaped = (int(fields[11]) + int(fields[12])) / tick, (int(fields[13]) + int(fields[14])) / tick
        if b"pool import serve" in cmd:
            cas += own
        else:
            server, cas = server + own, cas + reaped  # a server's reaped children are CAS workers
    return server, cas


def rss_mb(pid: int) -> float:
    """Resident memory of a process and its children (MiB)."""
    out = subprocess.run(["ps", "-o", "rss=", "--ppid", str(pid)], capture_output=True, text=True).stdout
    own = subprocess.run(["ps", "-o", "rss=", "-p", str(pid)], capture_output=True, text=True).stdout
    return sum(int(x) for x in (out + own).split()) / 1024


def measure(
    kind: str, workers: int, args: argparse.Namespace, tmp: pathlib.Path, extra: Sequence[str] = ()
) -> dict:
    port = free_port()
    proc = start(kind, port, workers, tmp, extra)
    try:
        wait_ready(port)
        q: mp.Queue = mp.get_context("spawn").Queue()
        warm = mp.get_context("spawn").Process(target=load, args=(port, 8, 1.0, 500, q))
        warm.start()
        q.get()
        warm.join()
        p = mp.get_context("spawn").Process(
            target=load, args=(port, args.concurrency, args.seconds, args.items, q)
        )
        cpu0 = cpu_s(proc.pid)
        p.start()
        peak = 0.0
        while p.is_alive() and q.empty():
            peak = max(peak, rss_mb(proc.pid))
            time.sleep(0.5)
        lat, errs, wall, client_cpu = q.get()
        cpu1 = cpu_s(proc.pid)
        p.join()
    finally:
        proc.terminate()
        proc.wait(30)
    lat.sort()
    return {
        "rps": len(lat) / wall,
        "p50": 1000 * statistics.median(lat),
        "p99": 1000 * lat[int(0.99 * (len(lat) - 1))],
        "n": len(lat),
        "errors": len(errs),
        "rss": peak,
        "us": [
            1e6 * (cpu1[0] - cpu0[0]) / len(lat),
            1e6 * (cpu1[1] - cpu0[1]) / len(lat),
            1e6 * client_cpu / len(lat),
        ],
        "cores": (cpu1[0] - cpu0[0] + cpu1[1] - cpu0[1] + client_cpu) / wall,
    }


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--concurrency", type=int, default=64)
    ap.add_argument("--seconds", type=float, default=10.0)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--items", type=int, default=200_000, help="distinct items in the rotation")
    ap.add_argument("--workers", type=int, nargs="+", default=[1, 2], help="server processes of ours")
    ap.add_argument("--inflight", type=int, nargs="+", default=[12], help="math windows of ours")
    args = ap.parse_args()
    tmp = pathlib.Path(os.environ.get("TMPDIR", "/tmp")) / f"server_bench_{os.getpid()}"
    tmp.mkdir(parents=True, exist_ok=True)
    print(
        f"concurrency {args.concurrency}, {args.seconds:g} s per server, {args.rounds} round(s), cpus {os.cpu_count()}"
    )
    print(
        f"{'round':>5} {'server':<22} {'req/s':>8} {'p50 ms':>8} {'p99 ms':>8} {'errors':>6} {'RSS MiB':>8} {'x req/s':>8} {'x p99':>7}"
        f"  {'CPU us/req: server':>18} {'CAS':>5} {'client':>6} {'cores':>5}  load"
    )
    for rnd in range(1, args.rounds + 1):
        load0 = open("/proc/loadavg").read().split()[0]
        base = measure("naive", 1, args, tmp)
        rows = [("naive inline", base)] + [
            (f"ours {w}p window {k}", measure("ours", w, args, tmp, ["--rubric-inflight", f"math={k}"]))
            for w in args.workers
            for k in args.inflight
        ]
        load1 = open("/proc/loadavg").read().split()[0]
        for name, r in rows:
            print(
                f"{rnd:>5} {name:<22} {r['rps']:>8.0f} {r['p50']:>8.1f} {r['p99']:>8.1f} {r['errors']:>6} "
                f"{r['rss']:>8.0f} {r['rps'] / base['rps']:>8.2f} {r['p99'] / base['p99']:>7.2f}  "
                f"{r['us'][0]:>18.0f} {r['us'][1]:>5.0f} {r['us'][2]:>6.0f} {r['cores']:>5.2f}  {load0}->{load1}"
            )


if __name__ == "__main__":
    main()
