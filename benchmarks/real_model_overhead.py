"""The environment's own overhead on real inference: `process` against a plain client, same server.

    python benchmarks/real_model_overhead.py       # writes out/real_model_overhead.md
    python benchmarks/real_model_overhead.py --update-results   # rewrites benchmarks/results/real_model_overhead.md
    python benchmarks/real_model_overhead.py --rounds 2 --envs math --out out/overhead.md

One vLLM (CPU, float32) serves SmolLM2-135M-Instruct. Per env, alternated for `--rounds` rounds:
* `<env>_env.py process` with the demo's preset (its generation loop's seconds, from its summary:
  start-up excluded, scoring, sandbox runs and bookkeeping included);
* a plain OpenAI client replaying what that run sent: every episode's prompts, turn by turn (turn k+1
  after turn k, with the env's own next prompt), the same sampling (n, max_tokens, temperature,
  logprobs and token ids), as many groups in flight as the env had (`max_concurrent_groups`).
Sampled lengths differ run to run, so the ratio is reported on rollouts/s and on completion
tokens/s (the fairer one: both sides' own sampled tokens over their own seconds).
Goals: >= 0.95x the plain client's rate single-turn (math), >= 0.9x for 3-turn repair.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
RESULTS = ROOT / "benchmarks" / "results" / "real_model_overhead.md"
GROUPS = {"math": 32, "code-repair": 8}
GROUP_SIZE = 4
NOTE = (
    "What the env does that the plain client does not: it scores every completion (math: the rubric's "
    "workers; code repair: each attempt's public tests in the sandbox, and the private tests at the end) "
    "and, in code repair, a turn's next request waits for that attempt's test run; all of it shares the "
    "2 cores with vLLM. The plain client replays the recorded feedback without running anything. Round "
    "to round spread is large on 2 cores (32 episodes of 1-3 turns per run): read the median."
)


def process_run(env: str, model: str, base_url: str, out: Path) -> dict:
    """Run `process` once; its groups and its loop's seconds."""
    from environments.atropos_runtime.demo import ENVS, REAL

    preset = REAL[env]
    cmd = [sys.executable, str(ROOT / "environments" / ENVS[env]), "process",
           "--env.tokenizer_name", model, "--openai.model_name", model, "--openai.base_url", base_url,
           "--env.total_steps", str(GROUPS[env]), "--env.group_size", str(GROUP_SIZE),
           "--env.max_tokens", str(preset.max_tokens), "--env.data_path_to_save_groups", str(out / "groups.jsonl"),
           "--env.seed", str(len(list(out.parent.glob("*")))), *preset.flags]  # fmt: skip
    done = subprocess.run(
        cmd, capture_output=True, text=True, cwd=ROOT, env=dict(os.environ, PYTHONPATH=str(ROOT))
    )
    if done.returncode != 0:
        raise SystemExit(f"{env} process failed:\n{done.stderr[-3000:]}")
    summary = json.loads((out / "groups.summary.json").read_text())
    groups = [json.loads(line) for line in (out / "groups.jsonl").read_text().splitlines() if line.strip()]
    tokens = sum(len(t) - m.count(-100) for g in groups for t, m in zip(g["tokens"], g["masks"], strict=True))
    return {"seconds": float(summary["seconds"]), "groups": groups, "rollouts": sum(len(g["tokens"]) for g in groups),
            "tokens": tokens, "settings": summary["settings"]}  # fmt: skip


def turn_prompts(messages: list[dict]) -> list[list[dict]]:
    """The prompt of each assistant turn of one episode (everything before it)."""
    return [messages[:i] for i, m in enumerate(messages) if m["role"] == "assistant"]


async def plain_client(base_url: str, model: str, groups: list[dict], settings: dict, in_flight: int) -> dict:
    """Replay the env's episodes with a plain client: per group, turn k's n requests (one per
    episode, each with that episode's own prompt) after turn k-1's; `in_flight` groups at once."""
    from openai import AsyncOpenAI

    client = AsyncOpenAI(base_url=base_url, api_key="x", max_retries=0, timeout=600)
    gate = asyncio.Semaphore(in_flight)
    counted = {"tokens": 0, "rollouts": 0}

    async def episode(messages: list[dict]) -> None:
        for prompt in turn_prompts(messages):
            reply = await client.chat.completions.create(
                model=model, messages=prompt, n=1, max_tokens=settings["max_tokens"],
                temperature=settings["temperature"], top_p=settings["top_p"], logprobs=True,
                extra_body={"return_token_ids": True},
            )  # fmt: skip
            counted["tokens"] += reply.usage.completion_tokens

    async def group(g: dict) -> None:
        async with gate:
            await asyncio.gather(*(episode(m) for m in g["messages"]))
            counted["rollouts"] += len(g["messages"])

    started = time.monotonic()
    await asyncio.gather(*(group(g) for g in groups))
    seconds = time.monotonic() - started
    await client.close()
    return {"seconds": seconds, **counted}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", type=Path, help=f"where to write (default out/{RESULTS.name})")
    p.add_argument("--update-results", action="store_true", help=f"rewrite the committed {RESULTS}")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--envs", default="math,code-repair")
    args = p.parse_args(argv)
    args.out = args.out or (RESULTS if args.update_results else ROOT / "out" / RESULTS.name)
    os.environ.update(HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", WANDB_MODE="disabled")
    from environments.atropos_runtime.base import RubricEnvConfig
    from environments.atropos_runtime.local_model import VLLMServer
    from environments.atropos_runtime.real_model import MODEL_NAME, real_model_path

    model = str(real_model_path())
    in_flight = RubricEnvConfig().max_concurrent_groups
    work = Path("out/real_model_overhead")
    results: dict[str, list[tuple[dict, dict]]] = {}
    with VLLMServer(model, log_path=work / "vllm.log") as server:
        warm = process_run("math", model, server.base_url, work / "warm-up")  # first requests compile kernels
        asyncio.run(plain_client(server.base_url, model, warm["groups"][:4], warm["settings"], in_flight))
        for env in args.envs.split(","):
            for k in range(args.rounds):
                ours = process_run(env, model, server.base_url, work / env / f"round{k}")
                plain = asyncio.run(
                    plain_client(server.base_url, model, ours["groups"], ours["settings"], in_flight)
                )
                results.setdefault(env, []).append((ours, plain))
                print(f"{env} round {k}: env {ours['rollouts'] / ours['seconds']:.2f} rollouts/s "
                      f"{ours['tokens'] / ours['seconds']:.0f} tok/s; plain {plain['rollouts'] / plain['seconds']:.2f} "
                      f"rollouts/s {plain['tokens'] / plain['seconds']:.0f} tok/s", flush=True)  # fmt: skip
    load = " ".join(Path("/proc/loadavg").read_text().split()[:3])
    lines = [
        f"# The environment's overhead on real inference ({MODEL_NAME})",
        "",
        f"`python benchmarks/real_model_overhead.py --rounds {args.rounds}` ({time.strftime('%Y-%m-%d')}, "
        f"2-core CPU, vLLM CPU float32, load average at the end {load}). Env: `process` with the demo's preset "
        f"({GROUP_SIZE} samples per group; math {GROUPS['math']} groups, code-repair {GROUPS['code-repair']}), its "
        "generation loop's seconds (start-up excluded; scoring and sandbox included). Plain client: the same "
        "episodes' prompts replayed turn by turn with the same sampling and as many groups in flight, alternated "
        "with the env in each round. Ratio = env rate / plain rate (median over rounds).",
        "",
        "| env | round | env rollouts/s | plain rollouts/s | env tok/s | plain tok/s | ratio rollouts/s | ratio tok/s |",
        "|---|---|---|---|---|---|---|---|",
    ]  # fmt: skip
    summary = []
    for env, pairs in results.items():
        by_rollouts, by_tokens = [], []
        for k, (ours, plain) in enumerate(pairs):
            er, pr = ours["rollouts"] / ours["seconds"], plain["rollouts"] / plain["seconds"]
            et, pt = ours["tokens"] / ours["seconds"], plain["tokens"] / plain["seconds"]
            by_rollouts.append(er / pr)
            by_tokens.append(et / pt)
            lines.append(
                f"| {env} | {k} | {er:.2f} | {pr:.2f} | {et:.0f} | {pt:.0f} | {er / pr:.2f} | {et / pt:.2f} |"
            )
        goal = 0.95 if env == "math" else 0.9
        summary.append(f"- **{env}**: median ratio {statistics.median(by_rollouts):.2f}x on rollouts/s, "
                       f"{statistics.median(by_tokens):.2f}x on tokens/s (goal >= {goal}x)")  # fmt: skip
    lines += ["", *summary, "", NOTE]
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text("\n".join(lines) + "\n")
    print("\n".join(summary))
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
