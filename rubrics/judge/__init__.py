"""LLM-judge rubrics: a judge model grades a completion against a reference or a rubric text.

Public API:
* `JudgeRubric`, `JudgeConfig`, `Verdict` (`rubric.py`): the rubric; an unreachable judge is an
  unverified result with a reason, never a score.
* `PairwiseRubric` (`pairwise.py`): compare two completions.
* `JudgeEndpoint`, `JudgeClient`, `JudgeCallError` (`client.py`): the HTTP client to an
  OpenAI-compatible judge (retries, shared connection pools).
* prompt building (`prompt.py`: data blocks that neutralise injected instructions) and verdict parsing
  (`parse.py`: tags, scores, logprob-weighted scores).
* `canaries`, `canary_report` (`canary.py`): known-wrong answers that a sound judge must fail.
"""

from rubrics.judge.canary import canaries, canary_report
from rubrics.judge.client import JudgeCallError, JudgeClient, JudgeEndpoint
from rubrics.judge.pairwise import PairwiseRubric
from rubrics.judge.rubric import JudgeConfig, JudgeRubric, Verdict, question_of

__all__ = [
    "JudgeCallError",
    "JudgeClient",
    "JudgeConfig",
    "JudgeEndpoint",
    "JudgeRubric",
    "PairwiseRubric",
    "Verdict",
    "canaries",
    "canary_report",
    "question_of",
]
