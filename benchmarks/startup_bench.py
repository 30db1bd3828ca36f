"""Start-up time of every environment script: `--help`, and the `process` floor (same command, 0 groups).

Rows, all measured in this run, each command repeated `--repeats` times (min / median / max seconds):
  * `<env>_env.py --help` as shipped (lazy import shims, environments/atropos_runtime/lazy_imports.py);
  * the same with `RLVR_EAGER_IMPORTS=1`: what importing atroposlib costs without the shims (the
    baseline: this is how every script started before);
  * atroposlib's own plain BaseEnv (benchmarks/atropos_baseline_env.py) `--help`;
  * the `process` floor of qa_env.py: shims + warm tokenizer snapshot, shims with a cold snapshot memo
    (the first run on a tokenizer directory), and eager.
Targets: `--help` <= 1.5 s for every script; process floor <= 2.5 s.

    python benchmarks/startup_bench.py [--url http://127.0.0.1:9001/v1 --model /path/to/tiny-model] [--repeats 3]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SCRIPTS = sorted(p.name for p in (ROOT / "environments").glob("*_env.py"))


def timed(cmd: list[str], **env: str) -> float:
    environ = dict(os.environ, PYTHONPATH=str(ROOT), WANDB_MODE="disabled", HF_HUB_OFFLINE="1", **env)
    start = time.monotonic()
    proc = subprocess.run(cmd, capture_output=True, text=True, env=environ, cwd=ROOT)
    elapsed = time.monotonic() - start
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(cmd[1:3])} failed:\n{proc.stderr[-3000:]}")
    return elapsed


def floor_cmd(url: str, model: str, out: Path) -> list[str]:
    return [sys.executable, str(ROOT / "environments" / "qa_env.py"), "process", "--env.tokenizer_name", model,
            "--openai.model_name", model, "--openai.base_url", url, "--env.group_size", "8",
            "--env.total_steps", "0", "--env.data_path_to_save_groups", str(out / "floor.jsonl")]  # fmt: skip


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--url", default=os.environ.get("RLVR_VLLM_URL"))
    p.add_argument("--model", default=os.environ.get("RLVR_TINY_MODEL"))
    p.add_argument("--repeats", type=int, default=3)
    args = p.parse_args()
    from environments.atropos_runtime.local_model import build_tiny_model, vllm_for

    model = args.model or str(build_tiny_model(ROOT / ".cache" / "tiny-model"))
    args.url, server = vllm_for(args.url, model, ROOT / ".cache" / "bench-vllm.log")
    load_before = Path("/proc/loadavg").read_text().split()[:3]
    rows: list[tuple[str, list[float], float | None]] = []

    def measure(name: str, cmd: list[str], target: float | None = None, **env: str) -> None:
        rows.append((name, [timed(cmd, **env) for _ in range(args.repeats)], target))

    try:
        with tempfile.TemporaryDirectory() as tmp:
            out = Path(tmp)
            for script in SCRIPTS:
                cmd = [sys.executable, str(ROOT / "environments" / script), "--help"]
                measure(f"{script} --help", cmd, 1.5)
                measure(f"{script} --help (eager imports)", cmd, RLVR_EAGER_IMPORTS="1")
            measure("atroposlib BaseEnv --help", [sys.executable, str(ROOT / "benchmarks" / "atropos_baseline_env.py"), "--help"])  # fmt: skip
            timed(floor_cmd(args.url, model, out))  # make sure the tokenizer memo is warm
            measure("process floor (qa, 0 groups)", floor_cmd(args.url, model, out), 2.5)
            cold = [
                timed(floor_cmd(args.url, model, out), RLVR_CACHE_DIR=str(out / f"memo{i}"))
                for i in range(args.repeats)
            ]
            rows.append(("process floor, first run on a tokenizer dir", cold, None))
            measure("process floor (eager imports)", floor_cmd(args.url, model, out), RLVR_EAGER_IMPORTS="1")
    finally:
        if server:
            server.stop()
    load_after = Path("/proc/loadavg").read_text().split()[:3]
    print(
        f"\nstart-up, {args.repeats} runs each; load average before {' '.join(load_before)}, after {' '.join(load_after)}\n"
    )
    print(f"{'command':52} {'min':>6} {'median':>7} {'max':>6} {'target':>7}  ok")
    for name, times, target in rows:
        ok = "" if target is None else ("yes" if max(times) <= target else "NO")
        tgt = f"{target:.1f}" if target else ""
        print(f"{name:52} {min(times):6.2f} {statistics.median(times):7.2f} {max(times):6.2f} {tgt:>7}  {ok}")
    by_name = {name: statistics.median(times) for name, times, _ in rows}
    print()
    for script in SCRIPTS:
        ratio = by_name[f"{script} --help (eager imports)"] / by_name[f"{script} --help"]
        print(f"{script} --help: {ratio:.1f}x faster than eager imports")
    print(
        f"process floor: {by_name['process floor (eager imports)'] / by_name['process floor (qa, 0 groups)']:.1f}x faster than eager imports"
    )


if __name__ == "__main__":
    main()
