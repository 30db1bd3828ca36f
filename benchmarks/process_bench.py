"""`process` throughput on a real local vLLM: rlvr-envs vs atroposlib's own process loop vs a raw client.

Workload (as in the foundation issue): 16 groups x 8 completions x 64 tokens on the tiny random model.
Rows, all measured in this run against the same server:
  * rlvr-envs `qa_env.py process` (default concurrency), whole command and generation loop only;
  * atroposlib's `process` loop (one group at a time) on a plain BaseEnv, whole command and its
    start-up floor (0 groups);
  * a raw concurrent OpenAI client (16 chat requests with n=8 in flight at once), requests only.
All rows sample qa_env's own train prompts (system prompt included).
Targets: whole command >= 4x atroposlib's, loop >= 70% of the raw concurrent client.

    python benchmarks/process_bench.py [--url http://127.0.0.1:9001/v1 --model /path/to/tiny-model]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
GROUPS, N, TOKENS = 16, 8, 64


def run_cmd(cmd: list[str]) -> float:
    env = dict(os.environ, PYTHONPATH=str(ROOT), WANDB_MODE="disabled", HF_HUB_OFFLINE="1")
    start = time.monotonic()
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=ROOT)
    elapsed = time.monotonic() - start
    if proc.returncode != 0:
        raise SystemExit(f"{cmd[1]} failed:\n{proc.stderr[-3000:]}")
    return elapsed


def common(url: str, model: str) -> list[str]:
    return ["--env.tokenizer_name", model, "--openai.model_name", model, "--openai.base_url", url,
            "--env.group_size", str(N), "--env.total_steps", str(GROUPS)]  # fmt: skip


def ours(url: str, model: str, out: Path) -> tuple[float, float]:
    """(whole-command seconds, generation-loop seconds from the run's own summary)"""
    path = out / "ours.jsonl"
    wall = run_cmd([sys.executable, str(ROOT / "environments" / "qa_env.py"), "process", *common(url, model),
                    "--env.max_tokens", str(TOKENS), "--env.data_path_to_save_groups", str(path)])  # fmt: skip
    groups = [json.loads(line) for line in path.read_text().splitlines()]
    assert len(groups) == GROUPS and all(g["tokens_exact"] for g in groups)
    sampled = sum(
        len(t) - m.count(-100) for g in groups for t, m in zip(g["tokens"], g["masks"], strict=True)
    )
    assert 0 < sampled <= GROUPS * N * TOKENS, sampled  # the random model rarely stops early
    print(f"rlvr-envs sampled {sampled} completion tokens, stored as exact ids")
    return wall, float(json.loads(path.with_suffix(".summary.json").read_text())["seconds"])


def atropos(url: str, model: str, out: Path) -> float:
    return run_cmd([sys.executable, str(ROOT / "benchmarks" / "atropos_baseline_env.py"), "process",
                    *common(url, model), "--env.max_token_length", str(TOKENS), "--env.use_wandb", "false",
                    "--openai.api_key", "x", "--env.data_path_to_save_groups", str(out / "atropos.jsonl")])  # fmt: skip


async def raw_client(url: str, model: str, prompts: list, with_tokens: bool = False) -> float:
    """All 16 chat requests (n=8, the first 16 of `prompts`) in flight at once; `with_tokens` also asks
    for the sampled token ids and their logprobs (what a trainer needs, and what rlvr-envs requests)."""
    from openai import AsyncOpenAI

    client = AsyncOpenAI(base_url=url, api_key="x")
    extra = {"logprobs": True, "extra_body": {"return_token_ids": True}} if with_tokens else {}
    messages = prompts[:GROUPS]
    start = time.monotonic()
    results = await asyncio.gather(*(client.chat.completions.create(
        model=model, messages=m, n=N, max_tokens=TOKENS, temperature=1.0, **extra) for m in messages))  # fmt: skip
    elapsed = time.monotonic() - start
    await client.close()  # inside this event loop (else its connections close after the loop did)
    assert sum(len(r.choices) for r in results) == GROUPS * N
    return elapsed


def atropos_floor(url: str, model: str, out: Path) -> float:
    """atroposlib's start-up floor: the baseline command with no groups."""
    return run_cmd([sys.executable, str(ROOT / "benchmarks" / "atropos_baseline_env.py"), "process",
                    *common(url, model)[:-2], "--env.total_steps", "0", "--env.max_token_length", str(TOKENS),
                    "--env.use_wandb", "false", "--openai.api_key", "x",
                    "--env.data_path_to_save_groups", str(out / "atropos-floor.jsonl")])  # fmt: skip


def startup_floor(url: str, model: str, out: Path) -> float:
    """The same command with no groups: interpreter, imports, tokenizer, dataset, server check."""
    return run_cmd([sys.executable, str(ROOT / "environments" / "qa_env.py"), "process", *common(url, model)[:-2],
                    "--env.total_steps", "0", "--env.data_path_to_save_groups", str(out / "floor.jsonl")])  # fmt: skip


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--url", default=os.environ.get("RLVR_VLLM_URL"))
    p.add_argument("--model", default=os.environ.get("RLVR_TINY_MODEL"))
    args = p.parse_args()
    from environments.atropos_runtime.local_model import build_tiny_model, vllm_for

    model = args.model or str(build_tiny_model(ROOT / ".cache" / "tiny-model"))
    args.url, server = vllm_for(args.url, model, ROOT / ".cache" / "bench-vllm.log")
    try:
        with tempfile.TemporaryDirectory() as tmp:
            out = Path(tmp)
            from atropos_baseline_env import use_task_prompts

            from environments.qa_env import QAEnv

            prompts = use_task_prompts(QAEnv, out)  # the baseline and the raw client sample them too
            # warm-up, both request kinds: a fresh server's first logprobs requests were still slow after a
            # text-only warm-up (the first run's loop took 3.6 s, later runs 1.3-1.5 s)
            asyncio.run(raw_client(args.url, model, prompts))
            asyncio.run(raw_client(args.url, model, prompts, with_tokens=True))
            ours_wall, loop = ours(args.url, model, out)
            atropos_wall = atropos(args.url, model, out)
            floor = startup_floor(args.url, model, out)
            their_floor = atropos_floor(args.url, model, out)
            raw = asyncio.run(raw_client(args.url, model, prompts))
            raw_tokens = asyncio.run(raw_client(args.url, model, prompts, with_tokens=True))
    finally:
        if server:
            server.stop()
    rollouts = GROUPS * N
    atropos_loop = max(atropos_wall - their_floor, 1e-9)
    load = Path("/proc/loadavg").read_text().split()[:3]
    rows = [
        ("rlvr-envs process, whole command", ours_wall),
        ("rlvr-envs process, generation loop", loop),
        ("atroposlib process loop, whole command", atropos_wall),
        ("atroposlib process loop, minus its start-up", atropos_loop),
        ("start-up floor (same command, 0 groups)", floor),
        ("atroposlib start-up floor (0 groups)", their_floor),
        ("raw concurrent client, text only", raw),
        ("raw concurrent client, + token ids/logprobs", raw_tokens),
    ]
    print(f"\n{GROUPS} groups x {N} completions x {TOKENS} tokens, tiny random model on vLLM (CPU); "
          f"load average {' '.join(load)}\n")  # fmt: skip
    print(f"{'run':42} {'seconds':>8} {'rollouts/s':>11}")
    for name, secs in rows:
        print(f"{name:42} {secs:8.2f} {rollouts / secs:11.1f}")
    print(f"\nwhole command vs atroposlib: {atropos_wall / ours_wall:.2f}x (target >= 4x)")
    print(f"loop vs atroposlib's loop (each start-up floor subtracted): {atropos_loop / loop:.2f}x")
    print(f"start-up floor vs atroposlib's: {their_floor / floor:.2f}x")
    print(f"loop vs raw concurrent client, text only: {raw / loop:.0%} (target >= 70%)")
    print(f"loop vs raw concurrent client asking for the same token data: {raw_tokens / loop:.0%}")


if __name__ == "__main__":
    main()
