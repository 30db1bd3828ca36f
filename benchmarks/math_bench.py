#!/usr/bin/env python3
r"""Math verifier benchmark: rubrics.math vs math-verify (gold wrapped in \boxed{}), same run, same cases.

    python benchmarks/math_bench.py [--workers 2] [--repeat 1] [--only public|adversarial|recall] [--in-thread]

Cases: `benchmarks/data/math_cases.jsonl` (public, labelled; `ambiguous` ones left out of the headline),
`tests/math/adversarial_cases.py` (our hostile suite) and `tests/math/recall_cases.py` (correct answers
in real-output shapes, by class). `--in-thread` makes every call from a non-main thread. Each verifier runs in `--workers` forked
processes that pull cases from a shared queue; latency is measured around each call, throughput is
checks per second of wall time after every worker has warmed up. A check slower than `--limit` seconds
counts as a timeout (its verdict is still recorded). Prints one table; ratios are against math-verify.
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


def ours(pred: str, gold: str) -> bool:
    from rubrics.math import check_answer

    return check_answer(pred, gold)


def math_verify_boxed_gold(pred: str, gold: str) -> bool:
    from math_verify import ExprExtractionConfig, LatexExtractionConfig, parse, verify

    g = gold if re.search(r"\\boxed|\$|\\\(|\\\[", gold) else "\\boxed{" + gold + "}"
    gp = parse(g, extraction_config=[LatexExtractionConfig()])
    pp = parse(pred, extraction_config=[ExprExtractionConfig(), LatexExtractionConfig()])
    return bool(verify(gp, pp))


VERIFIERS = {"rubrics.math": ours, "math-verify (boxed gold)": math_verify_boxed_gold}


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
    while True:
        idx = queue.get()
        if idx is None:
            return
        t0 = time.perf_counter()
        try:
            verdict, err = bool(fn(cases[idx]["pred"], cases[idx]["gold"])), ""
        except BaseException as exc:  # noqa: BLE001 - an exception is verdict False, reported
            verdict, err = False, type(exc).__name__
        results.put((idx, verdict, time.perf_counter() - t0, err))


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
    t0 = time.perf_counter()
    go.set()
    out = [results.get(timeout=600) for _ in jobs]
    wall = time.perf_counter() - t0
    for p in procs:
        p.join()
    verdicts = {idx: (v, dt, err) for idx, v, dt, err in out}
    return {"verdicts": verdicts, "latencies": [dt for _, _, dt, _ in out], "wall": wall, "checks": len(jobs)}


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
    ap.add_argument("--repeat", type=int, default=1, help="run the case list this many times (throughput)")
    ap.add_argument("--limit", type=float, default=2.0, help="seconds; a slower check counts as a timeout")
    ap.add_argument("--only", choices=["public", "adversarial", "recall"])
    ap.add_argument("--in-thread", action="store_true", help="call each verifier from a non-main thread")
    args = ap.parse_args()
    cases = load_cases(args.only)
    rows = []
    load_start = open("/proc/loadavg").read().split()[:3]
    for name in VERIFIERS:
        r = run(name, cases, args.workers, args.repeat, args.in_thread)
        v = r["verdicts"]
        headline = score(cases, v, lambda c: c["set"] == "public" and not c["ambiguous"])
        adv = score(cases, v, lambda c: c["set"] == "adversarial")
        rec = score(cases, v, lambda c: c["set"] == "recall")
        subsets = [
            score(cases, v, lambda c, f=f: c["set"] == "public" and not c["ambiguous"] and f(c["source"]))
            for f in SUBSETS.values()
        ]
        slow = sum(1 for dt in r["latencies"] if dt > args.limit)
        errors = sum(1 for _, _, err in v.values() if err)
        rows.append((name, headline, subsets, adv, rec, slow, errors, r))
    base = rows[-1][7]
    load_end = open("/proc/loadavg").read().split()[:3]
    print(
        f"cases: {len(cases)} ({args.workers} workers, repeat {args.repeat}, limit {args.limit}s, "
        f"cpus {os.cpu_count()}, in-thread {args.in_thread}); load average "
        f"{' '.join(load_start)} at start, {' '.join(load_end)} at end\n"
    )
    head = (
        "| verifier | public acc | FP/FN | " + " | ".join(SUBSETS) + " | adversarial acc | adv FP | "
        "recall acc | recall FP/FN | "
        ">limit | errors | p50 ms | p99 ms | max ms | checks/s | throughput vs math-verify |"
    )
    print(head)
    print("|" + "---|" * (head.count("|") - 1))
    for name, (n, right, fp, fn), subsets, (an, aright, afp, _), (
        rn,
        rright,
        rfp,
        rfn,
    ), slow, errors, r in rows:
        lat = r["latencies"]
        tput = r["checks"] / r["wall"]
        ratio = tput / (base["checks"] / base["wall"])
        sub = " | ".join(f"{sr / sn * 100:.1f}%" if sn else "-" for sn, sr, _, _ in subsets)
        public = f"{right / n * 100:.1f}%" if n else "-"
        adv_acc = f"{aright / an * 100:.1f}%" if an else "-"
        rec_acc = f"{rright / rn * 100:.1f}%" if rn else "-"
        print(
            f"| {name} | {public} | {fp}/{fn} | {sub} | {adv_acc} | {afp} | {rec_acc} | {rfp}/{rfn} | "
            f"{slow} | {errors} | "
            f"{pct(0.5, lat):.2f} | {pct(0.99, lat):.1f} | {max(lat) * 1000:.0f} | {tput:.0f} | "
            f"{ratio:.2f}x |"
        )
    print(
        "\nmean latency: "
        + ", ".join(f"{name} {statistics.mean(r['latencies']) * 1000:.2f} ms" for name, *_, r in rows)
    )


if __name__ == "__main__":
    main()
