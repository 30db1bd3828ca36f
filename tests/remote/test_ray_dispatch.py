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


def ref(value: Any = None, error: Exception | None = None) -> Any:
    done: concurrent.futures.Future = concurrent.futures.Future()
    done.set_exception(error) if error else done.set_result(value)
    return type("Ref", (), {"future": lambda self: done})()


class Handle:
    """An actor handle whose `score_group.remote(samples)` answers with `reply(samples)` and whose
    `probe.remote()` answers `probe` (None: passed; else the failure line)."""

    def __init__(self, reply: Any, probe: str | None = None) -> None:
        self.reply = reply
        self.calls = 0
        self.probes = 0
        self.score_group = self
        self.probe = type("Probe", (), {"remote": self._probe})()
        self.probe_answer = probe

    def remote(self, samples: list[Sample]) -> Any:
        self.calls += 1
        try:
            return ref(self.reply(samples))
        except Exception as exc:  # noqa: BLE001
            return ref(error=exc)

    def _probe(self) -> Any:
        self.probes += 1
        return ref(self.probe_answer)


def ok(samples: list[Sample]) -> list[RewardResult]:
    return [RewardResult(score=1.0) for _ in samples]


def no_sandbox(samples: list[Sample]) -> list[RewardResult]:  # what a node without bubblewrap returns
    return [
        RewardResult.unverified(Status.ERROR, "sandbox failed: SandboxUnavailable: bubblewrap not found")
    ] * len(samples)


def raises(exc: Exception):
    def reply(samples: list[Sample]) -> Any:
        raise exc

    return reply


def scorer(*handles: Handle, **options: Any) -> RayRubric:
    rubric = RayRubric(MathNodeRubric(), RayScorerConfig(inflight_per_slot=1, **options))
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


async def wait_for(condition, what: str) -> None:
    """Poll observable state (the re-probe runs on its own thread), bounded."""
    for _ in range(2000):
        if condition():
            return
        await asyncio.sleep(0.005)
    raise AssertionError(f"never: {what}")


async def test_a_node_that_cannot_score_is_drained_and_its_groups_verified_elsewhere(caplog):
    broken = Handle(no_sandbox, probe="node 127.0.0.2 failed its probe job: error: sandbox failed")
    live = Handle(ok)
    rubric = scorer(broken, live, drain_after=2)
    first = await rubric.score_group(SAMPLES)  # least loaded: the broken node first, then retried
    second = await rubric.score_group(SAMPLES)
    assert all(r.score == 1.0 for r in first + second)
    assert broken.calls >= 1 and live.calls == 2
    await wait_for(lambda: rubric.counts["nodes_drained"] == 1, "the broken node drained")
    assert broken.probes == 1 and [n["where"] for n in rubric.nodes()] == ["127.0.0.3"]
    described = rubric.describe()
    assert "sandbox failed" in described["excluded"]["127.0.0.2"]
    assert "drained" in described["excluded"]["127.0.0.2"] and described["counts"]["rescued_groups"] >= 1
    drained = [m for m in caplog.messages if "drained" in m]
    assert len(drained) == 1 and "127.0.0.2" in drained[0] and "probed again" in drained[0]
    calls = broken.calls
    assert all(r.score == 1.0 for r in await rubric.score_group(SAMPLES))
    assert broken.calls == calls  # a drained node gets no more groups


async def test_unverified_groups_that_are_the_datas_keep_the_node():
    bad_suite = Handle(lambda s: [RewardResult.unverified(Status.ERROR, "bad test suite: no tests")] * len(s))
    rubric = scorer(bad_suite, drain_after=2)
    for _ in range(2):  # the only node: nowhere to retry, returned as they are
        results = await rubric.score_group(SAMPLES)
        assert all(r.score is None and "bad test suite" in r.reason for r in results)
    await wait_for(lambda: bad_suite.probes == 1 and not rubric.describe()["suspect"], "re-probed and kept")
    assert [n["where"] for n in rubric.nodes()] == ["127.0.0.2"] and rubric.counts["nodes_drained"] == 0


async def test_a_suspect_node_gets_no_new_groups_until_its_probe_answers():
    gate = concurrent.futures.Future()

    class Waits(Handle):
        def _probe(self):
            self.probes += 1
            return type("Ref", (), {"future": lambda self: gate})()

    broken, live = Waits(no_sandbox), Handle(ok)
    rubric = scorer(broken, live, drain_after=1)
    assert all(r.score == 1.0 for r in await rubric.score_group(SAMPLES))  # broken, then retried
    await wait_for(lambda: broken.probes == 1, "re-probe sent")
    calls = broken.calls
    for _ in range(3):
        assert all(r.score == 1.0 for r in await rubric.score_group(SAMPLES))
    assert broken.calls == calls and rubric.describe()["suspect"] == ["127.0.0.2"]
    gate.set_result("node 127.0.0.2 failed its probe job: error: sandbox failed")
    await wait_for(lambda: rubric.counts["nodes_drained"] == 1, "drained after the probe failed")


def test_build_scorer_without_an_address_raises_at_construction(monkeypatch):
    if ray.is_initialized():
        pytest.skip("this process is already connected to a cluster")
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    with pytest.raises(RemoteScorerError, match="no Ray cluster address"):
        build_scorer(MathNodeRubric(), "ray")
    with pytest.raises(RemoteScorerError, match="not host:port"):
        build_scorer(MathNodeRubric(), "ray", address="head-node")
