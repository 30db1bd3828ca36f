"""CodeRubric end to end on the default sandbox: every test format, verdict class and reward mode."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from rubrics.code.rubric import CodeRubric, CodeRubricConfig
from rubrics.code.suites import StdioTest, TestSuite, asserts_to_tests, call_suite
from rubrics.core import Sample, Status

DATA = Path(__file__).with_name("data")
STDIO = [
    json.loads(line) for line in (DATA / "stdio_problems.jsonl").read_text().splitlines() if line.strip()
]


def fenced(code: str) -> str:
    return f"Here is my solution.\n```python\n{code}\n```\n"


def stdio_suite(problem: dict, time_limit_s: float = 2.0) -> TestSuite:
    tests = tuple(StdioTest(t["input"], t["output"]) for t in problem["tests"])
    return TestSuite(tests, time_limit_s=time_limit_s, memory_mb=256)


async def score_all(rubric: CodeRubric, completions: list[str], suite) -> list:
    return await rubric.score_group([Sample(prompt="", completion=c, answer=suite) for c in completions])


async def test_stdio_reference_solutions_pass(code_sandbox):
    rubric = CodeRubric(code_sandbox)
    results = await rubric.score_group(
        [
            Sample(prompt=p["statement"], completion=fenced(p["solution"]), answer=stdio_suite(p))
            for p in STDIO
        ]
    )
    for problem, res in zip(STDIO, results, strict=True):
        assert res.status is Status.OK and res.score == 1.0, (problem["name"], res)
        assert res.feedback == f"All {len(problem['tests'])} tests passed."


async def test_stdio_failure_classes(code_sandbox):
    problem = STDIO[0]  # a + b
    rubric = CodeRubric(code_sandbox, CodeRubricConfig(reward="fraction"))
    cases = {
        "print(3)": (1 / 3, "wrong_answer"),
        "a, b = map(int, input().split())\nprint(a + b)\nprint(0)": (0.0, "wrong_answer"),  # extra line
        "a, b = map(int, input().split())\nprint(a + b + 1)": (0.0, "wrong_answer"),  # off by one
        "raise ValueError('boom')": (0.0, "runtime_error"),
        "import sys\nsys.exit(3)": (0.0, "runtime_error"),
        "while True:\n    pass": (0.0, "timeout"),
        "x = bytearray(1 << 34)": (0.0, "memory"),
        "while True:\n    print('y' * 1000)": (0.0, "output_limit"),
        "import os\nos.abort()": (0.0, "runtime_error"),
    }
    suite = stdio_suite(problem, time_limit_s=1.0)
    results = await score_all(rubric, [fenced(c) for c in cases], suite)
    for (code, (score, verdict)), res in zip(cases.items(), results, strict=True):
        assert res.status is Status.OK, (code, res)
        assert res.score == pytest.approx(score), (code, res)
        assert f"{verdict}=" in res.reason, (code, res.reason)


async def test_feedback_names_first_failing_test(code_sandbox):
    problem = STDIO[2]  # primes
    rubric = CodeRubric(code_sandbox)
    wrong = "n = int(input())\nfor p in range(2, n + 1):\n    print(p)"
    res1, res2 = await score_all(rubric, [fenced(wrong), fenced(wrong + "  ")], stdio_suite(problem))
    assert res1.score == 0.0 and res1.feedback == res2.feedback  # deterministic
    fb = res1.feedback
    assert fb.startswith("Test 1 of 3 failed: wrong answer.")
    assert "Input:\n10\n" in fb and "Expected output:\n2\n3\n5\n7\n" in fb and "Your output:\n2\n3\n4\n" in fb
    crash = (await score_all(rubric, [fenced("x = 1\ny = [][x]")], stdio_suite(problem)))[0]
    assert "IndexError: list index out of range (line 2 of your code)" in crash.feedback


async def test_no_answer_invalid_and_reward_modes(code_sandbox):
    suite = stdio_suite(STDIO[0])
    binary = CodeRubric(code_sandbox)
    none, syntax = await score_all(binary, ["I think the answer is 3.", fenced("def f(:\n  pass")], suite)
    assert none.status is Status.NO_ANSWER and none.score == 0.0
    assert syntax.status is Status.INVALID and syntax.score == 0.0 and "SyntaxError" in syntax.feedback
    partial = "a, b = map(int, input().split())\nprint(a + b if a > 0 else 99)"
    fraction = CodeRubric(code_sandbox, CodeRubricConfig(reward="fraction", stop_on_error=False))
    (b,), (f,) = (
        await score_all(binary, [fenced(partial)], suite),
        await score_all(fraction, [fenced(partial)], suite),
    )
    assert b.score == 0.0 and f.score == pytest.approx(2 / 3)
    assert f.components["passed"] == 2 and f.components["total"] == 3


async def test_identical_completions_run_once(counting):
    rubric = CodeRubric(counting)
    good = fenced(STDIO[0]["solution"])
    results = await score_all(rubric, [good, good, fenced("print(3)"), good], stdio_suite(STDIO[0]))
    assert [r.score for r in results] == [1.0, 1.0, 0.0, 1.0]
    assert counting.jobs == 2


async def test_mbpp_asserts_and_json_call_tests(code_sandbox):
    rubric = CodeRubric(code_sandbox, CodeRubricConfig(reward="fraction"))
    mbpp = TestSuite(
        tuple(
            asserts_to_tests(
                "assert similar_elements((3, 4, 5, 6), (5, 7, 4, 10)) == (4, 5)\n"
                "assert set(similar_elements((1, 2, 3, 4), (5, 4, 3, 7))) == set((3, 4))\n"
                "assert math.isclose(sum(similar_elements((1.5,), (1.5,))), 1.5)\n"
            )
        ),
        setup="import math",
        entry_point="similar_elements",
    )
    good = "def similar_elements(a, b):\n    return tuple(sorted(set(a) & set(b)))"
    listy = "def similar_elements(a, b):\n    return sorted(set(a) & set(b))"  # list != tuple, as in Python
    r_good, r_list = await score_all(rubric, [fenced(good), fenced(listy)], mbpp)
    assert r_good.score == 1.0 and r_list.score == pytest.approx(2 / 3)

    apps = call_suite("two_sum", inputs=[[[2, 7, 11, 15], 9], [[3, 2, 4], 6]], outputs=[[0, 1], [[1, 2]]])
    sol = (
        "def two_sum(nums, target):\n    seen = {}\n    for i, x in enumerate(nums):\n"
        "        if target - x in seen:\n            return (seen[target - x], i)\n        seen[x] = i"
    )
    leet = call_suite("twoSum", inputs=[[[2, 7, 11, 15], 9]], outputs=[[0, 1]], method_of="Solution")
    cls = "class Solution:\n    def twoSum(self, nums, target):\n        return [0, 1]"
    (r_apps,), (r_leet,) = (
        await score_all(rubric, [fenced(sol)], apps),
        await score_all(rubric, [fenced(cls)], leet),
    )
    assert r_apps.score == 1.0 and r_leet.score == 1.0
    wrong = (await score_all(rubric, [fenced("def two_sum(nums, target):\n    return [1, 0]")], apps))[0]
    assert wrong.score == 0.0 and "Expected: [0, 1]" in wrong.feedback and "Got: [1, 0]" in wrong.feedback


async def test_call_test_failure_classes(code_sandbox):
    suite = TestSuite(
        tuple(asserts_to_tests("assert f(2) == 4\nassert f(3) == 9")),
        entry_point="f",
        time_limit_s=1.0,
        memory_mb=256,
    )
    rubric = CodeRubric(code_sandbox, CodeRubricConfig(reward="fraction", stop_on_error=False))
    cases = {
        "def f(x):\n    return x * x": (1.0, "passed=2"),
        "def f(x):\n    return x * x if x == 2 else 0": (0.5, "wrong_answer=1"),
        "def f(x):\n    raise KeyError(x)": (0.0, "runtime_error=2"),
        "def f(x):\n    while True:\n        pass": (0.0, "timeout=2"),
        "def f(x):\n    return bytearray(1 << 34)": (0.0, "memory=2"),
        "import numbers\nclass V:\n    pass\ndef f(x):\n    return V()": (0.0, "invalid_value=2"),
        "raise RuntimeError('at import')": (0.0, "runtime_error=2"),
        "def g(x):\n    return x": (0.0, "runtime_error=2"),  # missing entry point: NameError
    }
    results = await score_all(rubric, [fenced(c) for c in cases], suite)
    for (code, (score, fragment)), res in zip(cases.items(), results, strict=True):
        assert res.status is Status.OK and res.score == pytest.approx(score), (code, res)
        assert fragment in res.reason, (code, res.reason)


async def test_time_limit_is_cpu_time_with_a_wall_safety_net(code_sandbox):
    """Sleeping past the time limit is fine (wall limit is 3x + 0.5 s); burning CPU past it is not."""
    suite = TestSuite(tuple(asserts_to_tests("assert f(1) == 1")), entry_point="f", time_limit_s=1.0)
    sleeper = "import time\ndef f(x):\n    time.sleep(1.3)\n    return x"
    burner = "import time\ndef f(x):\n    end = time.process_time() + 1.3\n    while time.process_time() < end:\n" \
             "        pass\n    return x"  # fmt: skip
    stdio = TestSuite((StdioTest("", "1\n"),), time_limit_s=1.0)
    rubric = CodeRubric(code_sandbox)
    results = await rubric.score_group([
        Sample(prompt="", completion=fenced(sleeper), answer=suite),
        Sample(prompt="", completion=fenced(burner), answer=suite),
        Sample(prompt="", completion=fenced(sleeper.replace("def f(x):", "def g(x):") + "\nprint(g(1))"), answer=stdio),
        Sample(prompt="", completion=fenced(burner.replace("def f(x):", "def g(x):") + "\nprint(g(1))"), answer=stdio),
    ])  # fmt: skip
    assert [r.score for r in results] == [1.0, 0.0, 1.0, 0.0], results
    assert "timeout=1" in results[1].reason and "timeout=1" in results[3].reason


async def test_named_sandbox_is_created_lazily_and_closed():
    rubric = CodeRubric("bwrap")
    suite = stdio_suite(STDIO[0])
    try:
        res = await rubric.score(Sample(prompt="", completion=fenced(STDIO[0]["solution"]), answer=suite))
    finally:
        await rubric.aclose()
    if res.status is Status.ERROR:  # no bubblewrap on this host: an unverified result, never a number
        assert res.score is None and "sandbox" in res.reason
    else:
        assert res.score == 1.0


def _frames(*records: dict) -> bytes:
    import struct

    out = b""
    for r in records:
        body = json.dumps(r).encode()
        out += struct.pack(">I", len(body)) + body
    return out


def test_infrastructure_failures_are_unverified():
    """Whatever goes wrong outside the solution's tests yields score=None, never a number."""
    from sandbox.core import ExecResult, LimitHit

    rubric = CodeRubric(sandbox=None)  # judge() only: no job is run here
    suite = stdio_suite(STDIO[0])
    hello = {"type": "hello", "version": 1, "tests": 3}
    ok = {"type": "result", "index": 0, "outcome": "ok", "stdout": "3\n"}
    cases = {
        "no channel": (ExecResult(exit_code=2, signal=None, stdout=b"", stderr=b"boom"), Status.ERROR),
        "garbage": (ExecResult(exit_code=0, signal=None, stdout=b"", stderr=b"", channel=b"\x00\x00\x00\x09{"), Status.ERROR),
        "killed at the job wall limit": (
            ExecResult(exit_code=None, signal=9, stdout=b"", stderr=b"", limit_hit=LimitHit.WALL_TIME,
                       channel=_frames(hello, ok)),
            Status.TIMEOUT,
        ),
        "harness died mid-way": (ExecResult(exit_code=None, signal=9, stdout=b"", stderr=b"", channel=_frames(hello, ok)),
                                 Status.ERROR),
        "truncated channel": (
            ExecResult(exit_code=0, signal=None, stdout=b"", stderr=b"", channel=_frames(hello), channel_truncated=True),
            Status.ERROR,
        ),
        "harness internal error": (
            ExecResult(exit_code=0, signal=None, stdout=b"", stderr=b"",
                       channel=_frames(hello, {"type": "result", "index": 0, "outcome": "internal", "error": "x"},
                                       {"type": "done", "count": 1})),
            Status.ERROR,
        ),
        "records out of order": (
            ExecResult(exit_code=0, signal=None, stdout=b"", stderr=b"",
                       channel=_frames(hello, {**ok, "index": 1}, {"type": "done", "count": 1})),
            Status.ERROR,
        ),
    }  # fmt: skip
    for name, (result, status) in cases.items():
        res = rubric.judge(result, suite)
        assert res.score is None and res.status is status, (name, res)


def test_a_wedged_sandbox_is_an_error_after_the_deadline_not_a_hang():
    """A backend that never answers (here a real pool whose only worker is held) costs the sample
    its job's wall budget plus `sandbox_wait_s`, reported as unverified; the job is withdrawn and
    the pool serves the next one once it is free again."""
    import shutil

    from sandbox.bwrap import BwrapConfig, BwrapSandbox

    if shutil.which("bwrap") is None:
        pytest.skip("bubblewrap not installed")
    box = BwrapSandbox(BwrapConfig(slots=1, warm_pool=True))
    config = CodeRubricConfig(job_overhead_s=0.2, sandbox_wait_s=0.3)
    rubric = CodeRubric(box, config)
    suite = TestSuite((StdioTest("2\n", "4\n"),), time_limit_s=0.1)
    sample = Sample(prompt="", completion=fenced("print(int(input()) * 2)"), answer=suite)

    async def main():
        await box.warm_up()
        worker = box._workers[0]
        worker.lock.acquire()  # as if a job held it for good: every new job waits for a slot
        try:
            wedged = await asyncio.wait_for(rubric.score(sample), 30)  # fails, not hangs, without it
        finally:
            worker.lock.release()
        assert wedged.score is None and wedged.status is Status.ERROR, wedged
        assert "sandbox gave no result" in wedged.reason and "sandbox_wait_s 0.3 s" in wedged.reason
        healthy = await rubric.score(sample)
        assert healthy.score == 1.0 and healthy.status is Status.OK, healthy

    try:
        asyncio.run(main())
    finally:
        box.close_sync()


async def test_a_backends_own_timeout_error_keeps_its_reason():
    class TimingOut:  # a backend whose client gives up at once (a Docker API read timeout, say)
        name = "timing-out"

        async def run(self, job):
            raise TimeoutError("docker API read timed out")

        async def close(self) -> None:
            pass

    rubric = CodeRubric(TimingOut(), CodeRubricConfig(sandbox_wait_s=300))
    suite = TestSuite((StdioTest("2\n", "4\n"),), time_limit_s=0.1)
    res = await rubric.score(Sample(prompt="", completion=fenced("print(4)"), answer=suite))
    assert res.score is None and res.status is Status.ERROR
    assert res.reason == "sandbox failed: TimeoutError: docker API read timed out", res.reason


async def test_broken_sandbox_interpreter_is_an_error_not_a_zero(code_sandbox):
    rubric = CodeRubric(code_sandbox, CodeRubricConfig(python="/nonexistent/python3"))
    res = await rubric.score(
        Sample(prompt="", completion=fenced(STDIO[0]["solution"]), answer=stdio_suite(STDIO[0]))
    )
    assert res.score is None and res.status is Status.ERROR


def test_jobs_in_flight_follow_the_sandbox_slots():
    """By default a rubric keeps twice its sandbox's slots in flight (at least 8): a fixed count left
    most of a many-CPU machine's pool idle. An explicit max_concurrency wins."""
    import os
    from types import SimpleNamespace

    class Pool:  # only its slot count is read; nothing runs
        def __init__(self, slots: int) -> None:
            self.config = SimpleNamespace(slots=slots)

    assert CodeRubric(Pool(40))._limit.capacity == 80  # type: ignore[arg-type]
    assert CodeRubric(Pool(2))._limit.capacity == 8  # type: ignore[arg-type]
    assert CodeRubric("bwrap", CodeRubricConfig(sandbox_slots=20))._limit.capacity == 40
    by_name = CodeRubric("bwrap")._limit.capacity
    assert by_name == max(8, 2 * (len(os.sched_getaffinity(0)) + 1))
    assert CodeRubric(Pool(40), CodeRubricConfig(max_concurrency=3))._limit.capacity == 3  # type: ignore[arg-type]
    with pytest.raises(ValueError):
        CodeRubricConfig(max_concurrency=0)


async def test_per_test_records_name_the_first_failure_in_every_format(code_sandbox):
    """Wrong answers are judged on the host, so every test runs and `tests` says what each did; the
    first failing index is read from there (a count of passes would say 1 here, not 0)."""
    stdio = TestSuite(tuple(StdioTest(f"{x}\n", f"{x * x}\n") for x in (-3, 0, 4)), time_limit_s=2.0)
    call = TestSuite(
        tuple(asserts_to_tests("assert f(-3) == 9\nassert f(0) == 0\nassert f(4) == 16")),
        entry_point="f",
        time_limit_s=2.0,
    )
    body = "    return 0 if x == 0 else x + 1"  # right for 0 only
    programs = {"stdio": "x = int(input())\nprint(0 if x == 0 else x + 1)", "call": f"def f(x):\n{body}"}
    for config in (CodeRubricConfig(), CodeRubricConfig(reward="fraction")):
        rubric = CodeRubric(code_sandbox, config)
        for name, suite in (("stdio", stdio), ("call", call)):
            res = (await score_all(rubric, [fenced(programs[name])], suite))[0]
            assert [(t.index, t.kind, t.outcome) for t in res.tests] == [
                (0, name, "failed"),
                (1, name, "passed"),
                (2, name, "failed"),
            ], res
            assert res.first_failure == 0 and res.test_passed(1) is True and res.test_passed(2) is False
            assert res.feedback.startswith("Test 1 of 3 failed: wrong answer.")
            assert res.to_dict()["tests"][1] == {
                "index": 1,
                "kind": name,
                "outcome": "passed",
                "detail": "passed",
            }
    # errors stop a binary run (stop_on_error): the rest is not run, and says so
    crash = "def f(x):\n    return 1 // x"  # ZeroDivisionError at x = 0 only
    res = (await score_all(CodeRubric(code_sandbox), [fenced(crash)], call))[0]
    assert [t.outcome for t in res.tests] == ["failed", "error", "not_run"], res
    assert (
        res.first_failure == 0 and res.test_passed(2) is None and "ZeroDivisionError" in res.tests[1].detail
    )
    res = (
        await score_all(CodeRubric(code_sandbox, CodeRubricConfig(reward="fraction")), [fenced(crash)], call)
    )[0]
    assert [t.outcome for t in res.tests] == ["failed", "error", "failed"], res
    with pytest.raises(ValueError, match="stop_on_error"):
        CodeRubricConfig(stop_on_failure=True)
