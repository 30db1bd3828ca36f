"""The main job on embedded defaults: one environment in `process` mode, end to end, fully offline.

    python -m environments.atropos_runtime.demo                      # tiny random model on a local vLLM, code env
    python -m environments.atropos_runtime.demo --env qa --groups 16
    python -m environments.atropos_runtime.demo --base-url http://127.0.0.1:8000/v1 --model Qwen/Qwen2.5-1.5B-Instruct

Without `--base-url` it builds a tiny random chat model offline (`.cache/tiny-model`), starts a
stock vLLM OpenAI server on loopback, runs `<env>_env.py process` against it (dataset → prompts →
completions with exact token ids → rewards → JSONL + HTML viewer + printed summary), and stops the
server. With `--base-url` it points the same command at a real model/endpoint instead.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from pathlib import Path

from environments.atropos_runtime.local_model import VLLMServer, build_tiny_model

ROOT = Path(__file__).resolve().parents[1]
ENVS = {
    "math": ROOT / "environments" / "math_env.py",
    "code": ROOT / "environments" / "code_env.py",
    "judge": ROOT / "environments" / "judge_env.py",
    "qa": ROOT / "environments" / "qa_env.py",
}


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    available = [name for name, path in ENVS.items() if path.exists()]
    p.add_argument("--env", choices=available, default="code" if "code" in available else "qa")
    p.add_argument("--groups", type=int, default=8, help="groups to generate (total_steps)")
    p.add_argument("--group-size", type=int, default=4)
    p.add_argument("--max-tokens", type=int, default=64)
    p.add_argument("--out", default="out/demo", help="output folder")
    p.add_argument("--base-url", help="use this OpenAI-compatible endpoint instead of the local vLLM")
    p.add_argument("--model", help="model name at --base-url (and its tokenizer, a hub name or a path)")
    p.add_argument("--server-type", default=None, help="vllm (token ids) or openai (text only)")
    p.add_argument("extra", nargs="*", help="more --env.* / --openai.* flags, after `--`")
    return p.parse_args(argv)


def process_command(args: argparse.Namespace, base_url: str, model: str, server_type: str) -> list[str]:
    out = Path(args.out) / args.env
    return [
        sys.executable, str(ENVS[args.env]), "process",
        "--env.tokenizer_name", model, "--openai.model_name", model, "--openai.base_url", base_url,
        "--openai.server_type", server_type, "--env.total_steps", str(args.groups),
        "--env.group_size", str(args.group_size), "--env.max_tokens", str(args.max_tokens),
        "--env.data_path_to_save_groups", str(out / "groups.jsonl"), *args.extra,
    ]  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    os.environ.setdefault("WANDB_MODE", "disabled")
    if args.base_url:
        if not args.model:
            raise SystemExit("--base-url needs --model (the served model name, also used as tokenizer)")
        return subprocess.call(process_command(args, args.base_url, args.model, args.server_type or "vllm"))
    os.environ.update(HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1")
    model = build_tiny_model(ROOT / ".cache" / "tiny-model")
    print(f"tiny random model at {model}; starting a local vLLM server (about a minute on 2 cores)...")
    with VLLMServer(model, log_path=Path(args.out) / "vllm.log") as server:
        print(f"vLLM ready at {server.base_url}")
        code = subprocess.call(process_command(args, server.base_url, str(model), args.server_type or "vllm"))
    print(
        f"outputs under {Path(args.out) / args.env} (rlvr view {Path(args.out) / args.env}, or open groups.html)"
    )
    return code


if __name__ == "__main__":
    raise SystemExit(main())
