"""Math answer verification: extraction policy, equivalence, isolated CAS, and `MathRubric`.

`check_answer(response, gold) -> bool` is the plain entry point; `verify` returns a `Verdict` with
its reason; `MathRubric` turns verdicts into tri-state `RewardResult`s.

Modules, in the order a check runs through them:
  extract.py    which text is the answer (think blocks, boxes, tags, anchors); choice.py MCQ letters
  normalize.py  string canonicalisation (unicode, LaTeX spacing, units, separators)
  structure.py  answer structure (sets, tuples, intervals, matrices, equations); compare.py compares two
  intervals.py  subsets of the line as merged intervals; units.py units and magnitude words
  numerals.py   localised digits and separators, repeating decimals, mixed numbers
  regions.py    reasoning blocks, quoted/code regions, negated candidates; spans.py math spans, braces
  numeric.py    exact rationals and the gold-precision tolerance rule
  pool.py       pre-started CAS worker processes with parent-enforced deadlines
  worker.py, cas.py, reader.py  the CAS side: whole-input LaTeX reader, guards, sympy equality
  verifier.py   `verify` / `check_answer` (cheapest first), rubric.py `MathRubric`, policy.py options
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
