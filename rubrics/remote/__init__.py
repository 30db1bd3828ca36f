"""Scoring on a Ray cluster: rubrics run on the nodes, the driver only dispatches.

Public API:
* `build_scorer(factory, "local" | "ray", ...)`, `connect`, `RayRubric`, `RayScorerConfig`,
  `RemoteScorerError` (`scorer.py`): the driver side (least-loaded dispatch, retries on node loss,
  probe jobs before a node gets groups, draining nodes that cannot score). Joining the cluster has
  a deadline and fails in one line (`join.py`).
* `RubricHost`, `CodeNodeRubric`, `MathNodeRubric`, `fingerprint` (`node.py`): what runs on a node
  (each node builds its own rubric and sandbox pool; `sandbox/` never imports Ray).

Needs the `ray` extra.
"""

from rubrics.remote.node import CodeNodeRubric, MathNodeRubric, RubricHost, fingerprint
from rubrics.remote.scorer import RayRubric, RayScorerConfig, RemoteScorerError, build_scorer, connect

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
