"""`RayRubric`'s dispatch and failure mapping, without a cluster: node actors stand in as handles
that answer or raise Ray's own exception types (the cluster tests in test_ray_cluster.py cover
the same paths on real nodes)."""

from __future__ import annotations

import asyncio
import concurrent.futures
from typing import Any

import pytest

ray = pytest.importorskip("ray")
from ray.exceptions import ActorDiedError, ActorUnavailableError, ObjectStoreFullError, RayTaskError  # noqa: E402

from rubrics.core import RewardResult, Sample, Status  # noqa: E402
from rubrics.remote.node import MathNodeRubric, fingerprint, refusal  # noqa: E402
from rubrics.remote.scorer import RayRubric, RayScorerConfig, RemoteScorerError, build_scorer  # noqa: E402

SAMPLES = [Sample(prompt="", completion=str(i), answer=str(i)) for i in range(3)]


class Handle:
    """An actor handle whose `score_group.remote(samples)` answers with `reply(samples)`."""

    def __init__(self, reply: Any) -> None:
        self.reply = reply
        self.calls = 0
        self.score_group = self

    def remote(self, samples: list[Sample]) -> Any:
        self.calls += 1
        done: concurrent.futures.Future = concurrent.futures.Future()
        try:
            done.set_result(self.reply(samples))
        except Exception as exc:  # noqa: BLE001
            done.set_exception(exc)
        return type("Ref", (), {"future": lambda self: done})()


def ok(samples: list[Sample]) -> list[RewardResult]:
    return [RewardResult(score=1.0) for _ in samples]


def raises(exc: Exception):
    def reply(samples: list[Sample]) -> Any:
        raise exc

    return reply


def scorer(*handles: Handle) -> RayRubric:
    rubric = RayRubric(MathNodeRubric(), RayScorerConfig(inflight_per_slot=1))
    for i, handle in enumerate(handles):
        rubric._add_member(f"node{i}", f"127.0.0.{i + 2}", handle, slots=1)
    rubric._started = True
    return rubric


async def test_lost_node_is_retried_once_on_another():
    lost, live = Handle(raises(ActorUnavailableError("connection reset", b"a" * 16))), Handle(ok)
    rubric = scorer(lost, live)
    results = await rubric.score_group(SAMPLES)
    assert [r.score for r in results] == [1.0] * 3 and lost.calls == 1 and live.calls == 1
    assert rubric.counts["retried"] == 1 and [n["where"] for n in rubric.nodes()] == ["127.0.0.3"]


async def test_lost_twice_is_unverified_never_zero():
    first, second = Handle(raises(ActorDiedError())), Handle(raises(ActorDiedError()))
    rubric = scorer(first, second)
    results = await rubric.score_group(SAMPLES)
    assert all(r.score is None and r.status is Status.ERROR and "lost" in r.reason for r in results)
    assert first.calls + second.calls == 2  # once, then once elsewhere; never a third time
    assert (
        await rubric.score_group(SAMPLES)
        == [RewardResult.unverified(Status.ERROR, "ray scorer: no live scoring node")] * 3
    )


@pytest.mark.parametrize(
    "reply",
    [
        raises(RayTaskError("score_group", "Traceback\nValueError: boom", ValueError("boom"))),
        raises(ObjectStoreFullError("object store full")),
        lambda samples: [RewardResult(score=1.0)],  # wrong length
        lambda samples: [1.0] * len(samples),  # not RewardResults
    ],
)
async def test_other_failures_are_unverified_and_not_retried(reply):
    bad, spare = Handle(reply), Handle(ok)
    rubric = scorer(bad, spare)
    results = await rubric.score_group(SAMPLES)
    assert all(r.score is None and r.status is Status.ERROR for r in results)
    assert spare.calls == 0 and rubric.counts["errors"] == 1


async def test_groups_go_to_the_least_loaded_node_within_capacity():
    gate = asyncio.Event()
    loop = asyncio.get_running_loop()

    class Slow(Handle):
        def remote(self, samples):
            self.calls += 1
            done: concurrent.futures.Future = concurrent.futures.Future()
            loop.create_task(gate.wait()).add_done_callback(lambda _: done.set_result(ok(samples)))
            return type("Ref", (), {"future": lambda self: done})()

    a, b = Slow(ok), Slow(ok)
    rubric = scorer(a, b)  # capacity 1 group each
    tasks = [asyncio.create_task(rubric.score_group(SAMPLES)) for _ in range(3)]
    while a.calls + b.calls < 2:
        await asyncio.sleep(0)
    assert (a.calls, b.calls) == (1, 1)  # the third group waits for a free slot
    gate.set()
    assert all(r.score == 1.0 for g in await asyncio.gather(*tasks) for r in g)
    assert a.calls + b.calls == 3


def test_handshake_names_every_difference():
    mine = fingerprint()
    assert refusal(mine, dict(mine), "127.0.0.3") is None
    line = refusal(mine, {**mine, "rlvr-envs": "9.9", "harness": "other"}, "127.0.0.3")
    assert line.startswith("node 127.0.0.3 refuses to score") and "(driver: '9.9')" in line
    assert "harness" in line and "python" not in line


def test_build_scorer_switch():
    local = build_scorer(MathNodeRubric(), "local", local_slots=3)
    assert local.name == "math" and local._workers == 3
    remote = build_scorer(MathNodeRubric(), "ray", address="127.0.0.2:6379", node_slots=4)
    assert isinstance(remote, RayRubric) and remote.config.node_slots == 4
    with pytest.raises(ValueError, match="unknown scorer"):
        build_scorer(MathNodeRubric(), "dask")


def test_no_address_is_a_clear_error(monkeypatch):
    if ray.is_initialized():
        pytest.skip("this process is already connected to a cluster")
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    with pytest.raises(RemoteScorerError, match="no Ray cluster address.*ray start --head"):
        RayRubric(MathNodeRubric()).start()
    assert not ray.is_initialized()  # nothing was started locally
