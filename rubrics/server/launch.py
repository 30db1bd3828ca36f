"""`rlvr-reward-server`: the command's entry point. It checks that the `server` extra is installed
before importing the server (FastAPI, uvicorn, prometheus-client), so a plain wheel install gets one
line saying what to install instead of a traceback."""

from __future__ import annotations

import importlib.util
import sys

NEEDED = {"fastapi": "fastapi", "uvicorn": "uvicorn", "prometheus_client": "prometheus-client"}


def missing_packages() -> list[str]:
    return [dist for module, dist in NEEDED.items() if importlib.util.find_spec(module) is None]


def main(argv: list[str] | None = None) -> int:
    missing = missing_packages()
    if missing:
        print(
            f"rlvr-reward-server needs the server extra ({', '.join(missing)} missing in {sys.executable}): "
            "pip install 'rlvr-envs[server]'",
            file=sys.stderr,
        )
        return 2
    from rubrics.server.cli import main as serve

    serve(argv)
    return 0
