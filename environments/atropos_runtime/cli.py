"""`rlvr`: the package's command line.

    rlvr demo [--env code|math|judge|qa] [...]   the main job (see environments/atropos_runtime/demo.py)
    rlvr view PATH [--serve] [--no-open]          the rollout viewer for an output folder or JSONL
    rlvr sandbox check                            which sandbox backends work here, and why not
    rlvr sandbox sweep                            remove Docker sandbox containers left by dead runs

Environments themselves run as scripts with atroposlib's CLI: `python environments/<name>_env.py
serve|process|evaluate --env.* --openai.*`.
"""

from __future__ import annotations

import sys


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    command, rest = (argv[0], argv[1:]) if argv else ("", [])
    if command == "demo":
        from environments.atropos_runtime.demo import main as demo

        return demo(rest)
    if command == "view":
        from environments.atropos_runtime.viewer import main as view

        return view(rest)
    if command == "sandbox":
        from sandbox.__main__ import main as sandbox

        return sandbox(rest)
    print(__doc__, file=sys.stderr)
    return 0 if command in ("-h", "--help") else 2


if __name__ == "__main__":
    raise SystemExit(main())
