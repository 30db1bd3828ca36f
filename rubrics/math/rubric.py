"""`MathRubric`: verdicts from `rubrics.math.verify` as tri-state `RewardResult`s.

* correct → 1.0 (`ok`); wrong → 0.0 (`ok`, reason `mismatch`); no answer → 0.0 (`no_answer`);
  unparseable or past the complexity guards → 0.0 (`invalid`, reason `parse_error`/`too_complex`);
  past the CAS budget (`MathPolicy.cas_timeout_s` of CPU time) → `score=None` (`timeout`); dead
  worker or broken gold → `score=None` (`error`).
* Optional format component (`format_weight`): 1.0 when the answer sat in `\\boxed{}`, kept under
  `components["format"]`; the score is `correct + format_weight · format` for verified results.
* Small checks (texts up to `INLINE_CHARS`) run on the event loop: the cheap, CAS-free part inline
  (a few hundred microseconds at most, less than a thread hand-off and its GIL contention), and a
  check that needs the CAS awaits its job with `CasPool.arun` (no thread): the check is the
  generator `verify_steps`, which yields its CAS jobs and resumes with their answers (the same
  verdict as the blocking check, nothing parsed twice). Longer texts run the blocking check in a
  worker thread (`asyncio.to_thread`). The loop never blocks on the CAS; `aclose()` stops the pool
  this rubric created.
* The gold side of inline checks (its answers, normalised forms and parse: `verifier.Gold`) is
  kept in a bounded LRU per rubric (`GOLD_CACHE` golds), so the samples of a group, which share
  their gold, parse it once. Completions are parsed for every check; verdicts are never kept here.
* `sample.answer` may be one gold or a list of accepted golds (any match counts);
  `sample.info["math_policy"]` (a dict of `MathPolicy` fields) overrides the policy per item.
"""

from __future__ import annotations

import asyncio
import functools
import threading
from collections import Counter
from collections.abc import Generator, Mapping, Sequence
from dataclasses import replace

from rubrics.core import RewardResult, Rubric, Sample, Status
from rubrics.math.policy import DEFAULT_POLICY, MathPolicy
from rubrics.math.pool import CasPool, Outcome
from rubrics.math.verifier import CasJob, Verdict, prepare_gold, verify, verify_steps

_BOXED_RULES = {"boxed", "letter"}
INLINE_CHARS = 2_000
GOLD_CACHE = 1024  # prepared golds kept per rubric (LRU), each of at most INLINE_CHARS characters


async def averify(response: str, gold: str, policy: MathPolicy, pool: CasPool) -> Verdict:
    """`verify` on the event loop: the CAS-free part inline, each CAS job awaited with `pool.arun`
    (no thread); the CAS requests of one check share one deadline, from the first, as in `verify`."""
    steps = verify_steps(response, prepare_gold(gold, policy))
    try:
        job = next(steps)
    except StopIteration as done:
        return done.value
    return await _finish(steps, job, pool)


async def _finish(steps: Generator[CasJob, Outcome, Verdict], job: CasJob, pool: CasPool) -> Verdict:
    """Run a started `verify_steps` to its verdict: its pending CAS `job`, then any further ones."""
    try:
        while True:
            job = steps.send(await pool.arun(*job))
    except StopIteration as done:
        return done.value


def best_verdict(response: str, golds: Sequence[str], policy: MathPolicy, pool: CasPool | None) -> Verdict:
    """The first correct verdict over the accepted golds, else the most informative failure."""
    verdicts = []
    for gold in golds:
        v = verify(response, gold, policy, pool)
        if v.correct:
            return v
        verdicts.append(v)
    return _most_informative(verdicts)


def _most_informative(verdicts: Sequence[Verdict]) -> Verdict:
    for reason in ("timeout", "error"):
        hit = next((v for v in verdicts if v.reason == reason), None)
        if hit is not None:
            return hit
    return verdicts[0]


class MathRubric(Rubric):
    """Math correctness (+ optional `\\boxed{}` format component); see module docstring."""

    name = "math"
    deterministic = True

    def __init__(
        self,
        policy: MathPolicy = DEFAULT_POLICY,
        *,
        workers: int = 2,
        format_weight: float = 0.0,
        pool: CasPool | None = None,
    ) -> None:
        self.policy = policy
        self.format_weight = format_weight
        self._own_pool = pool is None
        self._pool = pool
        self._workers = workers
        self.counts: Counter[str] = Counter()
        self._lock = threading.Lock()
        # the gold side of a check (parsed once per gold and policy, then reused for every completion
        # scored against it, e.g. a group's samples); never a completion's parse or a verdict
        self._gold = functools.lru_cache(maxsize=GOLD_CACHE)(prepare_gold)

    @property
    def pool(self) -> CasPool:
        """The rubric's pool, started on first use (blocking: call it off the event loop)."""
        with self._lock:
            if self._pool is None or not self._pool.usable:
                self._pool = CasPool(workers=self._workers)
                self._own_pool = True
            return self._pool

    async def warm_up(self) -> None:
        """Start the CAS worker pool now (a server does this before it reports ready)."""
        await asyncio.to_thread(lambda: self.pool)

    def check(self, response: str, golds: list[str], policy: MathPolicy) -> Verdict:
        """Blocking check (runs in a worker thread)."""
        return best_verdict(response, golds, policy, self.pool)

    async def _score(self, sample: Sample) -> RewardResult:
        golds = sample.answer if isinstance(sample.answer, list | tuple) else [sample.answer]
        if not golds or any(g is None or not str(g).strip() for g in golds):
            return RewardResult.unverified(Status.ERROR, "sample has no gold answer")
        policy = self.policy
        overrides = sample.info.get("math_policy") if isinstance(sample.info, Mapping) else None
        if overrides:
            policy = replace(policy, **dict(overrides))
        texts = [str(g) for g in golds]
        response = sample.completion_text
        if len(response) + sum(map(len, texts)) <= INLINE_CHARS:
            verdict = await self._inline(response, texts, policy)
        else:
            verdict = await asyncio.to_thread(self.check, response, texts, policy)
        self.counts[verdict.reason] += 1
        return self.result(verdict)

    async def _inline(self, response: str, texts: list[str], policy: MathPolicy) -> Verdict:
        """`best_verdict` on the event loop, with each gold's `Gold` from the rubric's bounded cache."""
        verdicts = []
        for text in texts:
            steps = verify_steps(response, self._gold(text, policy))
            try:  # the CAS-free part: most checks end here, with no pool start and no await
                job = next(steps)
            except StopIteration as done:
                verdict = done.value
            else:
                verdict = await _finish(steps, job, await self._started_pool())
            if verdict.correct:
                return verdict
            verdicts.append(verdict)
        return _most_informative(verdicts)

    async def _started_pool(self) -> CasPool:
        if self._pool is not None and self._pool.usable:
            return self._pool
        return await asyncio.to_thread(lambda: self.pool)  # starting it blocks: off the loop

    def result(self, v: Verdict) -> RewardResult:
        """The reward for a verdict; `seen` holds the extracted answer (cut to 500 characters) and the
        rule that found it, when there is one."""
        detail = f"{v.reason}: {v.detail}" if v.detail else v.reason
        seen = {"answer": v.answer[:500], "rule": v.how} if v.answer is not None else {}
        if v.reason == "timeout":
            return RewardResult(score=None, status=Status.TIMEOUT, reason=detail, seen=seen)
        if v.reason == "error":
            return RewardResult(score=None, status=Status.ERROR, reason=detail, seen=seen)
        if v.reason == "no_answer":
            return RewardResult.zero(
                Status.NO_ANSWER, detail, feedback="No final answer found (use \\boxed{})."
            )
        fmt = 1.0 if v.how in _BOXED_RULES else 0.0
        components = {"correct": 1.0 if v.correct else 0.0}
        if self.format_weight:
            components["format"] = fmt
        score = components["correct"] + self.format_weight * fmt
        status = Status.INVALID if v.reason in ("parse_error", "too_complex") else Status.OK
        return RewardResult(score=score, status=status, components=components, reason=detail, seen=seen)

    async def aclose(self) -> None:
        if self._own_pool and self._pool is not None:
            pool, self._pool = self._pool, None
            await asyncio.to_thread(pool.close)
