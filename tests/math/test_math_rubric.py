"""MathRubric end to end: tri-state results, format component, the event loop stays free."""

from __future__ import annotations

import asyncio

from rubrics.core import Sample, Status
from rubrics.math import MathPolicy, MathRubric


def sample(completion: str, answer) -> Sample:
    return Sample(prompt=[{"role": "user", "content": "q"}], completion=completion, answer=answer)


async def test_statuses():
    async with MathRubric(workers=1) as rubric:
        right = await rubric.score(sample(r"so \boxed{\frac{1}{2}}", "0.5"))
        wrong = await rubric.score(sample(r"\boxed{3}", "4"))
        none = await rubric.score(sample("<think>\\boxed{4}", "4"))
        hedge = await rubric.score(sample(r"\boxed{3} or \boxed{4}", "4"))
        no_gold = await rubric.score(sample(r"\boxed{3}", None))
    assert (right.score, right.status) == (1.0, Status.OK)
    assert (wrong.score, wrong.status, wrong.reason) == (0.0, Status.OK, "mismatch")
    assert (none.score, none.status) == (0.0, Status.NO_ANSWER)
    assert hedge.score == 0.0
    assert no_gold.score is None and no_gold.status is Status.ERROR


async def test_timeout_is_unverified_never_zero():
    hard = r"\boxed{\frac{\sqrt{\sqrt{11}+\sqrt{194}}}{2\sqrt{33}+15}}"
    async with MathRubric(MathPolicy(cas_timeout_s=0.0), workers=1) as rubric:
        res = await rubric.score(sample(hard, r"\frac{\sqrt{\sqrt{11}+\sqrt{194}}}{15+2\sqrt{33}}"))
    assert res.score is None and res.status is Status.TIMEOUT


async def test_format_component_and_multiple_golds():
    async with MathRubric(workers=1, format_weight=0.1) as rubric:
        boxed = await rubric.score(sample(r"\boxed{12}", ["11", "12"]))
        anchored = await rubric.score(sample("The answer is 12.", "12"))
    assert boxed.score == 1.1 and boxed.components == {"correct": 1.0, "format": 1.0}
    assert anchored.score == 1.0 and anchored.components["format"] == 0.0


async def test_event_loop_keeps_running_during_checks():
    ticks = 0

    async def ticker(stop: asyncio.Event):
        nonlocal ticks
        while not stop.is_set():
            ticks += 1
            await asyncio.sleep(0)

    async with MathRubric(workers=1) as rubric:
        stop = asyncio.Event()
        task = asyncio.create_task(ticker(stop))
        results = await rubric.score_group([sample(r"\boxed{(x+1)^3}", "x^3+3x^2+3x+1")] * 4)
        stop.set()
        await task
    assert [r.score for r in results] == [1.0] * 4
    assert ticks > 0


async def test_the_extracted_answer_is_kept_for_the_viewer():
    async with MathRubric(workers=1) as rubric:
        wrong = await rubric.score(sample(r"so the total is \boxed{3}", "4"))
        right = await rubric.score(sample(r"\boxed{\frac{1}{2}}", "0.5"))
        missing = await rubric.score(sample("no answer at all", "4"))
    assert wrong.seen == {"answer": "3", "rule": "boxed"} and wrong.to_dict()["seen"] == wrong.seen
    assert right.seen["answer"] == r"\frac{1}{2}" and right.seen["rule"] == "boxed"
    assert missing.seen == {} and "seen" not in missing.to_dict()
