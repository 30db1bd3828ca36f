"""`python -m sandbox check`: which backends work on this host, and why not."""

from __future__ import annotations

import sys

from sandbox.registry import check


def main(argv: list[str]) -> int:
    if argv[:1] != ["check"]:
        print("usage: python -m sandbox check", file=sys.stderr)
        return 2
    results = check()
    for name, verdict in results.items():
        print(f"{name:7s} {verdict}")
    return 0 if any(v.startswith("ok") for v in results.values()) else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
