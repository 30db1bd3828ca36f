"""The job a CAS worker runs: the full structured comparison with the CAS leaf comparator.

Imported (with sympy) by the forkserver before any worker is forked, so a fresh worker is ready at once.
"""

from __future__ import annotations

from typing import Any

import sympy  # noqa: F401 - preloaded in the forkserver so forked workers start warm

from rubrics.math.cas import ConvertError, relations_equal, values_equal
from rubrics.math.compare import compare
from rubrics.math.numeric import cheap_numbers
from rubrics.math.policy import rules_of
from rubrics.math.structure import TooComplex


def handle(job: tuple[Any, Any, Any]) -> Any:
    """`(pred_node, gold_node, policy)` → `(correct, reason)`; reason in match_cas / mismatch /
    parse_error / too_complex. `("probe", action, arg)` jobs exercise the pool itself (health checks
    and tests): "echo" returns arg, "sleep" sleeps arg seconds, "spin" computes for arg CPU seconds,
    "alloc" allocates arg MiB."""
    if job[0] == "probe":
        return _probe(job[1], job[2])
    pred, gold, policy = job
    flags = {"convert": 0, "complex": 0}

    def leaf(p: str, g: str, kind: str) -> bool:
        if kind == "value":
            quick = cheap_numbers(p, g, policy)
            if quick is not None:
                return quick
        p, g = p.rstrip("%").strip(), g.rstrip("%").strip()
        try:
            if kind == "value":
                return values_equal(p, g, policy.rounded_golds == "exact_rounds")
            return relations_equal(p, g, positive=kind == "ineq")
        except ConvertError:
            flags["convert"] += 1
            return False
        except (TooComplex, RecursionError, OverflowError, MemoryError):
            flags["complex"] += 1
            return False
        except (TypeError, ValueError, ZeroDivisionError, AttributeError):
            flags["convert"] += 1
            return False

    if compare(pred, gold, leaf, rules_of(policy)):
        return True, "match_cas"
    if flags["complex"]:
        return False, "too_complex"
    if flags["convert"]:
        return False, "parse_error"
    return False, "mismatch"


def _probe(action: str, arg: Any) -> Any:
    if action == "echo":
        return arg
    if action == "sleep":
        import time

        time.sleep(float(arg))
        return "slept"
    if action == "spin":
        import time

        end = time.process_time() + float(arg)
        while time.process_time() < end:
            pass
        return "spun"
    if action == "alloc":
        block = bytearray(int(arg) * 1024 * 1024)
        return len(block)
    raise ValueError(f"unknown probe {action!r}")
