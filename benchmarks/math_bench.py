#!/usr/bin/env python3
r"""Math verifier benchmark: rubrics.math (CAS on and off) vs math-verify, same run, same cases.

    python benchmarks/math_bench.py [--workers 2] [--rounds 3] [--only public|adversarial|recall] [--in-thread]

Cases: `benchmarks/data/math_cases.jsonl` (public, labelled; `ambiguous` ones left out of the headline),
`tests/math/adversarial_cases.py` (our hostile suite) and `tests/math/recall_cases.py` (correct answers
in real-output shapes, by class). Verifiers: `rubrics.math` (`verify`, its CAS in worker processes),
`rubrics.math` with the CAS off (a check that would need the CAS counts as False) and math-verify's
`verify` (gold wrapped in `\boxed{}`, its best configuration). `--in-thread` makes every call from a
non-main thread.

Each verifier runs in `--workers` forked processes that pull cases from a shared queue; rounds are
interleaved (A, B, C, then B, C, A, ...) so a shared machine's load falls on all of them alike.
Latency is measured around each call (p50/p99 over all rounds; "p99 CPU ms" is the check's own CPU
time, CAS worker included, which the load of other processes does not stretch); throughput is checks per second of
wall time after every worker has warmed up, and checks per CPU-second (the processes' own CPU time,
CAS workers included: checks/s per fully used core, which a shared machine's load hardly moves).
Ratios are against math-verify in the same round (median over rounds). "unverified" counts checks
that could not be verified (CAS timeout or error; math-verify: an exception). A check slower than
`--limit` seconds counts under ">limit". Prints one markdown table and the issue-31 targets.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import pathlib
import re
import statistics
import sys
import time

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

SUBSETS = {
    "mv+lighteval": lambda s: s.startswith(("huggingface/Math-Verify:", "huggingface/lighteval:")),
    "independent": lambda s: (
        s.split(":")[0]
        in {
            "NVIDIA/NeMo-Skills",
            "hendrycks/math",
            "huggingface/trl",
            "PrimeIntellect-ai/verifiers",
            "openai/simple-evals",
        }
    ),
    "mv issues": lambda s: s.startswith("huggingface/Math-Verify issue"),
}
WARMUP = [
    ("1", "1"),
    (r"\boxed{\frac{1}{2}}", "0.5"),
    (r"\boxed{x+1}", "1+x"),
    (r"\boxed{(x-1)(x+1)}", "x^2-1"),
]


def ours(pred: str, gold: str) -> tuple[bool, bool]:
    """(verdict, verified)."""
    from rubrics.math import verify

    v = verify(pred, gold)
    return v.correct, v.verified


def ours_no_cas(pred: str, gold: str) -> tuple[bool, bool]:
    """The CAS-free part of `verify` only: a check that needs the CAS is False."""
    from rubrics.math.policy import DEFAULT_POLICY
    from rubrics.math.verifier import prepare_gold, verify_steps

    steps = verify_steps(pred, prepare_gold(gold, DEFAULT_POLICY))
    try:
        next(steps)
    except StopIteration as done:
        return done.value.correct, done.value.verified
    steps.close()
    return False, True


def math_verify_boxed_gold(pred: str, gold: str) -> tuple[bool, bool]:
    from math_verify import ExprExtractionConfig, LatexExtractionConfig, parse, verify

    g = gold if re.search(r"\\boxed|\$|\\\(|\\\[", gold) else "\\boxed{" + gold + "}"
    gp = parse(g, extraction_config=[LatexExtractionConfig()])
    pp = parse(pred, extraction_config=[ExprExtractionConfig(), LatexExtractionConfig()])
    return bool(verify(gp, pp)), True


BASELINE = "math-verify (boxed gold)"
VERIFIERS = {
    "rubrics.math": ours,
    "rubrics.math, CAS off": ours_no_cas,
    BASELINE: math_verify_boxed_gold,
}


def load_cases(only: str | None) -> list[dict]:
    cases = []
    if only in (None, "public"):
        for line in (ROOT / "benchmarks" / "data" / "math_cases.jsonl").read_text().splitlines():
            c = json.loads(line)
            cases.append({**c, "set": "public"})
    from tests.math import adversarial_cases, recall_cases

    for name, module in (("adversarial", adversarial_cases), ("recall", recall_cases)):
        if only not in (None, name):
            continue
        for group, items in module.ALL.items():
            for i, (pred, gold, expected) in enumerate(items):
                cases.append(
                    {
                        "id": f"{name[:3]}-{group}-{i}",
                        "pred": pred,
                        "gold": gold,
                        "expected": expected,
                        "ambiguous": False,
                        "source": group,
                        "set": name,
                    }
                )
    return cases


def _worker(name: str, cases: list[dict], queue, results, ready, go, in_thread: bool) -> None:
    import logging
    from concurrent.futures import ThreadPoolExecutor

    logging.disable(logging.CRITICAL)
    fn = VERIFIERS[name]
    if in_thread:
        pool = ThreadPoolExecutor(1)
        direct = fn

        def fn(pred: str, gold: str) -> bool:
            return pool.submit(direct, pred, gold).result()

    for p, g in WARMUP:
        try:
            fn(p, g)
        except Exception:  # noqa: BLE001 - warm-up only
            pass
    ready.put(os.getpid())
    go.wait()
    start, cpu0, cas0 = time.perf_counter(), time.process_time(), _cas_cpu_ms()
    while True:
        idx = queue.get()
        if idx is None:
            break
        t0, c0, k0 = time.perf_counter(), time.process_time(), _cas_cpu_ms()
        try:
            verdict, verified = fn(cases[idx]["pred"], cases[idx]["gold"])
            err = "" if verified else "unverified"
        except BaseException as exc:  # noqa: BLE001 - an exception is verdict False, reported
            verdict, err = False, type(exc).__name__
        dt = time.perf_counter() - t0
        results.put((idx, bool(verdict), dt, err, time.process_time() - c0 + (_cas_cpu_ms() - k0) / 1000))
    cpu = time.process_time() - cpu0 + (_cas_cpu_ms() - cas0) / 1000
    results.put(("cpu", cpu, time.perf_counter() - start, "", 0.0))


def _cas_cpu_ms() -> int:
    """CPU milliseconds of this process's CAS jobs so far (0 before its pool starts)."""
    from rubrics.math import pool

    return pool._default.stats["cpu_ms"] if pool._default is not None and pool._default.usable else 0


def run(name: str, cases: list[dict], workers: int, repeat: int, in_thread: bool = False) -> dict:
    ctx = mp.get_context("fork")
    queue, results, ready, go = ctx.Queue(), ctx.Queue(), ctx.Queue(), ctx.Event()
    procs = [
        ctx.Process(target=_worker, args=(name, cases, queue, results, ready, go, in_thread))
        for _ in range(workers)
    ]
    for p in procs:
        p.start()
    for _ in procs:
        ready.get(timeout=300)
    jobs = [i for _ in range(repeat) for i in range(len(cases))]
    for i in jobs:
        queue.put(i)
    for _ in procs:
        queue.put(None)
    go.set()
    got = [results.get(timeout=600) for _ in range(len(jobs) + len(procs))]  # cases, one "cpu" a worker
    out = [m for m in got if m[0] != "cpu"]
    wall = max(m[2] for m in got if m[0] == "cpu")
    cpu = sum(m[1] for m in got if m[0] == "cpu")
    for p in procs:
        p.join()
    verdicts = {idx: (v, dt, err) for idx, v, dt, err, _ in out}
    return {
        "verdicts": verdicts,
        "latencies": [m[2] for m in out],
        "cpu_latencies": [m[4] for m in out],
        "wall": wall,
        "cpu": cpu,
        "checks": len(jobs),
    }


def score(cases: list[dict], verdicts: dict, pick) -> tuple[int, int, int, int]:
    rows = [(c, verdicts[i][0]) for i, c in enumerate(cases) if pick(c)]
    right = sum(1 for c, v in rows if v == c["expected"])
    fp = sum(1 for c, v in rows if v and not c["expected"])
    fn = sum(1 for c, v in rows if not v and c["expected"])
    return len(rows), right, fp, fn


def pct(q: float, xs: list[float]) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q * len(xs)))] * 1000


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=3, help="interleaved rounds of every verifier")
    ap.add_argument("--repeat", type=int, default=1, help="run the case list this many times per round")
    ap.add_argument("--limit", type=float, default=2.0, help="seconds; a slower check counts as a timeout")
    ap.add_argument("--only", choices=["public", "adversarial", "recall"])
    ap.add_argument("--in-thread", action="store_true", help="call each verifier from a non-main thread")
    args = ap.parse_args()
    cases = load_cases(args.only)
    names = list(VERIFIERS)
    runs: dict[str, list[dict]] = {n: [] for n in names}
    load_start = open("/proc/loadavg").read().split()[:3]
    started = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    for r in range(args.rounds):
        for name in names[r % len(names) :] + names[: r % len(names)]:
            runs[name].append(run(name, cases, args.workers, args.repeat, args.in_thread))
    load_end = open("/proc/loadavg").read().split()[:3]
    print(
        f"{started}; cases: {len(cases)} ({args.workers} workers, {args.rounds} interleaved rounds, repeat "
        f"{args.repeat}, limit {args.limit}s, cpus {os.cpu_count()}, in-thread {args.in_thread}); load "
        f"average {' '.join(load_start)} at start, {' '.join(load_end)} at end\n"
    )
    head = (
        "| verifier | public acc | FP/FN | " + " | ".join(SUBSETS) + " | adversarial acc | adv FP | "
        "recall acc | recall FP/FN | unverified | >limit | errors | p50 ms | p99 ms | max ms | p99 CPU ms | "
        "checks/s | checks/CPU-s | vs math-verify (wall) | vs math-verify (CPU) |"
    )
    print(head)
    print("|" + "---|" * (head.count("|") - 1))
    summary = {}
    for name in names:
        rounds = runs[name]
        v = rounds[0]["verdicts"]
        flips = sorted(
            {
                cases[i]["id"]
                for other in rounds[1:]
                for i, (verdict, _, _) in other["verdicts"].items()
                if verdict != v[i][0]
            }
        )
        changed = len(flips)
        n, right, fp, fn = score(cases, v, lambda c: c["set"] == "public" and not c["ambiguous"])
        an, aright, afp, _ = score(cases, v, lambda c: c["set"] == "adversarial")
        rn, rright, rfp, rfn = score(cases, v, lambda c: c["set"] == "recall")
        subsets = [
            score(cases, v, lambda c, f=f: c["set"] == "public" and not c["ambiguous"] and f(c["source"]))
            for f in SUBSETS.values()
        ]
        lat = [dt for r in rounds for dt in r["latencies"]]
        cpu_lat = [dt for r in rounds for dt in r["cpu_latencies"]]
        errs = [err for r in rounds for _, _, err in r["verdicts"].values()]
        unverified = sum(1 for e in errs if e == "unverified")
        errors = sum(1 for e in errs if e and e != "unverified")
        slow = sum(1 for dt in lat if dt > args.limit)
        wall = [r["checks"] / r["wall"] for r in rounds]
        cpu = [r["checks"] / r["cpu"] for r in rounds]
        wall_ratio = statistics.median(
            a["checks"] / a["wall"] / (b["checks"] / b["wall"])
            for a, b in zip(rounds, runs[BASELINE], strict=True)
        )
        cpu_ratio = statistics.median(
            a["checks"] / a["cpu"] / (b["checks"] / b["cpu"])
            for a, b in zip(rounds, runs[BASELINE], strict=True)
        )
        sub = " | ".join(f"{sr / sn * 100:.1f}%" if sn else "-" for sn, sr, _, _ in subsets)
        acc = f"{right / n * 100:.1f}%" if n else "-"
        print(
            f"| {name} | {acc} | {fp}/{fn} | {sub} | {f'{aright / an * 100:.1f}%' if an else '-'} | {afp} | "
            f"{f'{rright / rn * 100:.1f}%' if rn else '-'} | {rfp}/{rfn} | {unverified} | {slow} | {errors} | "
            f"{pct(0.5, lat):.2f} | {pct(0.99, lat):.1f} | {max(lat) * 1000:.0f} | {pct(0.99, cpu_lat):.1f} | "
            f"{statistics.median(wall):.0f} | {statistics.median(cpu):.0f} | {wall_ratio:.2f}x | {cpu_ratio:.2f}x |"
        )
        summary[name] = {
            "right": right + aright + rright,
            "p99": pct(0.99, lat),
            "p99_cpu": pct(0.99, cpu_lat),
            "unverified": unverified,
            "wall_ratio": wall_ratio,
            "cpu_ratio": cpu_ratio,
            "changed": changed,
        }
        if flips:
            print(f"<!-- {name}: verdicts that changed between rounds: {', '.join(flips[:10])} -->")
    print()
    base = summary[BASELINE]
    for name in names[:2]:
        s = summary[name]
        print(
            f"{name}: throughput {s['cpu_ratio']:.1f}x per CPU-second and {s['wall_ratio']:.1f}x per wall "
            f"second (target >= 2x): {'met' if min(s['cpu_ratio'], s['wall_ratio']) >= 2 else 'NOT met'}; "
            f"right on {s['right']} vs {base['right']} cases (target >=): "
            f"{'met' if s['right'] >= base['right'] else 'NOT met'}; p99 {s['p99']:.1f} ms wall, "
            f"{s['p99_cpu']:.1f} ms CPU (target < 50): {'met' if s['p99'] < 50 else 'NOT met'} (wall), "
            f"{'met' if s['p99_cpu'] < 50 else 'NOT met'} (CPU); unverified {s['unverified']} (target 0): "
            f"{'met' if s['unverified'] == 0 else 'NOT met'}; verdicts that changed between rounds: {s['changed']}"
        )


if __name__ == "__main__":
    main()
