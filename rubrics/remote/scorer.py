"""Score on a Ray cluster: `RayRubric` sends whole groups to one `RubricHost` actor per node.

    rubric = await connect(MathNodeRubric(), RayScorerConfig(address="10.0.0.1:6379"))
    results = await rubric.score_group(samples)      # any Rubric caller: environments, adapters, server
    await rubric.aclose()

Contract (on top of `Rubric`'s):
* Each node builds its own rubric with `factory(slots)` (see `rubrics.remote.node`; the factory must
  pickle and its code must be importable there); the driver only ships `Sample`s and gets
  `RewardResult`s back, one Ray call per group. Node actors run at `niceness` (Ray's default is 15).
* Joining: within `connect_timeout_s` (default 20 s) or `RemoteScorerError` naming the address and
  what answered there (see `rubrics.remote.join`). A misconfigured scorer raises, never scores:
  `build_scorer(..., "ray")` without an address raises at construction; a cluster that cannot be
  joined, or where no node can score, raises from `start()` / `connect()` and from the first
  `score`/`score_group` (the same error again on every later call: such a scorer stays failed).
* Admission: a node gets groups only after its actor started and passed its probe job (a known
  sample scored as a working node scores it; see `rubrics.remote.node`). Nodes that fail the
  version handshake are refused for good; nodes that fail the probe are excluded and probed again
  after `reprobe_s`. Both are logged (one line each) and listed by `describe()`.
* Dispatch: least-loaded actor, at most `inflight_per_slot × slots` groups in flight on each.
* Node health: a group whose every sample comes back unverified with `error` (what a node with no
  bubblewrap, a broken Docker or a dead CAS worker returns, fast) is retried once on another node.
  After `drain_after` such groups in a row a node gets no new groups and runs its probe job again:
  if it fails the node is drained (logged, counted as `nodes_drained`, listed by `describe()`,
  its actor closed) and probed again after `reprobe_s`; if it passes it is used again.
* Membership: alive nodes with CPUs are read from `ray.nodes()` every `refresh_s` seconds and right
  after any actor error, on a background thread: a new node gets an actor, a dead one is dropped.
* Failures keep the tri-state, and a verified score only ever comes from a node's rubric:

  | the driver sees                                       | result                                      |
  |-------------------------------------------------------|---------------------------------------------|
  | `RewardResult`s from the node                         | passed through unchanged                    |
  | ... every one unverified `error` (see node health)    | retried once on another node, else as is   |
  | `RayActorError` (node or actor lost, unreachable)     | retried once on another node, else `error`  |
  | no live node                                          | `error` ("no live scoring node")            |
  | `group_timeout_s` passed                              | the Ray task is cancelled; `timeout`        |
  | the caller cancels (its own deadline, e.g. the env's) | the Ray task is cancelled; re-raised        |
  | any other Ray error, bad reply, pickling failure      | `error` naming the exception type           |

  Ray's own task retries are off (`max_task_retries=0`), so a group is never scored twice at once.
* `aclose()` calls `close()` on every actor (their pools and cgroups are released on every node)
  and kills them. The driver's Ray connection stays up for other users in the process (several
  `RayRubric`s may share it) until `ray.shutdown()` or process exit.
* Loopback: Ray advertises the machine's outward address for 127.0.0.1/localhost, so for a cluster
  on one machine use node addresses 127.0.0.2, 127.0.0.3, ...; the driver joins as the host of
  `address` when that is a loopback address (`node_ip_address` overrides).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import ipaddress
import logging
import threading
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, Field

try:
    import ray
except ImportError as exc:  # an optional extra
    raise ImportError("the Ray scorer needs Ray on every node: pip install 'rlvr-envs[ray]'") from exc
from ray.exceptions import GetTimeoutError, RayActorError, RayError, RayTaskError
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

from rubrics.core import RewardResult, Rubric, Sample, Status
from rubrics.remote.join import RemoteScorerError, bounded_init, cluster_address
from rubrics.remote.node import RubricFactory, RubricHost, fingerprint

__all__ = ["RayRubric", "RayScorerConfig", "RemoteScorerError", "build_scorer", "connect"]
log = logging.getLogger(__name__)


class RayScorerConfig(BaseModel):
    """Where the cluster is and how groups are spread over it. Defaults suit a real cluster."""

    address: str | None = Field(None, description="Ray cluster address host:port (default RAY_ADDRESS)")
    node_ip_address: str | None = Field(None, description="This driver's node address (default: see doc)")
    node_slots: int | None = Field(None, ge=1, description="Slots per node (default: the node's CPUs)")
    inflight_per_slot: int = Field(2, ge=1, description="Groups in flight per node slot")
    group_timeout_s: float | None = Field(None, gt=0, description="Deadline of one group (None: caller's)")
    refresh_s: float = Field(10.0, gt=0, description="How often node membership is re-read")
    connect_timeout_s: float = Field(20.0, gt=0, description="How long joining the cluster may take")
    ready_timeout_s: float = Field(120.0, gt=0, description="How long a new node actor may take to start")
    probe_timeout_s: float = Field(60.0, gt=0, description="How long a node's probe job may take")
    drain_after: int = Field(2, ge=1, description="Unverified groups in a row before a node is re-probed")
    reprobe_s: float = Field(300.0, gt=0, description="When an excluded or drained node is probed again")
    close_timeout_s: float = Field(60.0, gt=0, description="How long actors may take to release pools")
    niceness: int | None = Field(
        0,
        description="Nice value of the node actors and their pools (Ray starts workers at 15; None keeps it)",
    )
    namespace: str = Field("rlvr", description="Ray namespace of the driver")
    log_to_driver: bool = Field(False, description="Copy worker logs into this process's stderr")


@dataclass
class _Member:
    node_id: str
    where: str
    handle: Any
    slots: int
    capacity: int
    inflight: int = 0
    failed_in_row: int = 0  # groups in a row that came back all unverified (error)
    last_failure: str = ""
    suspect: bool = False  # being re-probed: gets no new groups meanwhile


def _loopback_host(address: str | None) -> str | None:
    host = (address or "").rsplit(":", 1)[0].removeprefix("ray://")
    try:
        return host if ipaddress.ip_address(host).is_loopback else None
    except ValueError:
        return None


def _last_line(exc: BaseException) -> str:
    """A Ray error in one line: the cause (last line) of a remote traceback, else the first line."""
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    if not lines:
        return ""
    return (lines[-1] if isinstance(exc, RayTaskError | RayActorError) else lines[0])[:300]


def _kill(handle: Any) -> None:
    if not ray.is_initialized():  # never let a cleanup call start a local Ray instance
        return
    try:
        ray.kill(handle, no_restart=True)
    except (RayError, ValueError):  # already gone with its node
        pass


def _infra_failed(results: list[RewardResult]) -> bool:
    """Every sample unverified with `error`: what a node that cannot score returns (a timeout is not
    counted: a slow group is not a broken node, and retrying it would double the wait)."""
    return bool(results) and all(r.score is None and r.status is Status.ERROR for r in results)


class RayRubric(Rubric):
    """A rubric whose groups are scored by per-node actors on a Ray cluster (see module docstring)."""

    name = "ray"

    def __init__(
        self,
        factory: RubricFactory,
        config: RayScorerConfig | None = None,
        *,
        expected: dict[str, str] | None = None,
    ) -> None:
        self.factory = factory
        self.config = config or RayScorerConfig()
        self.expected = expected or fingerprint()  # what every node must match
        self.counts: Counter[str] = Counter()
        self.refused: dict[str, str] = {}
        self.excluded: dict[str, dict[str, Any]] = {}  # node id -> where, reason, retry_at (monotonic)
        self.closed_pids: list[int] = []
        self._members: dict[str, _Member] = {}
        self._lock = threading.Lock()
        self._start_lock = threading.Lock()
        self._waiters: list[tuple[asyncio.AbstractEventLoop, asyncio.Future]] = []
        self._kick = threading.Event()
        self._stop = threading.Event()
        self._refresher: threading.Thread | None = None
        self._started = False
        self._failure: RemoteScorerError | None = None
        self._Host = ray.remote(RubricHost)

    # ------------------------------------------------------------------ lifecycle
    def start(self) -> None:
        """Join the cluster and start a probed actor on every node (blocking; idempotent).
        Raises `RemoteScorerError` when the cluster cannot be joined within `connect_timeout_s` or
        no node can score (none alive, all refused or failing their probe); a scorer that failed
        to start raises the same error on every later call."""
        with self._start_lock:
            if self._started:
                return
            if self._failure is not None:
                raise self._failure
            try:
                self._join()
                self._refresh()
                if not self._members:
                    why = "; ".join([*self.refused.values(), *(e["reason"] for e in self.excluded.values())])
                    raise RemoteScorerError(f"no Ray node can score: {why or 'no alive node with CPUs'}")
            except RemoteScorerError as exc:  # raised, not logged: the caller shows it (one line)
                self._failure = exc
                raise
            self._refresher = threading.Thread(target=self._refresh_loop, name="rlvr-ray-nodes", daemon=True)
            self._refresher.start()
            self._started = True

    def _join(self) -> None:
        if ray.is_initialized():
            return
        address = cluster_address(self.config.address)
        bounded_init(
            address,
            self.config.connect_timeout_s,
            _node_ip_address=self.config.node_ip_address or _loopback_host(address),
            namespace=self.config.namespace,
            log_to_driver=self.config.log_to_driver,
            logging_level=logging.WARNING,
        )

    async def aclose(self) -> None:
        await asyncio.to_thread(self._close_blocking)

    def _close_blocking(self) -> None:
        with self._start_lock:
            self._stop.set()
            self._kick.set()
            if self._refresher is not None:
                self._refresher.join()
            with self._lock:
                members, self._members = list(self._members.values()), {}
            self._wake_all()
            self.closed_pids += self._dispose([m.handle for m in members], [m.where for m in members])
            if members or self.counts:
                log.info("ray scorer: %s", dict(self.counts))

    def _dispose(self, handles: list[Any], wheres: list[str]) -> list[int]:
        """Ask actors to release their pools (bounded by `close_timeout_s`), then kill them; the pids
        of those that released."""
        if not ray.is_initialized():
            return []
        refs = []
        for handle, where in zip(handles, wheres, strict=True):
            try:
                refs.append(handle.close.remote())
            except Exception as exc:  # noqa: BLE001 - Ray raises bare Exception for a gone actor
                log.warning("ray scorer: node %s is gone: %s", where, _last_line(exc))
        done, pending = (
            ray.wait(refs, num_returns=len(refs), timeout=self.config.close_timeout_s) if refs else ([], [])
        )
        pids = []
        for ref in done:
            try:
                pids.append(ray.get(ref))
            except RayError as exc:
                log.warning("ray scorer: a node could not release its pools: %s", type(exc).__name__)
        if pending:
            log.warning("ray scorer: %d nodes did not release their pools in time", len(pending))
        for handle in handles:
            _kill(handle)
        return pids

    # ------------------------------------------------------------------ membership
    def nodes(self) -> list[dict[str, Any]]:
        """The nodes currently scoring: where, slots, groups in flight."""
        with self._lock:
            return [
                {"where": m.where, "slots": m.slots, "inflight": m.inflight} for m in self._members.values()
            ]

    def describe(self) -> dict[str, Any]:
        """What the scorer uses and what it left out, for status pages and logs: `nodes` (scoring),
        `suspect` (re-probing), `excluded` (failed a probe: where -> why), `refused` (handshake),
        `counts` (groups, retries, nodes joined / drained / failing their probe, ...)."""
        with self._lock:
            suspect = [m.where for m in self._members.values() if m.suspect]
            excluded = {e["where"]: e["reason"] for e in self.excluded.values()}
        return {
            "nodes": self.nodes(),
            "suspect": suspect,
            "excluded": excluded,
            "refused": list(self.refused.values()),
            "counts": dict(self.counts),
            "failure": str(self._failure) if self._failure else None,
        }

    def _refresh_loop(self) -> None:
        while not self._stop.is_set():
            self._kick.wait(self.config.refresh_s)
            self._kick.clear()
            if self._stop.is_set():
                return
            try:
                self._refresh()
            except Exception:  # noqa: BLE001 - keep scoring with the nodes we have
                log.exception("ray scorer: reading the cluster's nodes failed")

    def _refresh(self) -> None:
        alive = {
            n["NodeID"]: n
            for n in ray.nodes()
            if n.get("Alive") and n.get("Resources", {}).get("CPU", 0) >= 1
        }
        now = time.monotonic()
        with self._lock:
            gone = [m for nid, m in self._members.items() if nid not in alive]
            for m in gone:
                del self._members[m.node_id]
            for nid in [nid for nid in self.excluded if nid not in alive]:
                del self.excluded[nid]  # left the cluster (counted when it was excluded)
            new = [
                n
                for nid, n in alive.items()
                if nid not in self._members
                and nid not in self.refused
                and self.excluded.get(nid, {}).get("retry_at", 0) <= now
            ]
        for m in gone:
            self.counts["nodes_left"] += 1
            log.warning("ray scorer: node %s left", m.where)
        if gone:
            self._wake_all()
        if new and not self._stop.is_set():
            self._spawn(new)

    def _spawn(self, nodes: list[dict[str, Any]]) -> None:
        """Start an actor on each node; admit those that start, pass the handshake and their probe."""
        started = []
        for node in nodes:
            slots = self.config.node_slots or max(1, int(node["Resources"]["CPU"]))
            where = node.get("NodeManagerAddress", node["NodeID"][:8])
            handle = self._Host.options(
                num_cpus=0,
                max_restarts=-1,
                max_task_retries=0,
                scheduling_strategy=NodeAffinitySchedulingStrategy(node["NodeID"], soft=False),
            ).remote(
                self.factory, slots, self.expected, where, self.config.niceness, self.config.probe_timeout_s
            )
            started.append((node["NodeID"], where, slots, handle, handle.ready.remote()))
        ready = self._wait([s[4] for s in started], self.config.ready_timeout_s)
        probing = []
        for node_id, where, slots, handle, ref in started:
            info, reason = self._get(ref, ready, "did not start in time")
            if info is None:
                _kill(handle)
                log.warning("ray scorer: no actor on node %s (%s); retried later", where, reason)
            elif info["refusal"]:
                _kill(handle)
                self.refused[node_id] = info["refusal"]
                self.counts["nodes_refused"] += 1
                log.error("ray scorer: %s", info["refusal"])
            else:
                probing.append((node_id, where, slots, handle, handle.probe.remote(), info))
        answered = self._wait([p[4] for p in probing], self.config.probe_timeout_s + 10)
        if self._stop.is_set():  # closed meanwhile: none of them is used
            for p in probing:
                _kill(p[3])
            return
        failed = []
        for node_id, where, slots, handle, ref, info in probing:
            failure, reason = self._get(ref, answered, f"no result in {self.config.probe_timeout_s:g} s")
            failure = failure or (f"node {where} failed its probe job: {reason}" if reason else None)
            if failure:
                failed.append((node_id, where, handle, failure))
            else:
                self._add_member(node_id, where, handle, slots, info.get("priority", ""))
        for node_id, where, _, failure in failed:
            self._exclude(node_id, where, failure)
            self.counts["nodes_failed_probe"] += 1
        if failed:
            self._dispose([f[2] for f in failed], [f[1] for f in failed])
        self._wake_all()

    def _wait(self, refs: list[Any], timeout_s: float) -> list[Any]:
        """The refs that finished within `timeout_s` (stops early when the scorer closes)."""
        done, waiting = [], list(refs)
        deadline = time.monotonic() + timeout_s
        while waiting and time.monotonic() < deadline and not self._stop.is_set():
            finished, waiting = ray.wait(waiting, num_returns=len(waiting), timeout=0.5)
            done += finished
        return done

    @staticmethod
    def _get(ref: Any, done: list[Any], late: str) -> tuple[Any, str]:
        """(value, "") of a finished ref, or (None, why not)."""
        if ref not in done:
            return None, late
        try:
            return ray.get(ref, timeout=0), ""
        except (RayError, GetTimeoutError) as exc:
            return None, f"{type(exc).__name__}: {_last_line(exc)}"

    def _exclude(self, node_id: str, where: str, reason: str) -> None:
        retry_at = time.monotonic() + self.config.reprobe_s
        with self._lock:
            self.excluded[node_id] = {"where": where, "reason": reason, "retry_at": retry_at}
        log.error("ray scorer: %s; it gets no groups (probed again in %.0f s)", reason, self.config.reprobe_s)

    def _add_member(self, node_id: str, where: str, handle: Any, slots: int, priority: str = "") -> None:
        member = _Member(node_id, where, handle, slots, slots * self.config.inflight_per_slot)
        with self._lock:
            self._members[node_id] = member
            back = self.excluded.pop(node_id, None)
        self.counts["nodes_joined"] += 1
        again = ", back: its probe passed" if back else ""
        log.info("ray scorer: node %s joined (%d slots, %s%s)", where, slots, priority, again)

    def _drop(self, member: _Member) -> None:
        """Stop using an actor that errored; the refresher re-creates one if its node is alive."""
        with self._lock:
            if self._members.get(member.node_id) is not member:
                return
            del self._members[member.node_id]
        _kill(member.handle)
        self._kick.set()
        self._wake_all()

    # ------------------------------------------------------------------ node health
    def _failed_group(self, member: _Member, reason: str) -> None:
        """A group came back all unverified from `member`: after `drain_after` in a row, re-probe it."""
        with self._lock:
            member.failed_in_row += 1
            member.last_failure = reason
            check = member.failed_in_row >= self.config.drain_after and not member.suspect
            if check:
                member.suspect = True  # no new groups until the probe says
        if check and not self._stop.is_set():
            threading.Thread(target=self._recheck, args=(member,), name="rlvr-ray-probe", daemon=True).start()

    def _recheck(self, member: _Member) -> None:
        try:
            failure = member.handle.probe.remote().future().result(self.config.probe_timeout_s + 10)
        except concurrent.futures.TimeoutError:
            failure = (
                f"node {member.where} failed its probe job: no result in {self.config.probe_timeout_s:g} s"
            )
        except RayError as exc:
            failure = f"node {member.where} failed its probe job: {type(exc).__name__}: {_last_line(exc)}"
        if failure is None:
            with self._lock:
                member.suspect, member.failed_in_row = False, 0
            log.warning("ray scorer: node %s passed its probe job again; kept", member.where)
            self._wake_all()
            return
        with self._lock:
            if self._members.get(member.node_id) is not member:
                return
            del self._members[member.node_id]
        self._exclude(
            member.node_id,
            member.where,
            f"node {member.where} drained: {member.failed_in_row} groups in a row came back unverified "
            f"(last: {member.last_failure[:200]}) and it {failure.removeprefix(f'node {member.where} ')}",
        )
        self.counts["nodes_drained"] += 1  # after the log line: whoever sees the count sees the line
        self._wake_all()  # its waiting groups go elsewhere; those in flight end with its actor
        self._dispose([member.handle], [member.where])

    # ------------------------------------------------------------------ dispatch
    async def _acquire(self, exclude: set[str]) -> _Member | None:
        loop = asyncio.get_running_loop()
        while True:
            with self._lock:
                candidates = [m for m in self._members.values() if m.node_id not in exclude]
                if not candidates:
                    return None
                free = [m for m in candidates if m.inflight < m.capacity and not m.suspect]
                if free:
                    member = min(free, key=lambda m: m.inflight / m.capacity)
                    member.inflight += 1
                    return member
                waiter = (loop, loop.create_future())
                self._waiters.append(waiter)
            try:
                await waiter[1]
            finally:
                with self._lock:
                    if waiter in self._waiters:
                        self._waiters.remove(waiter)

    def _release(self, member: _Member) -> None:
        with self._lock:
            member.inflight -= 1
        self._wake_all()

    def _wake_all(self) -> None:
        with self._lock:
            waiters, self._waiters = self._waiters, []
        for loop, fut in waiters:
            try:
                loop.call_soon_threadsafe(lambda f=fut: f.done() or f.set_result(None))
            except RuntimeError:  # that loop is closed; its waiter is gone with it
                pass

    async def score(self, sample: Sample) -> RewardResult:
        """`Rubric.score`, but a scorer that cannot start raises `RemoteScorerError` (misconfigured)."""
        await self._ensure_started()
        return await super().score(sample)

    async def score_group(self, samples: Sequence[Sample]) -> list[RewardResult]:
        """`Rubric.score_group`, but a scorer that cannot start raises `RemoteScorerError`."""
        await self._ensure_started()
        return await super().score_group(samples)

    async def _ensure_started(self) -> None:
        if not self._started:
            await asyncio.to_thread(self.start)

    async def _score(self, sample: Sample) -> RewardResult:
        return (await self._score_group([sample]))[0]

    async def _score_group(self, samples: Sequence[Sample]) -> list[RewardResult]:
        if not samples:
            return []
        samples = list(samples)
        self.counts["groups"] += 1
        tried: set[str] = set()
        lost = ""
        failed: list[RewardResult] | None = None
        for attempt in range(2):
            member = await self._acquire(tried)
            if member is None:
                break
            tried.add(member.node_id)
            if attempt:
                self.counts["retried"] += 1
            try:
                results = self._checked(await self._call(member, samples), len(samples))
            except RayActorError as exc:
                lost = f"scoring node {member.where} lost: {type(exc).__name__}"
                self.counts["node_errors"] += 1
                self._drop(member)
                continue
            except asyncio.TimeoutError:
                self.counts["timeouts"] += 1
                reason = f"ray scorer: group not scored within {self.config.group_timeout_s}s (cancelled)"
                return [RewardResult.unverified(Status.TIMEOUT, reason) for _ in samples]
            except (RayError, TypeError, ValueError) as exc:  # RayTaskError, OOM, pickling, bad reply
                self.counts["errors"] += 1
                reason = f"ray scorer: {type(exc).__name__}: {_last_line(exc)}"
                return [RewardResult.unverified(Status.ERROR, reason) for _ in samples]
            finally:
                self._release(member)
            if not _infra_failed(results):
                member.failed_in_row = 0
                if failed is not None:
                    self.counts["rescued_groups"] += 1  # unverified on one node, verified on another
                return results
            self.counts["unverified_on_node"] += 1
            self._failed_group(member, results[0].reason)
            failed = results
        if failed is not None:  # the same on a second node, or no other node: the group's own result
            return failed
        self.counts["unverified_groups"] += 1
        reason = f"{lost}; not retried: no other live node" if lost else "ray scorer: no live scoring node"
        return [RewardResult.unverified(Status.ERROR, reason) for _ in samples]

    async def _call(self, member: _Member, samples: list[Sample]) -> Any:
        """One group on one actor; the Ray task is cancelled if we time out or are cancelled."""
        ref = member.handle.score_group.remote(samples)
        try:
            return await asyncio.wait_for(asyncio.wrap_future(ref.future()), self.config.group_timeout_s)
        except (asyncio.TimeoutError, asyncio.CancelledError):
            try:
                ray.cancel(ref)
            except RayError:  # already finished or gone with its node
                pass
            raise

    @staticmethod
    def _checked(results: Any, n: int) -> list[RewardResult]:
        if not isinstance(results, list) or len(results) != n:
            raise ValueError(f"node returned {type(results).__name__} for {n} samples")
        if not all(isinstance(r, RewardResult) for r in results):
            raise ValueError("node returned something other than RewardResults")
        return results


async def connect(factory: RubricFactory, config: RayScorerConfig | None = None) -> RayRubric:
    """A started `RayRubric`: joined the cluster, a probed actor ready on every usable node.
    Raises `RemoteScorerError` (one line: the address and what answered, or why no node can score)."""
    rubric = RayRubric(factory, config)
    await asyncio.to_thread(rubric.start)
    return rubric


def build_scorer(
    factory: RubricFactory, scorer: str = "local", *, local_slots: int = 2, **ray_options: Any
) -> Rubric:
    """The one switch for adapters and the reward server: `factory(local_slots)` here, or a
    `RayRubric` over the cluster (`ray_options` are `RayScorerConfig` fields; it joins on first use,
    and raises `RemoteScorerError` there if it cannot). Raises `RemoteScorerError` at once when no
    cluster address is given (option, `RAY_ADDRESS`, or a Ray connection already open here)."""
    if scorer == "local":
        return factory(local_slots)
    if scorer == "ray":
        config = RayScorerConfig(**ray_options)
        if not ray.is_initialized():
            cluster_address(config.address)  # raises on a missing or malformed address
        return RayRubric(factory, config)
    raise ValueError(f"unknown scorer {scorer!r}; expected 'local' or 'ray'")
