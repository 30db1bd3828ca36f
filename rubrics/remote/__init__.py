"""Scoring on a Ray cluster: rubrics run on the nodes, the driver only dispatches.

Public API:
* `build_scorer(factory, "local" | "ray", ...)`, `connect`, `RayRubric`, `RayScorerConfig`,
  `RemoteScorerError` (`scorer.py`): the driver side (least-loaded dispatch, retries on node loss,
  probe jobs before a node gets groups, draining nodes that cannot score). Joining the cluster has
  a deadline and fails in one line (`join.py`).
* `RubricHost`, `CodeNodeRubric`, `MathNodeRubric`, `fingerprint` (`node.py`): what runs on a node
  (each node builds its own rubric and sandbox pool; `sandbox/` never imports Ray).

The driver side needs the `ray` extra; it is imported on first use of one of its names, so the node side
(which the environments import for `--env.scorer ray`) works on an install without Ray.
"""

from typing import Any

from rubrics.remote.node import CodeNodeRubric, MathNodeRubric, RubricHost, fingerprint

_SCORER = ("RayRubric", "RayScorerConfig", "RemoteScorerError", "build_scorer", "connect")


def __getattr__(name: str) -> Any:
    if name in _SCORER:  # imports Ray (a clear ImportError naming the extra when it is missing)
        from rubrics.remote import scorer

        return getattr(scorer, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = [
    "CodeNodeRubric",
    "MathNodeRubric",
    "RayRubric",
    "RayScorerConfig",
    "RemoteScorerError",
    "RubricHost",
    "build_scorer",
    "connect",
    "fingerprint",
]
