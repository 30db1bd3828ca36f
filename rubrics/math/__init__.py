"""Math answer verification: the public API of the family.

* `verify(response, gold, policy=DEFAULT_POLICY, pool=None) -> Verdict` grades a whole completion
  (or a bare answer) against a gold: `Verdict.correct`, `.reason` (one of `REASONS`), `.answer`;
  `.verified` is False for `timeout`/`error` (could not check: never a silent zero).
  `check_answer(response, gold) -> bool` is the same check, verdict only. `COUNTERS` counts reasons.
* `MathPolicy` (`DEFAULT_POLICY`): the grading options where projects disagree, documented there.
* `MathRubric`: verdicts as tri-state `RewardResult`s for the environments and the reward server.
* `CasPool` / `default_pool()`: the isolated CAS worker processes (CPU-time budgets per check).

Everything else in the package is internal. Its modules are layered (no import cycle: see
tests/layout/test_import_graph.py), bottom up: policy, numerals, spans, regions → numeric, normalize →
structure, units, reader → intervals → compare, extract, choice → cas, worker (CAS side, in the
worker processes) → pool → verifier → rubric.
"""

from rubrics.math.policy import DEFAULT_POLICY, MathPolicy
from rubrics.math.pool import CasPool, default_pool
from rubrics.math.rubric import MathRubric
from rubrics.math.verifier import COUNTERS, REASONS, Verdict, check_answer, verify

__all__ = [
    "COUNTERS",
    "DEFAULT_POLICY",
    "REASONS",
    "CasPool",
    "MathPolicy",
    "MathRubric",
    "Verdict",
    "check_answer",
    "default_pool",
    "verify",
]
