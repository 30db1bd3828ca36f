"""The in-sandbox runner closes every pipe it opens per test (warm workers run thousands of tests
under an open-file limit of 256; a leak of two fds per stdio test ended in EMFILE, unverified)."""

from __future__ import annotations

from rubrics.code.rubric import CodeRubric
from rubrics.code.suites import StdioTest, TestSuite
from rubrics.core import Sample


async def test_hundreds_of_stdio_tests_in_one_job_do_not_run_out_of_fds(code_sandbox):
    suite = TestSuite(tuple(StdioTest(f"{i}\n", f"{i * i + 1}\n") for i in range(300)), time_limit_s=2.0)
    rubric = CodeRubric(code_sandbox)
    result = await rubric.score(Sample([], "```python\nx = int(input())\nprint(x * x + 1)\n```", suite))
    assert result.score == 1.0, result.reason
