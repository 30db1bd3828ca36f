"""Code rubrics: run a completion's program against a test suite in a sandbox.

Public API:
* `CodeRubric`, `CodeRubricConfig` (`rubric.py`): extract the program, scan it, run its suite in ONE
  sandbox job, turn the runner's record into a `RewardResult` (pass fraction or all-or-nothing).
* test suites (`suites.py`): `StdioTest`, `CallTest`, `AssertTest`, `TestSuite`, `suite_from`,
  `humaneval_suite`, `call_suite`, `asserts_to_tests`, `compare_stdout` (the host-side half of
  every verdict; the sandbox-side half is `sandbox/runner/`).
* `extract_code`, `static_hack_scan` (`rubric.py`); `pyparse` (the one lock every host-side
  `ast.parse` takes).
"""

from rubrics.code.rubric import CodeRubric, CodeRubricConfig, extract_code, static_hack_scan
from rubrics.code.suites import (
    AssertTest,
    CallTest,
    StdioTest,
    TestSuite,
    asserts_to_tests,
    call_suite,
    compare_stdout,
    humaneval_suite,
    suite_from,
)

__all__ = [
    "AssertTest",
    "CallTest",
    "CodeRubric",
    "CodeRubricConfig",
    "StdioTest",
    "TestSuite",
    "asserts_to_tests",
    "call_suite",
    "compare_stdout",
    "extract_code",
    "humaneval_suite",
    "static_hack_scan",
    "suite_from",
]
