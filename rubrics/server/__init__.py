"""The HTTP reward server: any rubric behind `/score`, `/score_batch` and OpenRLHF's reward API.

Public API:
* `create_app`, `ServerConfig` (`app.py`): the FastAPI app (micro-batching, a result cache,
  back-pressure as 503, `/healthz` and `/readyz`, Prometheus `/metrics` from `metrics.py`).
* `rlvr-reward-server` (`cli.py`): the command that serves the built-in rubrics.

Needs the `server` extra (FastAPI, uvicorn, prometheus-client).
"""

from typing import Any

__all__ = ["ServerConfig", "create_app"]


def __getattr__(name: str) -> Any:
    """Loaded on first use, so that `rlvr-reward-server` (`launch.py`) can say in one line that the
    `server` extra is missing instead of failing on this package's imports."""
    if name in __all__:
        from rubrics.server import app

        return getattr(app, name)
    raise AttributeError(f"module 'rubrics.server' has no attribute {name!r}")
