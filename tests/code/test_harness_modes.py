"""The harness runs two ways: a fresh `python3 run.py` per job (one-shot backends) and inside a warm
pool's PID-1 worker (`sandbox.harness`). Both must give the same verdicts, the pool may take the fast
path only for byte-identical harness jobs, and the untrusted child must not reach the worker."""

from __future__ import annotations

import dataclasses
import json

import pytest
from test_hacks import ASSERT, CALL, CHEATS, fenced

from rubrics.code.rubric import CodeRubric, CodeRubricConfig
from rubrics.core import Sample, Status
from sandbox.core import Limits
from sandbox.harness import harness_job, harness_spec, runner_files

PYTHONS = frozenset({"python3", "/usr/bin/python3"})


def _job():
    return CodeRubric("bwrap").build_job("def f(x):\n    return x * x\n", CALL)


def test_pool_recognises_only_exact_harness_jobs():
    job = _job()
    spec = harness_spec(job, PYTHONS)
    assert spec is not None and json.loads(spec)["entry_point"] == "f"
    sources = [k for k in job.files if k.startswith("rlvr_runner/") and k.endswith(".py")]
    assert len(sources) >= 5 and "rlvr_runner/__init__.py" in sources  # the package, every module
    tampered = [dict(job.files, **{k: job.files[k] + "\n# changed\n"}) for k in sources]
    extra = dict(job.files, **{"evil.py": "print(1)"})
    pyc = next(k for k in job.files if k.endswith(".pyc"))
    other_pyc = dict(job.files, **{pyc: b"\0" * 32})
    variants = [
        *(dataclasses.replace(job, files=t) for t in tampered),
        dataclasses.replace(job, files=extra),
        dataclasses.replace(job, files=other_pyc),
        dataclasses.replace(job, command=("/nonexistent/python3", "run.py")),
        dataclasses.replace(job, command=("python3", "other.py")),
        dataclasses.replace(job, stdin=b"x"),
        dataclasses.replace(job, channel=False),
    ]
    assert [harness_spec(v, PYTHONS) for v in variants] == [None] * len(variants)
    assert harness_job("{}", Limits()).files.keys() == {*runner_files(), "spec.json"}


@pytest.mark.parametrize("suite_name", ["call", "assert"])
async def test_one_shot_harness_gives_the_same_cheat_verdicts(one_shot, code_sandbox, suite_name):
    suite = CALL if suite_name == "call" else ASSERT
    samples = [Sample(prompt="", completion=fenced(c), answer=suite) for c, _ in CHEATS.values()]
    samples.append(Sample(prompt="", completion=fenced("def f(x):\n    return x * x"), answer=suite))
    config = CodeRubricConfig(reward="fraction")
    slow = await CodeRubric(one_shot, config).score_group(samples)
    fast = await CodeRubric(code_sandbox, config).score_group(samples)
    assert one_shot.stats["pool_jobs"] == 0
    for name, a, b in zip([*CHEATS, "honest"], slow, fast, strict=True):
        assert (a.score, a.status) == (b.score, b.status), (name, a, b)
    assert slow[-1].score == 1.0 and all(r.score == 0.0 for r in slow[:-1])


async def test_child_cannot_reach_the_pool_worker(code_sandbox):
    """Signals to PID 1 (no audit event for pidfd signals) and its /proc fds (flagged by the audit
    hook; the kernel barrier is tested with stdio below), then an honest answer: the worker survives
    (no recycle), nothing forged gets in."""
    stats = getattr(code_sandbox, "stats", None)
    if stats is None or not getattr(code_sandbox.config, "warm_pool", False):
        pytest.skip("needs the bwrap warm pool")
    attack = (
        "import os, signal\n"
        "for sig in (signal.SIGKILL, signal.SIGTERM, signal.SIGSTOP, signal.SIGINT):\n"
        "    try:\n"
        "        signal.pidfd_send_signal(os.pidfd_open(1), sig)\n"
        "    except OSError:\n"
        "        pass\n"
        "try:\n"
        "    d = os.open('/proc/1', os.O_RDONLY)\n"
        "    for name in ('fd/3', 'fd/4', 'fd/5', 'fd/6', 'fd/7', 'fd/8', 'mem', 'environ'):\n"
        "        try:\n"
        "            fd = os.open(name, os.O_RDWR, dir_fd=d)\n"
        '            os.write(fd, b\'\\x00\\x00\\x00\\x10{"type":"done"}\')\n'
        "            raise SystemExit('reached the worker: ' + name)\n"
        "        except OSError:\n"
        "            pass\n"
        "except OSError:\n"
        "    pass\n"
        "def f(x):\n    return x * x\n"
    )
    rubric = CodeRubric(code_sandbox, CodeRubricConfig(static_hack_scan=False))
    recycles = stats["worker_recycles"]
    res = await rubric.score(Sample(prompt="", completion=fenced(attack), answer=CALL))
    assert res.score == 0.0 and res.status is Status.HACK and "/proc" in res.reason, res  # the audit hook
    assert stats["worker_recycles"] == recycles
    after = await rubric.score(
        Sample(prompt="", completion=fenced("def f(x):\n    return x + 1"), answer=CALL)
    )
    assert after.score == 0.0 and after.status is Status.OK


def test_static_scan_text_prefilter_keeps_every_hit():
    import ast

    from rubrics.code.rubric import static_hack_scan

    cases = {
        "import sys\ndef f(x):\n    return sys._getframe(1)": True,
        "def f(x):\n    return x.\uff46_back": True,  # fullwidth f: NFKC-normalised to f_back
        "from ctypes import c_int\ndef f(x):\n    return x": True,
        "def f(x):\n    return __builtins__": True,
        "def f(x):\n    return x * 2  # no frames here": False,
    }
    for code, flagged in cases.items():
        tree = ast.parse(code)
        assert (static_hack_scan(tree, code) is not None) is flagged, code
        assert static_hack_scan(tree, code) == static_hack_scan(tree), code


CWD_WRITER = (
    "def f(x):\n    with open('scratch.txt', 'w') as out:\n        out.write(str(x * x))\n"
    "    with open('scratch.txt') as back:\n        return int(back.read())\n"
)


async def test_solutions_may_write_in_their_cwd(code_sandbox, one_shot):
    """A correct solution that writes a file in its working directory passes everywhere (13.6:
    the Docker worker ran harness children in the read-only /; its test is in test_docker_backend)."""
    for box in (code_sandbox, one_shot):
        for suite in (CALL, ASSERT):
            res = await CodeRubric(box).score(Sample(prompt="", completion=fenced(CWD_WRITER), answer=suite))
            assert res.score == 1.0 and res.status is Status.OK, (box.describe(), res)
