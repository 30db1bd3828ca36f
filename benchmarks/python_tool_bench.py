"""The stateful Python tool (`sandbox.python_session`) against a bare interpreter, same run.

    python benchmarks/python_tool_bench.py                    # writes out/python_tool_bench.md
    python benchmarks/python_tool_bench.py --update-results   # rewrites benchmarks/results/python_tool_bench.md

Modes, alternated for `--rounds` rounds:
  bare     `python3 -I -c <sandbox/_repl.py>` as a plain subprocess, no sandbox: the same interpreter
           loop, the same host side (`Interpreter`) and protocol, started cold per session (baseline)
  sandbox  `python_sessions("bwrap")`: the interpreter is a job of a warm bwrap pool's worker
Per round and mode: `--opens` session opens (open time: `open()` until the interpreter has said
hello; bare: spawn until hello), then one session runs `--calls` small calls (`x = x + 1; x`) one
after another (latency p50/p95, calls/s), then `--sessions` sessions run calls at once for
`--burst-s` seconds (aggregate calls/s). Goals: p50 <= 15 ms and >= 150 calls/s (sandbox, one session).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from sandbox import _proc  # noqa: E402
from sandbox.backend import sandbox_python  # noqa: E402
from sandbox.python_session import Interpreter, SessionLimits, python_sessions, repl_source  # noqa: E402

RESULTS = ROOT / "benchmarks" / "results" / "python_tool_bench.md"
CALL = "x = x + 1; x"
LIMITS = SessionLimits()


class BareSession:
    """The interpreter loop as a plain subprocess (no sandbox), driven like a session."""

    def __init__(self) -> None:
        self.proc: subprocess.Popen | None = None
        self.interp: Interpreter | None = None

    async def open(self) -> None:
        req_r, req_w = _proc.pipe()
        out_r, out_w = _proc.pipe()
        chan_r, chan_w = _proc.pipe()
        argv = [sandbox_python(), "-I", "-c", repl_source(), str(req_r), str(chan_w)]
        self.proc = subprocess.Popen(
            argv, stdin=subprocess.DEVNULL, stdout=out_w, stderr=out_w, pass_fds=(req_r, chan_w)
        )
        for fd in (req_r, out_w, chan_w):
            os.close(fd)
        self.interp = Interpreter(req_w, out_r, chan_r, os.pidfd_open(self.proc.pid))
        await self.interp.hello()

    async def run(self, code: str):
        lim = LIMITS
        return await self.interp.call(code, lim.timeout_s, lim.cpu_s, lim.output_bytes, lim.grace_s)

    async def close(self) -> None:
        self.interp.kill()
        await asyncio.to_thread(self.proc.wait)
        self.interp.close()


async def _checked(session, code: str) -> None:
    r = await session.run(code)
    if isinstance(r, tuple):  # bare: (kind, reply, output, ...)
        ok = r[0] == "reply" and r[1].get("error") is None
    else:
        ok = r.ok
    if not ok:
        raise RuntimeError(f"call failed: {r}")


async def measure(mode: str, opens: int, calls: int, sessions: int, burst_s: float, pool=None) -> dict:
    def new():
        return BareSession() if mode == "bare" else pool.session()

    open_times = []
    for _ in range(opens):
        s = new()
        t0 = time.perf_counter()
        await s.open()
        open_times.append(time.perf_counter() - t0)
        await s.close()
    s = new()
    await s.open()
    await _checked(s, "x = 0")
    lat = []
    t_all = time.perf_counter()
    for _ in range(calls):
        t0 = time.perf_counter()
        await _checked(s, CALL)
        lat.append(time.perf_counter() - t0)
    seq_rate = calls / (time.perf_counter() - t_all)
    await s.close()

    group = [new() for _ in range(sessions)]
    await asyncio.gather(*(g.open() for g in group))
    await asyncio.gather(*(_checked(g, "x = 0") for g in group))
    done = [0]
    stop = time.perf_counter() + burst_s

    async def loop(g) -> None:
        while time.perf_counter() < stop:
            await _checked(g, CALL)
            done[0] += 1

    t0 = time.perf_counter()
    await asyncio.gather(*(loop(g) for g in group))
    burst_rate = done[0] / (time.perf_counter() - t0)
    await asyncio.gather(*(g.close() for g in group))
    lat.sort()
    return {
        "p50_ms": 1000 * statistics.median(lat),
        "p95_ms": 1000 * lat[int(0.95 * (len(lat) - 1))],
        "calls_s": seq_rate,
        "burst_calls_s": burst_rate,
        "open_ms": 1000 * statistics.median(open_times),
    }


async def bench(args) -> dict[str, list[dict]]:
    results: dict[str, list[dict]] = {"bare": [], "sandbox": []}
    async with python_sessions("bwrap", max_sessions=max(args.sessions, 2), limits=LIMITS) as pool:
        for k in range(args.rounds):
            for mode in ("bare", "sandbox") if k % 2 == 0 else ("sandbox", "bare"):
                r = await measure(mode, args.opens, args.calls, args.sessions, args.burst_s, pool)
                results[mode].append(r)
                print(
                    f"round {k} {mode:8s} p50 {r['p50_ms']:.2f} ms p95 {r['p95_ms']:.2f} ms "
                    f"{r['calls_s']:.0f} calls/s, {args.sessions} sessions {r['burst_calls_s']:.0f} calls/s, "
                    f"open {r['open_ms']:.1f} ms",
                    flush=True,
                )
    return results


def report(args, results: dict[str, list[dict]]) -> str:
    med = {m: {key: statistics.median(r[key] for r in rs) for key in rs[0]} for m, rs in results.items()}
    load = " ".join(Path("/proc/loadavg").read_text().split()[:3])
    cpus = len(os.sched_getaffinity(0))
    b, s = med["bare"], med["sandbox"]
    lines = [
        "# The Python tool session: sandboxed vs a bare interpreter",
        "",
        f"`python benchmarks/python_tool_bench.py --rounds {args.rounds} --calls {args.calls} --opens {args.opens} "
        f"--sessions {args.sessions}` ({time.strftime('%Y-%m-%d')}, {cpus} CPUs, load average at the end {load}). "
        f"Call: `{CALL}`. bare: the same interpreter loop (`sandbox/_repl.py`) and host side as a plain "
        'subprocess, started cold per session; sandbox: `python_sessions("bwrap")`, warm pool. Medians over '
        "the rounds (bare and sandbox alternated). Latency and calls/s: one session, one call at a time; "
        f"burst: {args.sessions} sessions calling at once for {args.burst_s:g} s.",
        "",
        "| mode | p50 latency | p95 latency | calls/s | calls/s, burst | session open |",
        "|---|---|---|---|---|---|",
    ]
    for mode, m in med.items():
        lines.append(
            f"| {mode} | {m['p50_ms']:.2f} ms | {m['p95_ms']:.2f} ms | {m['calls_s']:.0f} | "
            f"{m['burst_calls_s']:.0f} | {m['open_ms']:.1f} ms |"
        )
    lines.append(
        f"| sandbox / bare | {s['p50_ms'] / b['p50_ms']:.2f}x | {s['p95_ms'] / b['p95_ms']:.2f}x | "
        f"{s['calls_s'] / b['calls_s']:.2f}x | {s['burst_calls_s'] / b['burst_calls_s']:.2f}x | "
        f"{s['open_ms'] / b['open_ms']:.2f}x |"
    )
    goal = s["p50_ms"] <= 15 and s["calls_s"] >= 150
    lines += [
        "",
        "What the sandbox adds per call: the interpreter runs under seccomp, in its own cgroup and pid "
        "namespace, and after every call it makes sure no process the call started is left (one `kill(-1)`). "
        "On a shared 2-CPU machine the burst figures (several sessions at once) vary most from run to run.",
        "",
        f"Goal (sandbox, one session): p50 <= 15 ms and >= 150 calls/s: **{'met' if goal else 'NOT met'}** "
        f"({s['p50_ms']:.2f} ms, {s['calls_s']:.0f} calls/s).",
        "",
        "Per round:",
        "",
        "| round | mode | p50 | p95 | calls/s | burst calls/s | open |",
        "|---|---|---|---|---|---|---|",
    ]
    for mode, rs in results.items():
        for k, r in enumerate(rs):
            lines.append(
                f"| {k} | {mode} | {r['p50_ms']:.2f} ms | {r['p95_ms']:.2f} ms | {r['calls_s']:.0f} | "
                f"{r['burst_calls_s']:.0f} | {r['open_ms']:.1f} ms |"
            )
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", type=Path, help=f"where to write (default out/{RESULTS.name})")
    p.add_argument("--update-results", action="store_true", help=f"rewrite the committed {RESULTS}")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--calls", type=int, default=2000)
    p.add_argument("--opens", type=int, default=20)
    p.add_argument("--sessions", type=int, default=4)
    p.add_argument("--burst-s", type=float, default=2.0)
    args = p.parse_args(argv)
    args.out = args.out or (RESULTS if args.update_results else ROOT / "out" / RESULTS.name)
    text = report(args, asyncio.run(bench(args)))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(text)
    print(text)
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
