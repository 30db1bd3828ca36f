"""`python -m sandbox check`: which backends run a job here, and for each that does not, the cause and
the fix on one line.
`python -m sandbox sweep`: remove sandbox containers and cgroups left behind by dead processes.
`python -m sandbox build-image [--tag T] [--force]`: the Docker backend's image, from this package
alone, offline (`sandbox.image`); `--dockerfile` prints the Dockerfile for a registry-based image."""

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


def build_image(argv: list[str]) -> int:
    import argparse

    from sandbox import image

    ap = argparse.ArgumentParser(
        prog="python -m sandbox build-image", description=image.__doc__.split("\n")[0]
    )
    ap.add_argument("--tag", default=image.DEFAULT_TAG, help="image name (default %(default)s)")
    ap.add_argument("--force", action="store_true", help="rebuild even if the tag exists")
    ap.add_argument("--dockerfile", action="store_true", help="print the registry-based Dockerfile instead")
    args = ap.parse_args(argv)
    if args.dockerfile:
        print(image.DOCKERFILE.read_text(encoding="utf-8"), end="")
        return 0
    try:
        image_id = image.build_image(args.tag, force=args.force)
    except Exception as e:  # noqa: BLE001 - one line, not a traceback
        print(f"build-image: {type(e).__name__}: {e}", file=sys.stderr)
        return 1
    print(f"{args.tag} {image_id}")
    return 0


def main(argv: list[str]) -> int:
    if argv[:1] == ["sweep"]:
        return sweep()
    if argv[:1] == ["build-image"]:
        return build_image(argv[1:])
    if argv[:1] != ["check"]:
        print(
            "usage: python -m sandbox check | sweep | build-image [--tag T] [--force] [--dockerfile]",
            file=sys.stderr,
        )
        return 2
    results = check(progress=lambda name: print(f"probing {name} ...", file=sys.stderr, flush=True))
    for name, verdict in results.items():
        print(f"{name:7s} {verdict}", flush=True)
    return 0 if any(v.startswith("ok") for v in results.values()) else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
