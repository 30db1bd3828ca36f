"""The HTTP reward server: any rubric behind `/score`, `/score_batch` and OpenRLHF's reward API.

Public API:
* `create_app`, `ServerConfig` (`app.py`): the FastAPI app (micro-batching, a result cache,
  back-pressure as 503, `/healthz` and `/readyz`, Prometheus `/metrics` from `metrics.py`).
* `rlvr-reward-server` (`cli.py`): the command that serves the built-in rubrics.

Needs the `server` extra (FastAPI, uvicorn, prometheus-client).
"""

from rubrics.server.app import ServerConfig, create_app

__all__ = ["ServerConfig", "create_app"]
