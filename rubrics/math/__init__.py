"""Math answer verification: extraction policy, equivalence, isolated CAS, and `MathRubric`.

`check_answer(response, gold) -> bool` is the plain entry point; `verify` returns a `Verdict` with
its reason; `MathRubric` turns verdicts into tri-state `RewardResult`s.
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
