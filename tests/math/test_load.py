"""A check's verdict does not depend on the machine's load (issue 26 item 9).

A CAS check is bounded by its own CPU time on the worker, not by wall time and not by the time it
waited for a free worker; so a burst of groups, sent at once to a machine saturated by other
processes, gets the verdicts it gets on a quiet machine, while a job that really computes past its
budget still times out.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys

import pytest

from rubrics.core import Sample
from rubrics.math import CasPool, MathRubric

BUSY = "import time\nend = time.monotonic() + 300\nwhile time.monotonic() < end: pass"


def _burst() -> list[list[Sample]]:
    """8 groups of 13 polynomial identities (as one training step sends them), true and false."""
    groups = []
    for k in range(1, 9):
        group = []
        for j in range(13):
            a, b = k + j, j - k
            gold = f"x^2 + {a + b}x + {a * b}"
            pred = f"(x+{a})(x+{b})" if j % 3 else f"(x+{a})(x+{b + 1})"  # every third is wrong
            group.append(Sample(prompt="", completion=f"So the product is $\\boxed{{{pred}}}$.", answer=gold))
        groups.append(group)
    return groups


async def _score(rubric: MathRubric, groups: list[list[Sample]]) -> list[tuple]:
    scored = await asyncio.gather(*(rubric.score_group(g) for g in groups))
    return [(r.score, r.status, r.reason) for group in scored for r in group]


@pytest.mark.slow
async def test_a_saturated_machine_gives_the_verdicts_of_a_quiet_one():
    groups = _burst()
    pool = CasPool(workers=2)
    rubric = MathRubric(pool=pool)
    busy: list[subprocess.Popen] = []
    try:
        quiet = await _score(rubric, groups)
        assert {reason.split(":")[0] for _, _, reason in quiet} == {"match_cas", "mismatch"}
        busy = [subprocess.Popen([sys.executable, "-c", BUSY]) for _ in range(2 * (os.cpu_count() or 2))]
        loaded = await _score(rubric, groups)
        runaway = await pool.arun(("probe", "spin", 60), timeout=0.5)  # a job that really computes
        assert loaded == quiet
        assert runaway.status == "timeout" and runaway.cpu_s >= 0.4
        assert pool.stats["queue_timeouts"] == 0 and pool.stats["timeouts"] == 1
    finally:
        for proc in busy:
            proc.kill()
            proc.wait()
        pool.close()
