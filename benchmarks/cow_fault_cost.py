"""What a copy-on-write page fault costs the process that forks, on this machine.

The warm pool's worker forks one child per job and goes on working while the child runs; every page
it writes then is copied (a fault each). This measures that price: a parent forks a child that waits
on a pipe, writes one byte to each of N pages while the child is alive, then releases and reaps it.
The baseline is the same loop writing no page, alternated with it in one run. The difference per
page is what each fault of the worker's (`sandbox_cpu_ab.py --mode code`: "w flt") costs a job.

    python benchmarks/cow_fault_cost.py [--pages 300] [--forks 2000] [--rounds 3]
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import time

PAGE = os.sysconf("SC_PAGE_SIZE")


def one_round(buf: bytearray, pages: int, forks: int) -> tuple[float, float]:
    """(parent CPU ms per fork, parent minor faults per fork) writing `pages` pages per child."""
    cpu0, flt0 = time.process_time(), resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    for _ in range(forks):
        r, w = os.pipe()
        pid = os.fork()
        if pid == 0:
            os.read(r, 1)
            os._exit(0)
        for offset in range(0, pages * PAGE, PAGE):  # while the child is alive: each write copies
            buf[offset] = (buf[offset] + 1) & 0xFF
        os.write(w, b"x")
        os.waitpid(pid, 0)
        os.close(r)
        os.close(w)
    cpu = (time.process_time() - cpu0) / forks * 1e3
    faults = (resource.getrusage(resource.RUSAGE_SELF).ru_minflt - flt0) / forks
    return cpu, faults


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pages", type=int, default=300)
    parser.add_argument("--forks", type=int, default=2000)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    buf = bytearray(PAGE * (args.pages + 1))
    for offset in range(0, len(buf), PAGE):  # resident before the first fork
        buf[offset] = 1
    rows: dict[int, list[tuple[float, float]]] = {0: [], args.pages: []}
    for _ in range(args.rounds):
        for pages in rows:
            rows[pages].append(one_round(buf, pages, args.forks))
    print(f"{args.forks} forks x {args.rounds} alternating rounds; parent CPU and minor faults per fork")
    print(f"{'pages written':>14} {'ms/fork':>8} {'faults':>7}  ms per round")
    for pages, results in rows.items():
        ms = statistics.median(cpu for cpu, _ in results)
        faults = statistics.median(f for _, f in results)
        print(f"{pages:>14} {ms:>8.3f} {faults:>7.0f}  " + " ".join(f"{cpu:.3f}" for cpu, _ in results))
    base = statistics.median(cpu for cpu, _ in rows[0])
    written = statistics.median(cpu for cpu, _ in rows[args.pages])
    extra = [f for _, f in rows[args.pages]]
    per = (written - base) / max(statistics.median(extra) - statistics.median(f for _, f in rows[0]), 1)
    print(f"cost per copy-on-write fault: {per * 1e3:.2f} us  ({written / base:.2f}x the no-write baseline)")
    print(f"load average {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
