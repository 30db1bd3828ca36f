"""Sending a scored group to run-api from `serve`: rlvr-envs' send vs atroposlib's, on a real run-api.

Baseline: atroposlib's `BaseEnv._send_scored_data_to_api` (JSON and gzip level 9 on the event loop,
an aiohttp session and connection per group). rlvr-envs: `RunApiClient._send_scored_data_to_api`
(the check that run-api knows the env, then JSON and gzip level 1 in a worker thread, on one
keep-alive client). Both post the same groups to one loopback `run-api` with a trainer registered,
alternating per group. Per group: wall time, this process's CPU (all threads), and the longest stall
of the event loop meanwhile (a ticker that wakes every 1 ms; a stall delays every rollout in flight).

    python benchmarks/send_bench.py [--groups 12]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from types import SimpleNamespace

import httpx

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "benchmarks")]

SHAPES = {"16 x 4096 tokens": (16, 4096), "8 x 128 tokens": (8, 128)}


def make_group(n: int, tokens: int, seed: int) -> dict:
    """A scored group in the JSON form of atroposlib's ScoredDataGroup (prompt of 256 tokens masked)."""
    import random

    rng = random.Random(seed)
    seqs = [[rng.randrange(151_000) for _ in range(tokens)] for _ in range(n)]
    prompt = min(256, tokens // 2)
    return {
        "tokens": seqs,
        "masks": [[-100] * prompt + s[prompt:] for s in seqs],
        "scores": [rng.choice((1.0, -1.0)) for _ in range(n)],
        "inference_logprobs": [
            [1.0] * prompt + [-rng.random() * 5 for _ in range(tokens - prompt)] for _ in range(n)
        ],
    }


class UpstreamSender:
    """Just what atroposlib's send reads from its env."""

    from atroposlib.envs.base import BaseEnv

    send = BaseEnv._send_scored_data_to_api
    _post_json_with_compression = BaseEnv._post_json_with_compression

    def __init__(self, api: str, env_id: int) -> None:
        self.config = SimpleNamespace(rollout_server_url=api)
        self.env_id = env_id


def ours(api: str, env_id: int):
    from environments.atropos_runtime.serve_api import RunApiClient

    env = RunApiClient()
    env.config = SimpleNamespace(rollout_server_url=api, status_every_s=30)
    env.env_id, env.drops, env._outage = env_id, Counter(), None
    return env


async def timed(send, group: dict) -> tuple[float, float, float]:
    """(wall ms, CPU ms, longest loop stall ms) of one `await send(group)`."""
    stall = 0.0
    done = asyncio.Event()

    async def ticker() -> None:
        nonlocal stall
        last = time.perf_counter()
        while not done.is_set():
            await asyncio.sleep(0.001)
            now = time.perf_counter()
            stall = max(stall, now - last - 0.001)
            last = now

    tick = asyncio.create_task(ticker())
    await asyncio.sleep(0.005)  # the ticker is running before the send starts
    cpu0, t0 = time.process_time(), time.perf_counter()
    await send(group)
    wall, cpu = time.perf_counter() - t0, time.process_time() - cpu0
    done.set()
    await tick
    return wall * 1e3, cpu * 1e3, stall * 1e3


async def bench(api: str, groups: int) -> list[tuple[str, str, list[tuple[float, float, float]]]]:
    httpx.post(api + "/register", json={"wandb_group": "", "wandb_project": "", "batch_size": 1 << 20,
               "max_token_len": 8192, "checkpoint_dir": "", "save_checkpoint_interval": -1,
               "starting_step": 0, "num_steps": 1}, timeout=10).raise_for_status()  # fmt: skip
    httpx.get(api + "/batch", timeout=10).raise_for_status()  # a trainer polls once: run-api starts
    reg = httpx.post(api + "/register-env", json={"max_token_length": 8192, "desired_name": "bench",
                     "weight": 1.0, "min_batch_allocation": None, "group_size": 16}, timeout=10).json()  # fmt: skip
    if "env_id" not in reg:
        raise SystemExit(f"run-api did not register the env: {reg}")
    upstream, rlvr = UpstreamSender(api, reg["env_id"]), ours(api, reg["env_id"])
    senders = {"atroposlib": lambda g: upstream.send(g), "rlvr-envs": rlvr._send_scored_data_to_api}
    rows = []
    for shape, (n, tokens) in SHAPES.items():
        pool = [make_group(n, tokens, seed) for seed in range(4)]
        samples: dict[str, list] = {name: [] for name in senders}
        for send in senders.values():  # one unmeasured send each: connections, imports
            await send(dict(pool[0]))
        for i in range(groups):
            order = list(senders) if i % 2 == 0 else list(senders)[::-1]
            for name in order:
                samples[name].append(await timed(senders[name], dict(pool[i % len(pool)])))
        rows += [(shape, name, samples[name]) for name in senders]
    await rlvr.close_run_api_http()
    return rows


def main() -> None:
    from serve_bench import start_run_api

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--groups", type=int, default=12, help="groups per sender and shape")
    args = p.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        proc, api = start_run_api(Path(tmp) / "run-api.log")
        try:
            rows = asyncio.run(bench(api, args.groups))
        finally:
            proc.terminate()
            proc.wait(timeout=20)
    print(f"send_bench: {args.groups} groups per sender and shape, load avg {os.getloadavg()[0]:.1f}")
    print(
        f"{'group':<18}{'sender':<12}{'wall ms p50':>12}{'CPU ms p50':>12}{'stall ms p50':>14}{'stall max':>11}"
    )
    medians: dict[tuple[str, str], tuple[float, float, float]] = {}
    for shape, name, samples in rows:
        walls, cpus, stalls = zip(*samples, strict=True)
        medians[shape, name] = (statistics.median(walls), statistics.median(cpus), statistics.median(stalls))
        print(f"{shape:<18}{name:<12}{medians[shape, name][0]:>12.1f}{medians[shape, name][1]:>12.1f}"
              f"{medians[shape, name][2]:>14.1f}{max(stalls):>11.1f}")  # fmt: skip
    for shape in SHAPES:
        base, new = medians[shape, "atroposlib"], medians[shape, "rlvr-envs"]
        print(f"{shape}: rlvr-envs / atroposlib: wall {new[0] / base[0]:.2f}x, CPU {new[1] / base[1]:.2f}x, "
              f"loop stall {new[2] / max(base[2], 1e-3):.2f}x")  # fmt: skip


if __name__ == "__main__":
    main()
