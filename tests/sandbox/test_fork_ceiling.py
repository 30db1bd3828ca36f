"""The benchmarks' fork ceiling (`benchmarks/fork_ceiling.py`): it runs each program in a child forked
from the warm worker's own image, and its verdicts count only what really ran ok."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))

from fork_ceiling import ForkCeiling  # noqa: E402

PYTHON = "/usr/bin/python3"


@pytest.fixture(scope="module")
def forks():
    if not Path(PYTHON).exists():
        pytest.skip(f"{PYTHON} not found (the sandbox's interpreter)")
    ceiling = ForkCeiling(PYTHON, ("fractions", "no_such_module_here"), procs=2)
    yield ceiling
    ceiling.close()


def test_children_run_in_the_worker_image(forks):
    image = (
        "import gc, sys\n"
        "assert 'fractions' in sys.modules and 'rlvr_runner' in sys.modules and 'rlvr_worker' in sys.modules\n"
        "print(gc.get_freeze_count() > 0, end='')\n"  # the worker's `_settle` ran before the fork
    )
    lat, ok = forks.sequential([image], expect="True")
    assert ok == 1 and len(lat) == 1 and lat[0] > 0


def test_failures_are_not_counted(forks):
    programs = [
        "print('ok')",  # ok
        "print('no')",  # wrong output
        "raise ValueError('x')",  # exception
        "import sys; sys.exit(3)",  # non-zero exit
        "print('ok'); import os; os._exit(1)",  # right output, bad status (buffered output is lost too)
    ]
    _, ok = forks.sequential(programs, expect="ok\n")
    assert ok == 1
    _, ok = forks.sequential(programs)  # exit code only
    assert ok == 2


def test_concurrent_splits_every_program_over_the_processes(forks):
    programs = [f"import os; print({i} if {i} % 3 else os.getpid())" for i in range(12)]
    lat, rate, ok = forks.concurrent(programs)
    assert len(lat) == 12 and ok == 12 and rate > 0
    _, _, ok = forks.concurrent(["raise SystemExit(1)"] * 5 + ["pass"] * 3)
    assert ok == 3
