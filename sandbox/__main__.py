"""`python -m sandbox check`: which backends work here and why not.
`python -m sandbox sweep`: remove sandbox containers and cgroups left behind by dead processes."""

from __future__ import annotations

import sys

from sandbox.registry import check


def sweep() -> int:
    from sandbox import cgroups

    n = 0
    if cgroups.detect() == "v1":
        n += sum(cgroups.sweep_stale(cgroups._own_v1_path(c)) for c in cgroups.V1_CONTROLLERS)
    elif cgroups.detect() == "v2":
        n += cgroups.sweep_stale(cgroups.ROOT)
    print(f"cgroups: removed {n} stale tree(s)")
    try:
        import docker
        from sandbox.docker import sweep_containers

        client = docker.from_env()
        client.ping()
    except Exception as e:
        print(f"docker: skipped ({type(e).__name__})")
        return 0
    print(f"docker: removed {sweep_containers(client)} orphaned container(s)")
    return 0


def main(argv: list[str]) -> int:
    if argv[:1] == ["sweep"]:
        return sweep()
    if argv[:1] != ["check"]:
        print("usage: python -m sandbox check | sweep", file=sys.stderr)
        return 2
    results = check()
    for name, verdict in results.items():
        print(f"{name:7s} {verdict}")
    return 0 if any(v.startswith("ok") for v in results.values()) else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
