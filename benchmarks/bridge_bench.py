"""The Verifiers bridge vs Verifiers' own evaluation loop, and the bridge's own cost per rollout.

1. Throughput: the classic fixture env `tests/verifiers_bridge/fixtures/vf_sum.py` (single-turn,
   XML format reward + async correctness + a RubricGroup) on one scripted loopback policy
   (`tests/runtime/scripted_policy.py`, fixed latency per request), same rows (each train row x 8
   rollouts, repeated), same concurrency limit C rollouts in flight:
   - baseline: Verifiers' own loop, `vf_env.generate(inputs, AsyncOpenAI, max_concurrent=C)` (what
     `env.evaluate` / `vf-eval` call), scoring groups with the env's rubric;
   - bridge: `run_process` of `environments/verifiers_env.py` (C / 8 groups in flight, exact tokens,
     JSONL written). Target: >= 2x rollouts/s.
2. The bridge's own cost per rollout, excluding inference: the same groups through `group_for`
   against an in-process server that answers instantly with fixed ids (episode bookkeeping, Verifiers
   state + rubric with its trivial reward functions, group checks). Target <= 2 ms.

    python benchmarks/bridge_bench.py [--latency-ms 50 --concurrency 32 --repeats 8]
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("WANDB_MODE", "disabled")

from environments.atropos_runtime.local_model import build_tiny_model  # noqa: E402
from tests.runtime.scripted_policy import ScriptedPolicy  # noqa: E402
from tests.verifiers_bridge.policies import sum_policy  # noqa: E402

FIXTURE = "tests.verifiers_bridge.fixtures.vf_sum"
N = 8


def make_env(model: Path, url: str, groups: int, concurrency: int, out: Path):
    from atroposlib.envs.server_handling.server_baseline import APIServerConfig

    from environments.verifiers_env import VerifiersEnv, VerifiersEnvConfig

    config = VerifiersEnvConfig(tokenizer_name=str(model), wandb_name="bench", use_wandb=False, group_size=N,
                                total_steps=groups, ensure_scores_are_not_same=False, vf_env_name=FIXTURE,
                                max_concurrent_groups=max(1, concurrency // N), data_path_to_save_groups=str(out))  # fmt: skip
    server = APIServerConfig(server_type="vllm", model_name="scripted", base_url=url, api_key="x",
                             tokenizer_name=str(model), timeout=300, health_check=False,
                             num_max_requests_at_once=1024)  # fmt: skip
    return VerifiersEnv(config, [server])


async def verifiers_loop(vf_env, url: str, repeats: int, concurrency: int) -> tuple[float, int]:
    from openai import AsyncOpenAI

    rows = [dict(r) for r in vf_env.get_dataset()]
    inputs = [
        {k: r[k] for k in ("prompt", "answer", "task", "info", "example_id") if k in r}
        for _ in range(repeats)
        for r in rows
        for _ in range(N)
    ]
    client = AsyncOpenAI(base_url=url, api_key="x", max_retries=0)
    start = time.perf_counter()
    out = await vf_env.generate(inputs, client=client, model="scripted", sampling_args=vf_env.sampling_args,
                                max_concurrent=concurrency, use_tqdm=False)  # fmt: skip
    seconds = time.perf_counter() - start
    assert len(out["reward"]) == len(inputs)
    return seconds, len(inputs)


async def bridge_process(model: Path, url: str, repeats: int, concurrency: int) -> tuple[float, float, int]:
    """(seconds of the whole `run_process` incl. set-up and the HTML file, seconds of its group loop
    alone, rollouts); the loop is what `generate` is timed on (its env is built before the clock)."""
    from environments.atropos_runtime.modes import run_process

    with tempfile.TemporaryDirectory() as tmp:
        env = make_env(model, url, 0, concurrency, Path(tmp) / "groups.jsonl")
        env.config.total_steps = repeats * len(env.task.items("train")[0])
        start = time.perf_counter()
        summary = await run_process(env)
        seconds = time.perf_counter() - start
    assert summary["groups_new"] == env.config.total_steps, summary
    return seconds, summary["seconds"], summary["groups_new"] * N


class InstantServer:
    def __init__(self, ids: list[int]) -> None:
        self.ids = ids

    async def tokens_and_logprobs_completion(self, input_ids, n, **kwargs):
        return list(input_ids), [list(self.ids)] * n, [[-0.5] * len(self.ids)] * n, ["stop"] * n


async def bridge_cost(model: Path, groups: int) -> float:
    """ms per rollout of the bridge with inference removed."""
    from environments.atropos_runtime.episode_runtime import runner_for

    env = make_env(model, "http://127.0.0.1:9/v1", groups, N, Path(tempfile.mkdtemp()) / "g.jsonl")
    env.train_items = env.task.items("train")[0]
    env.rubric = env.task.rubric()
    ids = list(env.tokenizer.encode("<answer>5</answer>", add_special_tokens=False)) + [2]
    runner_for(env).server = InstantServer(ids)
    await env.group_for(env.train_items[0], training=True)  # warm-up
    start = time.perf_counter()
    for k in range(groups):
        outcome = await env.group_for(env.train_items[k % len(env.train_items)], training=True)
        assert outcome.group is not None, outcome.detail
    return (time.perf_counter() - start) * 1000 / (groups * N)


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--latency-ms", type=float, default=50.0)
    parser.add_argument("--concurrency", type=int, default=32)
    parser.add_argument("--repeats", type=int, default=8)
    parser.add_argument("--pairs", type=int, default=4, help="timed (generate, bridge) pairs, alternated")
    args = parser.parse_args()
    logging.disable(logging.WARNING)
    model = build_tiny_model(os.environ.get("RLVR_TINY_MODEL") or ROOT / ".cache" / "tiny-model")
    from transformers import AutoTokenizer

    from environments.verifiers_env import load_vf_env

    tok = AutoTokenizer.from_pretrained(model)
    lat = args.latency_ms / 1000
    vf_env = load_vf_env(FIXTURE, "{}")
    rows = []
    with ScriptedPolicy(tok, sum_policy, latency_s=(lat, lat)) as policy:
        await verifiers_loop(vf_env, policy.base_url, 1, args.concurrency)  # warm both loops up: the first
        await bridge_process(model, policy.base_url, 1, args.concurrency)  # runs pay one-off costs (untimed)
        for rep in range(args.pairs):  # alternate
            vs, vn = await verifiers_loop(vf_env, policy.base_url, args.repeats, args.concurrency)
            bs, bloop, bn = await bridge_process(model, policy.base_url, args.repeats, args.concurrency)
            rows.append((rep, vn / vs, bn / bs, bn / bloop))
    cost = await bridge_cost(model, 48)
    print(f"load average: {open('/proc/loadavg').read().strip()}")
    print(f"scripted latency {args.latency_ms:.0f} ms/request, concurrency {args.concurrency} rollouts, "
          f"{args.repeats} x 6 rows x {N} rollouts")  # fmt: skip
    print(
        "| run | Verifiers generate (rollouts/s) | bridge loop (rollouts/s) | ratio | bridge whole run | ratio |"
    )
    print("|---|---|---|---|---|---|")
    for rep, v, b, loop in rows:
        print(f"| {rep} | {v:.1f} | {loop:.1f} | {loop / v:.2f}x | {b:.1f} | {b / v:.2f}x |")
    print(f"bridge cost per rollout without inference: {cost:.3f} ms (target <= 2 ms)")


if __name__ == "__main__":
    asyncio.run(main())
