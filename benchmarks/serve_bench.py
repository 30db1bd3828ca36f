"""`serve` throughput: rollouts/s a trainer receives from the real run-api `/batch`, rlvr-envs vs atroposlib.

Per run and per environment: a fresh `run-api` on loopback, a trainer that registers (batch 64) and
polls `/batch` every 50 ms, and the environment's `serve` command started against the same vLLM
server and tiny model. The trainer counts the rollouts (sequences) it receives.

Environments (same server, model, group size 8, 64 completion tokens, identical-score filter off on
both, since a random model rarely scores; both sample math_env's train prompts, system prompt included):
  * rlvr-envs `math_env.py serve` (reasoning-gym items, math-verify rubric in its process pool);
  * atroposlib's own loop on a plain gsm8k-style BaseEnv (benchmarks/atropos_baseline_env.py:
    ManagedServer chat per group, reward in `collect_trajectories`), atroposlib defaults otherwise.
Figures: end to end = rollouts / (command start -> last batch received), what a trainer waits for;
steady = rollouts after the first batch / (first -> last batch). Runs alternate the order, after one
uncounted one-batch run of each env (a fresh vLLM is slow on its first batches).

    python benchmarks/serve_bench.py [--url ... --model ...] [--batches 6] [--repeats 3]
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

import httpx

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.trainer_client import start_run_api  # noqa: E402

BATCH, GROUP, TOKENS = 64, 8, 64


def env_cmd(which: str, url: str, model: str, api: str, batches: int) -> list[str]:
    common = ["--env.tokenizer_name", model, "--openai.model_name", model, "--openai.base_url", url,
              "--env.rollout_server_url", api, "--env.group_size", str(GROUP),
              "--env.total_steps", str(batches + 20), "--env.ensure_scores_are_not_same", "false",
              "--env.use_wandb", "false"]  # fmt: skip
    if which == "rlvr-envs":
        return [sys.executable, str(ROOT / "environments" / "math_env.py"), "serve", *common,
                "--env.max_tokens", str(TOKENS)]  # fmt: skip
    return [sys.executable, str(ROOT / "benchmarks" / "atropos_baseline_env.py"), "serve", *common,
            "--env.max_token_length", str(TOKENS), "--openai.api_key", "x"]  # fmt: skip


def one_run(which: str, url: str, model: str, batches: int, tmp: Path) -> tuple[float, float, float]:
    """(end-to-end rollouts/s, steady rollouts/s, seconds to the first batch) for one environment."""
    api_proc, api = start_run_api(tmp / f"run-api-{which}.log")
    log = tmp / f"serve-{which}.log"
    env_proc = None
    try:
        httpx.post(api + "/register", timeout=10, json={
            "wandb_group": "", "wandb_project": "", "batch_size": BATCH, "max_token_len": 2048,
            "checkpoint_dir": str(tmp / "ckpt"), "save_checkpoint_interval": 1000, "starting_step": 0,
            "num_steps": batches + 20}).raise_for_status()  # fmt: skip
        httpx.get(api + "/batch", timeout=10)  # the trainer's first poll marks it started
        environ = dict(os.environ, PYTHONPATH=str(ROOT), WANDB_MODE="disabled", HF_HUB_OFFLINE="1")
        start = time.monotonic()
        env_proc = subprocess.Popen(env_cmd(which, url, model, api, batches), stdout=log.open("w"),
                                    stderr=subprocess.STDOUT, env=environ, cwd=ROOT)  # fmt: skip
        arrivals: list[tuple[float, int]] = []
        deadline = start + 600
        while len(arrivals) < batches:
            batch = httpx.get(api + "/batch", timeout=10).json().get("batch")
            if batch:
                arrivals.append((time.monotonic(), sum(len(g["tokens"]) for g in batch)))
                continue
            if env_proc.poll() is not None or time.monotonic() > deadline:
                raise SystemExit(f"{which} serve stopped early:\n{log.read_text()[-3000:]}")
            time.sleep(0.05)  # a trainer polls /batch
    finally:
        for proc in (env_proc, api_proc):
            if proc is not None:
                proc.terminate()
                try:
                    proc.wait(timeout=30)
                except subprocess.TimeoutExpired:
                    proc.kill()
    total = sum(n for _, n in arrivals)
    after_first = total - arrivals[0][1]
    steady = after_first / max(arrivals[-1][0] - arrivals[0][0], 1e-9)
    return total / (arrivals[-1][0] - start), steady, arrivals[0][0] - start


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--url", default=os.environ.get("RLVR_VLLM_URL"))
    p.add_argument("--model", default=os.environ.get("RLVR_TINY_MODEL"))
    p.add_argument("--batches", type=int, default=6)
    p.add_argument("--repeats", type=int, default=3)
    args = p.parse_args()
    from environments.atropos_runtime.local_model import build_tiny_model, vllm_for

    model = args.model or str(build_tiny_model(ROOT / ".cache" / "tiny-model"))
    args.url, server = vllm_for(args.url, model, ROOT / ".cache" / "bench-vllm.log")
    loads = [Path("/proc/loadavg").read_text().split()[0]]
    results: dict[str, list[tuple[float, float, float]]] = {"rlvr-envs": [], "atroposlib": []}
    try:
        with tempfile.TemporaryDirectory() as tmp:
            from atropos_baseline_env import use_task_prompts

            from environments.math_env import MathEnv

            use_task_prompts(MathEnv, Path(tmp))  # the baseline serves math_env's own prompts
            # warm-up, not counted: a fresh CPU vLLM answers its first batches far slower (the first
            # timed run, whichever env it is, took 28 s to its first batch against 4 s afterwards)
            for which in results:
                one_run(which, args.url, model, 1, Path(tmp))
            for r in range(args.repeats):
                order = ["rlvr-envs", "atroposlib"] if r % 2 == 0 else ["atroposlib", "rlvr-envs"]
                for which in order:
                    results[which].append(one_run(which, args.url, model, args.batches, Path(tmp)))
                    loads.append(Path("/proc/loadavg").read_text().split()[0])
    finally:
        if server:
            server.stop()
    n = args.batches * BATCH
    print(f"\nserve: {args.batches} batches x {BATCH} rollouts (group {GROUP}, {TOKENS} tokens), tiny model on "
          f"vLLM (CPU), {args.repeats} runs; 1-min load average during the runs: {', '.join(loads)}\n")  # fmt: skip
    print(
        f"{'environment':12} {'end-to-end rollouts/s':27} {'steady rollouts/s':27} {'first batch after (s)':27}"
    )
    print(f"{'':12} {'min / median / max':27} {'min / median / max':27} {'min / median / max':27}")
    for which, rows in results.items():
        cells = []
        for k in range(3):
            col = [r[k] for r in rows]
            cells.append(f"{min(col):7.1f} {statistics.median(col):7.1f} {max(col):7.1f}      ")
        print(f"{which:12} " + " ".join(cells))
    ours, theirs = results["rlvr-envs"], results["atroposlib"]
    e2e_ratios = [o[0] / t[0] for o, t in zip(ours, theirs, strict=True)]
    steady_ratios = [o[1] / t[1] for o, t in zip(ours, theirs, strict=True)]
    print(f"\nend to end vs atroposlib, per run: {', '.join(f'{x:.2f}x' for x in e2e_ratios)} (target >= 3x)")
    print(f"steady vs atroposlib, per run: {', '.join(f'{x:.2f}x' for x in steady_ratios)}")
    print(f"({n} rollouts per run)")


if __name__ == "__main__":
    main()
