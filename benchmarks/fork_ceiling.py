"""The fork ceiling: how fast ANY fork-per-job Python design can go on this machine (issue 14).

`ForkCeiling(n)` starts n unsandboxed processes that hold the warm worker's own image (its preloaded
modules, the trusted harness, `_settle`: `_fork_ceiling_child.py`) and fork one child per program,
which runs it as `__main__` with stdout on a pipe. Nothing else: no host round trip, no control
protocol, no namespaces, no harness, no hack detection. A real pool (or rubric) job does all of that
on top, so its throughput can only come near this, never above it. `sandbox_bench` and `code_bench`
measure it in the same run as their baselines, so a target set as "k x bare" can be checked against
what the fork-per-job floor allows on the machine at hand.
"""

from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CHILD = Path(__file__).with_name("_fork_ceiling_child.py")
WORKER = ROOT / "sandbox" / "_worker.py"
RUNNER = ROOT / "sandbox" / "runner"  # the package


class ForkCeiling:
    """`procs` warm forking processes (one per job in flight) on `python` with `preload` imported."""

    def __init__(self, python: str, preload: tuple[str, ...], procs: int = 2):
        argv = [python, "-I", str(CHILD), str(WORKER), str(RUNNER), ",".join(preload)]
        self.procs = [
            subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
            for _ in range(procs)
        ]
        for proc in self.procs:
            if proc.stdout.readline() != "ready\n":
                self.close()
                raise RuntimeError(f"fork ceiling process did not start ({python})")

    def _ask(self, proc: subprocess.Popen, programs: list[str], expect: str | None) -> None:
        proc.stdin.write(json.dumps({"programs": programs, "expect": expect}) + "\n")
        proc.stdin.flush()

    @staticmethod
    def _answer(proc: subprocess.Popen) -> dict:
        line = proc.stdout.readline()
        if not line:
            raise RuntimeError("fork ceiling process died")
        return json.loads(line)

    def sequential(self, programs: list[str], expect: str | None = None) -> tuple[list[float], int]:
        """Run `programs` one at a time: (latency ms of each, how many ran ok)."""
        self._ask(self.procs[0], programs, expect)
        answer = self._answer(self.procs[0])
        return answer["lat_ms"], answer["ok"]

    def concurrent(self, programs: list[str], expect: str | None = None) -> tuple[list[float], float, int]:
        """Run `programs` split over every process at once: (latencies ms, jobs/s, how many ran ok)."""
        shares = [programs[i :: len(self.procs)] for i in range(len(self.procs))]
        start = time.perf_counter()
        for proc, share in zip(self.procs, shares, strict=True):
            self._ask(proc, share, expect)
        answers = [self._answer(proc) for proc in self.procs]
        rate = len(programs) / (time.perf_counter() - start)
        return [ms for a in answers for ms in a["lat_ms"]], rate, sum(a["ok"] for a in answers)

    def close(self) -> None:
        for proc in self.procs:
            if proc.stdin and not proc.stdin.closed:
                proc.stdin.close()
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
