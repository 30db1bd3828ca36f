"""The node side of the Ray scorer: one `RubricHost` actor per node, holding that node's own rubric.

* The actor builds its rubric itself, from the driver's factory, sized to the node
  (`factory(slots)`, slots = the node's CPUs unless configured): its own bubblewrap/Docker warm pool
  or CAS pool, never one shipped from the driver. Work arrives as whole groups of `Sample`s.
* Handshake: the driver sends its `fingerprint()` (package version, Python version, harness bytes).
  A node whose own fingerprint differs refuses: it builds no rubric, `ready()` reports the refusal in
  one clear line, and `score_group` raises it. Pickled samples and sandbox jobs only mean the same
  thing between identical installs.
* Probe job: before the driver sends a node any group, `probe()` scores a few known samples on the
  node's own rubric (one sandbox job for code, one CAS check for math) and reports the first one
  that does not come back verified with its known score. The samples come from the factory's
  `probe()` when it has one, else from the rubric's type (`CodeRubric`, `MathRubric`); other
  rubrics have no probe and pass. The driver runs it again on a node whose groups keep coming back
  unverified (see `rubrics.remote.scorer`). Probe samples are not counted in `stats()`.
* `close()` releases the rubric's pools (sandbox workers, cgroups, CAS processes); the driver calls
  it on every actor before it lets them go, since Ray kills actors without running any cleanup.

This module imports Ray only through `rubrics.remote.scorer`; nothing in `sandbox/` knows about it.
"""

from __future__ import annotations

import asyncio
import hashlib
import os
import platform
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from importlib import metadata
from typing import Any

from rubrics.core import RewardResult, Rubric, Sample

RubricFactory = Callable[[int], Rubric]  # slots of this node -> the node's own rubric
ProbeCase = tuple[Sample, float]  # a sample and the score a working node gives it
PACKAGE = "rlvr-envs"


def code_probe() -> list[ProbeCase]:
    """One sandbox job: a correct function against two call tests (score 1.0)."""
    from rubrics.code.suites import call_suite

    code = "```python\ndef rlvr_probe(x):\n    return x + 1\n```"
    suite = call_suite("rlvr_probe", [[1], [41]], [2, 42], time_limit_s=4.0)
    return [(Sample(prompt="", completion=code, answer=suite), 1.0)]


def math_probe() -> list[ProbeCase]:
    """One check that only the CAS worker can decide: (x+1)^2 = x^2+2x+1 (score 1.0)."""
    return [(Sample(prompt="", completion="\\boxed{(x+1)^2}", answer="x^2+2x+1"), 1.0)]


def probe_cases(factory: Any, rubric: Rubric) -> list[ProbeCase]:
    """The factory's own `probe()`, else the probe of the rubric's type; [] when there is none."""
    own = getattr(factory, "probe", None)
    if callable(own):
        return list(own())
    code_module, math_module = sys.modules.get("rubrics.code"), sys.modules.get("rubrics.math")  # if in use
    if code_module is not None and isinstance(rubric, code_module.CodeRubric):
        return code_probe()
    if math_module is not None and isinstance(rubric, math_module.MathRubric):
        return math_probe()
    return []


@dataclass(frozen=True)
class CodeNodeRubric:
    """Factory: a node's `CodeRubric` on its own `sandbox` pool with `slots` slots (picklable)."""

    sandbox: str = "auto"
    config: Mapping[str, Any] = field(default_factory=dict)  # CodeRubricConfig fields

    def __call__(self, slots: int) -> Rubric:
        from rubrics.code.rubric import CodeRubric, CodeRubricConfig

        options = {**self.config, "sandbox_slots": slots}  # unset max_concurrency: the rubric's default
        if options.get("max_concurrency"):  # from 2 x slots on (see CodeRubric._default_concurrency)
            options["max_concurrency"] = max(int(options["max_concurrency"]), 2 * slots)
        return CodeRubric(self.sandbox, CodeRubricConfig(**options))

    def probe(self) -> list[ProbeCase]:
        return code_probe()


@dataclass(frozen=True)
class MathNodeRubric:
    """Factory: a node's `MathRubric` with a CAS pool of `slots` workers (picklable)."""

    format_weight: float = 0.0

    def __call__(self, slots: int) -> Rubric:
        from rubrics.math import MathRubric

        return MathRubric(workers=slots, format_weight=self.format_weight)

    def probe(self) -> list[ProbeCase]:
        return math_probe()


def fingerprint() -> dict[str, str]:
    """What must match between the driver and every node: package and Python versions, harness bytes."""
    from sandbox.harness import runner_files

    try:
        version = metadata.version(PACKAGE)
    except metadata.PackageNotFoundError:
        version = "not installed"
    digest = hashlib.sha256()
    for name, content in sorted(runner_files().items()):
        digest.update(name.encode() + b"\0")
        digest.update(content if isinstance(content, bytes) else content.encode())
    return {
        PACKAGE: version,
        "python": ".".join(platform.python_version_tuple()[:2]),
        "harness": digest.hexdigest()[:16],
    }


def refusal(mine: dict[str, str], expected: dict[str, str], where: str) -> str | None:
    """One line naming every field that differs, or None when the fingerprints match."""
    diffs = [
        f"{key} {mine.get(key)!r} (driver: {expected.get(key)!r})"
        for key in sorted(set(mine) | set(expected))
        if mine.get(key) != expected.get(key)
    ]
    if not diffs:
        return None
    return f"node {where} refuses to score: it runs " + ", ".join(diffs) + "; install the same on every node"


def renice(value: int) -> str:
    """Set every thread of this process to nice `value` (Linux nice is per thread; threads and
    processes started later inherit it). Ray starts workers at nice 15, so without this a node's
    rubric and its sandbox workers get a small share of a CPU that other work also wants.
    Returns what happened, for `ready()` (lowering the value needs CAP_SYS_NICE)."""
    try:
        for task in os.listdir("/proc/self/task"):
            os.setpriority(os.PRIO_PROCESS, int(task), value)
    except OSError as exc:
        return f"kept nice {os.getpriority(os.PRIO_PROCESS, 0)} ({exc.strerror})"
    return f"nice {value}"


class RubricHost:
    """A node's scorer (wrapped by `ray.remote` in `rubrics.remote.scorer`); async, so groups overlap."""

    def __init__(
        self,
        factory: RubricFactory,
        slots: int,
        expected: dict[str, str],
        where: str,
        niceness: int | None = None,
        probe_timeout_s: float = 60.0,
    ) -> None:
        self.factory = factory
        self.probe_timeout_s = probe_timeout_s
        self.slots = slots
        self.where = where
        self.priority = renice(niceness) if niceness is not None else "unchanged"
        self.refusal = refusal(fingerprint(), expected, where)
        self.rubric: Rubric | None = None if self.refusal else factory(slots)
        self.groups = 0
        self.samples = 0

    async def ready(self) -> dict[str, Any]:
        return {
            "where": self.where,
            "pid": os.getpid(),
            "slots": self.slots,
            "priority": self.priority,
            "refusal": self.refusal,
        }

    async def probe(self) -> str | None:
        """None when this node scored its probe samples as a working node does, else one line why."""
        if self.rubric is None:
            return self.refusal or f"node {self.where}: its rubric is closed"
        cases = probe_cases(self.factory, self.rubric)
        if not cases:
            return None
        try:
            results = await asyncio.wait_for(
                self.rubric.score_group([sample for sample, _ in cases]), self.probe_timeout_s
            )
        except asyncio.TimeoutError:
            return f"node {self.where} failed its probe job: no result within {self.probe_timeout_s:g} s"
        for (_, want), got in zip(cases, results, strict=True):
            if got.score is None:
                return f"node {self.where} failed its probe job: {got.status.value}: {got.reason[:300]}"
            if got.score != want:
                return f"node {self.where} failed its probe job: scored {got.score}, a working node {want}"
        return None

    async def score_group(self, samples: Sequence[Sample]) -> list[RewardResult]:
        if self.rubric is None:
            raise RuntimeError(self.refusal or "this node's rubric is closed")
        results = await self.rubric.score_group(samples)
        self.groups += 1
        self.samples += len(samples)
        return results

    async def stats(self) -> dict[str, Any]:
        return {"where": self.where, "pid": os.getpid(), "groups": self.groups, "samples": self.samples}

    async def close(self) -> int:
        """Release the rubric's pools; returns this actor's pid (so callers can check what is left)."""
        if self.rubric is not None:
            rubric, self.rubric = self.rubric, None
            await rubric.aclose()
        return os.getpid()
