"""Multi-turn episodes: the runtime's own cost per turn, and multi-turn `process` on the tiny model.

1. Runtime cost per turn, excluding inference and test execution: `EpisodeRunner` (as `process`
   builds it: real tokenizer and chat template, exact-id bookkeeping, episode scoring) plus the
   group's checks (`assemble_group`'s invariants + the decoded-runs invariant), against an in-process
   server that answers instantly with fixed ids and an environment step that returns at once.
   Target <= 2 ms per turn. Baseline in the same run: the same turns' raw list work (concatenating
   the ids; the floor any implementation pays).
2. `process` on the tiny random model served by vLLM: 3-turn episodes (`tests/integration/
   multiturn_env.py`) vs single-turn completions (`varied_env.py`), same server, same groups, same
   `max_tokens`, alternated and repeated; ratio of turns/s to completions/s (target >= 0.8).

    python benchmarks/multiturn_bench.py [--url http://127.0.0.1:9001/v1 --model /path/to/tiny-model]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from environments.atropos_runtime.episodes import EnvStep, MultiTurnTask, to_rollout  # noqa: E402
from environments.atropos_runtime.local_model import build_tiny_model, vllm_for  # noqa: E402
from environments.atropos_runtime.rollouts import assemble_group  # noqa: E402
from environments.atropos_runtime.turn_tokens import ChatTokens  # noqa: E402
from environments.task import Item  # noqa: E402
from rubrics.core import RewardResult, Rubric, Sample  # noqa: E402

GROUPS, N, TURNS, TOKENS = 16, 8, 3, 16

VARIANTS: dict[str, dict] = {  # the runtime settings compared in one run: the default first
    "max_batch_prompts=64 (default)": {},
    "max_batch_prompts=1 (a request per call)": {"max_batch_prompts": 1},
}


class InstantServer:
    """Answers every turn at once with the same 16 ids (no inference)."""

    def __init__(self, ids: list[int]) -> None:
        self.ids = ids

    async def tokens_and_logprobs_completion(self, input_ids, n, **kwargs):
        return list(input_ids), [list(self.ids)] * n, [[-0.5] * len(self.ids)] * n, ["stop"] * n


class ConstantRubric(Rubric):
    name = "constant"

    async def _score(self, sample: Sample) -> RewardResult:
        return RewardResult(score=float(len(sample.completion_text) % 2))


class RetryNow(MultiTurnTask):
    max_turns = TURNS

    def rows(self, split):
        return []

    def item(self, row, index):
        raise NotImplementedError

    def rubric(self):
        return ConstantRubric()

    async def env_step(self, ctx):
        return EnvStep([{"role": "user", "content": f"Not quite (attempt {ctx.turn}). Answer again."}])


async def runtime_cost(model: Path) -> tuple[float, float]:
    """(ms per turn of the runtime, ms per turn of the raw list floor)"""
    from transformers import AutoTokenizer

    from environments.atropos_runtime.episodes import EpisodeRunner, episode_violations

    tok = AutoTokenizer.from_pretrained(model)
    chat = ChatTokens(tok)
    ids = list(tok.encode("the answer is 42 " * 4, add_special_tokens=False))[: TOKENS - 1] + [2]
    runner = EpisodeRunner(RetryNow(None), InstantServer(ids), chat, ConstantRubric(), token_budget=4096)
    prompt = [
        {"role": "system", "content": "Answer."},
        {"role": "user", "content": "What is six times seven?"},
    ]
    item = Item("q", prompt, "42")
    sampling = {"temperature": 1.0, "max_tokens": TOKENS}
    await runner.run_group(item, N, sampling)  # warm-up (template compilation)
    start = time.perf_counter()
    turns = 0
    for _ in range(GROUPS):
        episodes = await runner.run_group(item, N, sampling)
        rollouts = [to_rollout(ep, chat) for ep in episodes]
        results = [ep.result for ep in episodes]
        outcome = assemble_group(prompt, rollouts, results, sampling, group_size=N, training=True,
                                 ensure_scores_differ=False, max_token_len=4096)  # fmt: skip
        assert outcome.group is not None and not any(episode_violations(chat, r) for r in rollouts)
        turns += sum(len(ep.turns) for ep in episodes)
    runtime_ms = (time.perf_counter() - start) * 1000 / turns
    start = time.perf_counter()
    for _ in range(GROUPS * N):
        seq: list[int] = list(ids)
        for _ in range(TURNS):
            seq = seq + ids + ids
    floor_ms = (time.perf_counter() - start) * 1000 / (GROUPS * N * TURNS)
    return runtime_ms, floor_ms


async def process_rate(env_cls, url: str, model: str, out: Path, **extra) -> tuple[float, int, float]:
    """(seconds of run_process's loop, assistant turns sampled, prompts per /completions request) for
    one env on the server."""
    from atroposlib.envs.server_handling.server_baseline import APIServerConfig

    from environments.atropos_runtime.modes import run_process

    config = env_cls.env_config_cls(tokenizer_name=model, wandb_name="bench", use_wandb=False, group_size=N,
                                    total_steps=GROUPS, max_tokens=TOKENS, ensure_scores_are_not_same=False,
                                    data_path_to_save_groups=str(out), **extra)  # fmt: skip
    server = APIServerConfig(server_type="vllm", model_name=model, base_url=url, api_key="x", tokenizer_name=model,
                             timeout=300)  # fmt: skip
    env = env_cls(config, [server])
    summary = await run_process(env)
    if summary["groups_new"] != GROUPS:
        raise SystemExit(f"{env_cls.name}: {summary}")
    runner = getattr(env, "_episode_runner", None)
    batcher = env.server.servers[0].batcher
    turns = runner.turns_taken if runner else GROUPS * N
    return summary["seconds"], turns, batcher.prompts / max(1, batcher.requests)


async def raw_client(url: str, model: str) -> tuple[float, float]:
    """Completions/s of a raw client on the same server: 16 requests with n=8 of a 40-token prompt
    (single-turn's shape) vs 128 requests with n=1 of 80-token contexts (later turns' shape)."""
    import httpx

    async with httpx.AsyncClient(timeout=300, limits=httpx.Limits(max_connections=256)) as client:

        async def post(prompt: list[int], n: int) -> None:
            body = {"model": model, "prompt": prompt, "n": n, "max_tokens": TOKENS, "logprobs": 0,
                    "return_token_ids": True}  # fmt: skip
            (await client.post(url + "/completions", json=body)).raise_for_status()

        start = time.perf_counter()
        await asyncio.gather(*(post(list(range(5, 45)), 8) for _ in range(GROUPS)))
        batched = GROUPS * N / (time.perf_counter() - start)
        start = time.perf_counter()
        await asyncio.gather(*(post(list(range(5, 84)) + [i], 1) for i in range(GROUPS * N)))
        return batched, GROUPS * N / (time.perf_counter() - start)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--url", default=None)
    parser.add_argument("--model", default=str(ROOT / ".cache" / "tiny-model"))
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    settings = VARIANTS
    model = build_tiny_model(args.model)
    runtime_ms, floor_ms = asyncio.run(runtime_cost(model))
    print(f"load average before: {Path('/proc/loadavg').read_text().split()[:3]}")
    print(f"\n1. runtime cost per turn ({GROUPS} groups x {N} episodes x {TURNS} turns, instant server/env)")
    print(f"   rlvr-envs episode runtime   {runtime_ms:7.3f} ms/turn  (target <= 2 ms)")
    print(f"   raw id-list floor           {floor_ms:7.4f} ms/turn  ({runtime_ms / floor_ms:.0f}x the floor)")
    url, server = vllm_for(args.url, model, Path(tempfile.gettempdir()) / "multiturn_bench_vllm.log")
    try:
        from tests.integration.multiturn_env import RetryEnv
        from tests.integration.varied_env import VariedEnv

        rates: dict[str, tuple[list[float], list[tuple[float, float]]]] = {v: ([], []) for v in settings}
        sizes: dict[str, list[float]] = {v: [] for v in settings}  # multi-turn prompts per request
        raw = []
        with tempfile.TemporaryDirectory() as tmp:
            asyncio.run(process_rate(VariedEnv, url, str(model), Path(tmp, "warm.jsonl")))  # warm the server
            for r in range(args.repeats):
                for v, (label, extra) in enumerate(settings.items()):  # alternated in one run
                    single, multi = rates[label]
                    secs, n, _ = asyncio.run(process_rate(VariedEnv, url, str(model), Path(tmp, f"s{r}{v}.jsonl"),
                                                          **extra))  # fmt: skip
                    single.append(n / secs)
                    secs, n, size = asyncio.run(process_rate(RetryEnv, url, str(model), Path(tmp, f"m{r}{v}.jsonl"),
                                                             **extra))  # fmt: skip
                    multi.append((n / secs, n / TURNS / secs))
                    sizes[label].append(size)
                raw.append(asyncio.run(raw_client(url, str(model))))
    finally:
        if server is not None:
            server.stop()
    print(
        f"\n2. process on the tiny model ({GROUPS} groups x {N}, {TOKENS} tokens per turn, median of {args.repeats})"
    )
    for label, (single, multi) in rates.items():
        completions = statistics.median(single)
        turns = statistics.median(t for t, _ in multi)
        episodes = statistics.median(e for _, e in multi)
        print(f"   {label}")
        print(
            f"     single-turn completions/s {completions:7.1f}   range {min(single):.1f}-{max(single):.1f}"
        )
        print(
            f"     multi-turn turns/s        {turns:7.1f}   episodes/s {episodes:6.1f}  ({TURNS} turns each)"
        )
        ratios = " ".join(f"{t / c:.2f}" for (t, _), c in zip(multi, single, strict=True))
        print(
            f"     turns/s vs completions/s  {turns / completions:7.2f}   (target >= 0.8; per repeat {ratios})"
        )
        print(f"     multi-turn prompts/request {statistics.median(sizes[label]):6.2f}")
    *batched, one = rates.values()
    base_single, base_turns = statistics.median(one[0]), statistics.median(t for t, _ in one[1])
    for label, (single, multi) in zip(rates, batched, strict=False):
        print(
            f"   {label.split(' (')[0]} vs a request per call: completions/s"
            f" x{statistics.median(single) / base_single:.2f}, turns/s x{statistics.median(t for t, _ in multi) / base_turns:.2f}"
        )
    batched, single_prompt = statistics.median(b for b, _ in raw), statistics.median(s for _, s in raw)
    print(f"   raw client, n=8 requests    {batched:7.1f} completions/s (the server, no runtime)")
    print(
        f"   raw client, n=1 requests    {single_prompt:7.1f} completions/s  ratio {single_prompt / batched:.2f}"
        " (later turns' shape, one request each)"
    )
    print(f"load average after: {Path('/proc/loadavg').read_text().split()[:3]}")


if __name__ == "__main__":
    main()
