"""`evaluate` of every environment with the real local model: the offline baseline table.

    python benchmarks/real_model_eval.py                 # writes out/real_model_eval.{md,json}
    python benchmarks/real_model_eval.py --update-results   # rewrites benchmarks/results/real_model_eval.{md,json}
    python benchmarks/real_model_eval.py --envs math,qa --out out/eval.md

One vLLM (CPU, float32) serves SmolLM2-135M-Instruct (prepared by `rlvr model fetch`); each env's
`evaluate` runs on its eval split with the demo's measured preset (prompt, task; the judge env uses
the same model as its judge, since nothing better is available offline) at `eval_temperature` 0
(greedy). Per env: items, accuracy (score 1.0), mean score, unverified rate, mean turns, completion
tokens/s (completion tokens over the env's wall time) and seconds.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
RESULTS = ROOT / "benchmarks" / "results" / "real_model_eval.md"
# eval items per env: the whole split where it is small, a cap where a row costs minutes
LIMITS = {"math": 200, "math-python": 200, "math-python-no-tool": 200, "code": 40, "code-repair": 20,
          "qa": None, "judge": None}  # fmt: skip
# rows that are another env's evaluate with other flags: row -> (env, flags)
ARMS = {
    "math-python": ("math-python", ("--env.eval_without_tools", "false")),
    "math-python-no-tool": ("math-python", ("--env.tools", "false")),
}


def evaluate_command(row: str, model: str, base_url: str, out: Path, limit: int | None) -> list[str]:
    from environments.atropos_runtime.demo import ENVS, LOCAL_FLAGS, REAL

    env, arm = ARMS.get(row, (row, ()))
    preset = REAL[env]
    judge = ["--env.judge_base_url", base_url, "--env.judge_model", model] if env == "judge" else []
    return [
        sys.executable, str(ROOT / "environments" / ENVS[env]), "evaluate",
        "--env.tokenizer_name", model, "--openai.model_name", model, "--openai.base_url", base_url,
        "--env.max_tokens", str(preset.max_tokens), "--env.data_dir_to_save_evals", str(out),
        *(["--env.eval_limit", str(limit)] if limit else []), *judge, *preset.flags,
        *LOCAL_FLAGS.get(env, ()), *arm,
    ]  # fmt: skip


def completion_tokens(sample: dict) -> int:
    """Tokens the model sampled for one eval sample (every turn of an episode)."""
    if sample.get("completion_tokens") is not None:
        return int(sample["completion_tokens"])
    return sum(len(turn.get("tokens") or []) for turn in (sample.get("episode") or {}).get("turns", []))


def summarize(env: str, out: Path, seconds: float) -> dict:
    """One table row from what `evaluate` wrote (metrics.json + samples.jsonl). Code repair's evaluate
    runs four arms (real / none / random feedback, resampling): its row is the `real` arm (the env's
    own episodes), its tokens/s counts every arm's tokens."""
    metrics = json.loads((out / "metrics.json").read_text())["results"]["all"]
    samples = [json.loads(line) for line in (out / "samples.jsonl").read_text().splitlines() if line.strip()]
    tokens = sum(completion_tokens(s) for s in samples)
    if "mode" in (samples[0] if samples else {}):  # code repair: the real-feedback arm
        arm = [s for s in samples if s["mode"] == "real"]
        scored = [s["score"] for s in arm if s["score"] is not None]
        accuracy, turns = metrics.get("eval/real/solve@3"), metrics.get("eval/real/turns")
        n, unverified = len(arm), len(arm) - len(scored)
        mean = sum(scored) / len(scored) if scored else None
    else:
        n = int(metrics.get("eval/n_samples") or len(samples))
        unverified = int(metrics.get("eval/n_unverified", 0))
        accuracy, mean = metrics.get("eval/accuracy"), metrics.get("eval/mean_score")
        turns = sum(len((s.get("episode") or {}).get("turns") or [0]) for s in samples) / max(1, len(samples))
    return {
        "env": env,
        "items": n,
        "accuracy": accuracy,
        "mean_score": mean,
        "unverified_rate": unverified / n if n else None,
        "mean_turns": turns,
        "completion_tokens_per_s": tokens / seconds if seconds else None,
        "seconds": seconds,
        "metrics": metrics,
    }


def fmt(value: object, spec: str = ".3f") -> str:
    return "n/a" if value is None else format(value, spec)


NOTES = {
    "math": "one-digit sums with a one-shot format example in the system prompt (the demo's task); the "
    "default reasoning-gym tasks (multi-digit arithmetic, gcd, primes) are beyond this model",
    "math-python": "the same sums with the python tool (ChatML with hermes tool calls, `--env.chat_template "
    "chatml-tools`) and three worked tool-call examples in the prompt; reward from the final boxed answer only",
    "math-python-no-tool": "math-python's evaluate without the tool (`--env.tools false`): math's task with "
    "math's plain system prompt, no format example (the math row has one)",
    "code": "HumanEval's held-out problems; greedy answers are mostly wrong or carry no code block "
    "(no_answer); at temperature 0.7 a few easy training problems pass (the demo)",
    "code-repair": "the real-feedback arm of code repair's own evaluate (3 attempts): feedback does "
    "not turn a failure into a pass for this model; the none/random/resample arms are in the JSON",
    "qa": "it often knows the answer but says it in a sentence; exact match needs the bare answer",
    "judge": "the same model is its own judge: no verdict reaches half its probability mass on a score "
    "token (low_confidence), so every sample is unverified and kept out, never scored 0",
}


def table(rows: list[dict], model: str) -> str:
    lines = [
        f"# `evaluate` with the real local model ({model})",
        "",
        f"`python benchmarks/real_model_eval.py` ({time.strftime('%Y-%m-%d')}, 2-core CPU, vLLM CPU float32, "
        "greedy decoding). Each env runs its eval split with the demo's preset for this model. The judge env "
        "uses the same 135M model as its judge: nothing better is available offline, and its verdicts are "
        "unusable (see the unverified rate): that row shows the tri-state reward at work, not judge quality.",
        "",
        "| env | items | accuracy | mean score | unverified | mean turns | completion tok/s | seconds |",
        "|---|---|---|---|---|---|---|---|",
    ]
    notes = [f"- **{r['env']}**: {NOTES[r['env']]}" for r in rows if r["env"] in NOTES]
    for r in rows:
        if "error" in r:
            lines.append(f"| {r['env']} | failed: {r['error']} | | | | | | |")
            continue
        lines.append(
            f"| {r['env']} | {r['items']} | {fmt(r['accuracy'])} | {fmt(r['mean_score'])} | "
            f"{fmt(r['unverified_rate'], '.1%')} | {fmt(r['mean_turns'], '.2f')} | "
            f"{fmt(r['completion_tokens_per_s'], '.0f')} | {r['seconds']:.0f} |"
        )
    lines += [
        "",
        *notes,
        "",
        "Why this model and not Gemma 3 270M: [real_model_choice.md](real_model_choice.md).",
    ]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", type=Path, help=f"where to write (default out/{RESULTS.name})")
    p.add_argument("--update-results", action="store_true", help=f"rewrite the committed {RESULTS}")
    p.add_argument("--envs", default=",".join(LIMITS))
    args = p.parse_args(argv)
    args.out = args.out or (RESULTS if args.update_results else ROOT / "out" / RESULTS.name)
    os.environ.update(HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", WANDB_MODE="disabled")
    from environments.atropos_runtime.local_model import VLLMServer
    from environments.atropos_runtime.real_model import MODEL_NAME, real_model_path

    model = real_model_path()
    work = Path("out/real_model_eval")
    rows: list[dict] = []
    with VLLMServer(model, log_path=work / "vllm.log") as server:
        for env in args.envs.split(","):
            out = work / env
            cmd = evaluate_command(env, str(model), server.base_url, out, LIMITS.get(env))
            started = time.monotonic()
            with open(work / f"{env}.log", "w") as log:
                code = subprocess.call(cmd, stdout=log, stderr=subprocess.STDOUT, cwd=ROOT,
                                       env=dict(os.environ, PYTHONPATH=str(ROOT)))  # fmt: skip
            seconds = time.monotonic() - started
            try:
                row = summarize(env, out, seconds) if code == 0 else {"env": env, "error": f"exit {code}"}
            except (OSError, ValueError, KeyError) as e:
                row = {"env": env, "error": f"{type(e).__name__}: {e}"}
            rows.append(row)
            print(next(line for line in table([row], MODEL_NAME).splitlines() if line.startswith(f"| {env} |")),
                  flush=True)  # fmt: skip
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(table(rows, MODEL_NAME))
    args.out.with_suffix(".json").write_text(json.dumps(rows, indent=1, default=str) + "\n")
    print(f"wrote {args.out}")
    return 0 if all("error" not in r for r in rows) else 1


if __name__ == "__main__":
    raise SystemExit(main())
