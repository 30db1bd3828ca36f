"""The reward contract shared by every rubric, environment and trainer adapter.

* `Sample` is what an environment hands to a rubric: the prompt the policy saw, its completion, the
  gold (`answer`: an answer string, a test suite, a reference) and free `info` metadata.
* `RewardResult` is what comes back. Rewards are tri-state: a verified score (`ok`, or a verified
  failure such as `no_answer`), or *could not verify* (`score is None`, e.g. `timeout`, `error`).
  Unverified results must never be turned into a number by callers; environments keep them out of
  training groups and count them.
* `Rubric.score` is async and never raises for anything the model wrote: exceptions inside a rubric
  become an `error` result with a reason. CPU-heavy work belongs in worker processes/threads, never
  on the event loop thread.
* `TestRecord`: what one test did (rubrics that run tests: the code rubric), in `RewardResult.tests`,
  so that a caller can ask which test failed first (`first_failure`) instead of guessing from counts.
* `RewardResult.seen`: what the rubric read, for a person judging the reward (math: the extracted
  `answer`; judge: the judge's `reply`), short named texts; display only (not compared, not scored).
* `WeightedRubric` combines named rubrics with weights and per-component clipping.
"""

from __future__ import annotations

import asyncio
import logging
import re
import unicodedata
from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from enum import Enum
from typing import Any, Literal

from rubrics.text import final_segment

log = logging.getLogger(__name__)

Message = Mapping[str, Any]


class Status(str, Enum):
    """Why a result has the score it has. The first group is verified, the second is not."""

    OK = "ok"  # verified: the score says how good the completion is
    NO_ANSWER = "no_answer"  # verified: the completion holds no gradable answer (scores 0)
    INVALID = "invalid"  # verified: the answer could not be parsed / compiled (scores 0)
    HACK = "hack"  # verified: the completion tried to game the reward (scores 0, flagged)
    TIMEOUT = "timeout"  # unverified: the check ran out of time
    ERROR = "error"  # unverified: infrastructure failure (sandbox crash, judge outage, bug)

    @property
    def verified(self) -> bool:
        return self not in _UNVERIFIED


_UNVERIFIED = frozenset({Status.TIMEOUT, Status.ERROR})


@dataclass(frozen=True)
class Sample:
    """One completion to be scored. `completion` is text, or the assistant/tool messages."""

    prompt: Sequence[Message] | str
    completion: str | Sequence[Message]
    answer: Any = None
    info: Mapping[str, Any] = field(default_factory=dict)

    @property
    def completion_text(self) -> str:
        """The text to grade: the completion itself, or the content of its last assistant message."""
        if isinstance(self.completion, str):
            return self.completion
        for message in reversed(self.completion):
            if message.get("role") == "assistant":
                return str(message.get("content") or "")
        return ""


TestOutcome = Literal["passed", "failed", "error", "timeout", "not_run"]


@dataclass(frozen=True)
class TestRecord:
    """What one test of a suite did. `index` counts from 0 in the suite's order; `kind` is the test's
    format (code: stdio, call, assert); `outcome`: passed, failed (ran and gave a wrong result),
    error (crashed, hit the memory or output limit, or a hack), timeout, not_run (the run stopped
    before it); `detail`: the verdict in a few words (no expected values)."""

    __test__ = False  # not a pytest class

    index: int
    kind: str
    outcome: TestOutcome
    detail: str = ""

    @property
    def passed(self) -> bool:
        return self.outcome == "passed"

    def to_dict(self) -> dict[str, Any]:
        return {"index": self.index, "kind": self.kind, "outcome": self.outcome, "detail": self.detail}


@dataclass(frozen=True)
class RewardResult:
    """A rubric's verdict. Invariant: `score is None` exactly when `status` is unverified.
    `tests`: one record per test, in order, where the rubric ran tests (else empty).
    `seen`: named short texts of what the rubric read (math `answer`, judge `reply`; else empty);
    for display only: two results that differ only in `seen` compare equal."""

    score: float | None
    status: Status = Status.OK
    components: Mapping[str, float] = field(default_factory=dict)
    feedback: str = ""  # safe to show the policy (e.g. the first failing test)
    reason: str = ""  # for logs and metrics, not for the policy
    tests: tuple[TestRecord, ...] = ()
    seen: Mapping[str, str] = field(default_factory=dict, compare=False)

    def __post_init__(self) -> None:
        status = Status(self.status)
        object.__setattr__(self, "status", status)
        if status.verified and self.score is None:
            raise ValueError(f"a verified result ({status.value}) needs a score")
        if not status.verified and self.score is not None:
            raise ValueError(f"an unverified result ({status.value}) must have score=None")

    @property
    def verified(self) -> bool:
        return self.score is not None

    @property
    def first_failure(self) -> int | None:
        """Index of the first test that did not pass, or None (all passed, or no per-test records)."""
        return next((t.index for t in self.tests if not t.passed), None)

    def test_passed(self, index: int) -> bool | None:
        """Whether test `index` passed; None when it did not run or there is no record of it."""
        record = next((t for t in self.tests if t.index == index), None)
        return None if record is None or record.outcome == "not_run" else record.passed

    @classmethod
    def unverified(cls, status: Status, reason: str) -> RewardResult:
        return cls(score=None, status=status, reason=reason)

    @classmethod
    def zero(cls, status: Status, reason: str, feedback: str = "") -> RewardResult:
        return cls(score=0.0, status=status, reason=reason, feedback=feedback)

    def to_dict(self) -> dict[str, Any]:
        return {
            "score": self.score,
            "status": self.status.value,
            "components": dict(self.components),
            "feedback": self.feedback,
            "reason": self.reason,
            **({"tests": [t.to_dict() for t in self.tests]} if self.tests else {}),
            **({"seen": dict(self.seen)} if self.seen else {}),
        }


class Rubric(ABC):
    """Turns a `Sample` into a `RewardResult`.

    Subclasses implement `_score` (and may override `_score_group` to batch or de-duplicate work).
    The public `score`/`score_group` guard every call: an exception becomes `Status.ERROR` with the
    exception as reason, so one bad completion never loses a group.
    """

    name: str = "rubric"
    # True when the same sample always gets the same verified result, so a verified result may be
    # cached and shared (the reward server does). Conservative default: not cached.
    deterministic: bool = False

    @abstractmethod
    async def _score(self, sample: Sample) -> RewardResult: ...

    async def _score_group(self, samples: Sequence[Sample]) -> list[RewardResult]:
        if len(samples) == 1:  # no task (and no extra loop iteration) for the common lone sample
            return [await self.score(samples[0])]
        return list(await asyncio.gather(*(self.score(s) for s in samples)))

    async def score(self, sample: Sample) -> RewardResult:
        try:
            return await self._score(sample)
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # noqa: BLE001 - the contract is "never raises"
            log.exception("rubric %s failed", self.name)
            return RewardResult.unverified(Status.ERROR, f"{self.name}: {type(exc).__name__}: {exc}")

    async def score_group(self, samples: Sequence[Sample]) -> list[RewardResult]:
        try:
            results = await self._score_group(samples)
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # noqa: BLE001
            log.exception("rubric %s failed on a group", self.name)
            reason = f"{self.name}: {type(exc).__name__}: {exc}"
            return [RewardResult.unverified(Status.ERROR, reason) for _ in samples]
        if len(results) != len(samples):
            reason = f"{self.name} returned {len(results)} results for {len(samples)} samples"
            return [RewardResult.unverified(Status.ERROR, reason) for _ in samples]
        return results

    async def warm_up(self) -> None:
        """Start pools/workers now rather than on the first call (servers call it before ready)."""

    async def unavailable(self) -> str | None:
        """None when the rubric can score now; else one line naming what it depends on that is down
        (e.g. its judge endpoint) and how to fix it. Start-up checks and the reward server's
        `/readyz` ask this; a rubric with nothing remote keeps the default (None)."""
        return None

    async def aclose(self) -> None:
        """Release pools/clients. Safe to call more than once."""

    async def __aenter__(self) -> Rubric:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()


@dataclass(frozen=True)
class Component:
    """One weighted part of a `WeightedRubric`. Its score is clipped to [low, high] before weighting."""

    rubric: Rubric
    weight: float = 1.0
    low: float = float("-inf")
    high: float = float("inf")


class WeightedRubric(Rubric):
    """`score = Σ weight_i · clip(score_i)`, with every part's clipped score kept under its name.

    If any part could not verify, the combined result is unverified too (naming that part): a
    partial sum would silently reward or punish an infrastructure failure. The status of a
    verified combination is the first non-OK status among the parts (e.g. `no_answer`), else OK.
    """

    name = "weighted"

    def __init__(self, parts: Mapping[str, Component | Rubric]) -> None:
        if not parts:
            raise ValueError("WeightedRubric needs at least one part")
        self.parts = {k: v if isinstance(v, Component) else Component(v) for k, v in parts.items()}
        for key, comp in self.parts.items():
            if comp.low > comp.high:
                raise ValueError(f"component {key!r}: low {comp.low} > high {comp.high}")
        self.deterministic = all(c.rubric.deterministic for c in self.parts.values())

    async def _score(self, sample: Sample) -> RewardResult:
        return (await self._score_group([sample]))[0]

    async def _score_group(self, samples: Sequence[Sample]) -> list[RewardResult]:
        per_part = await asyncio.gather(*(c.rubric.score_group(samples) for c in self.parts.values()))
        by_name = dict(zip(self.parts, per_part, strict=True))
        return [self._combine({k: v[i] for k, v in by_name.items()}) for i in range(len(samples))]

    def _combine(self, results: Mapping[str, RewardResult]) -> RewardResult:
        for key, res in results.items():
            if not res.verified:
                return RewardResult.unverified(res.status, f"{key}: {res.reason}")
        total, components = 0.0, {}
        for key, res in results.items():
            comp = self.parts[key]
            clipped = min(max(float(res.score), comp.low), comp.high)  # type: ignore[arg-type]
            components[key] = clipped
            for sub, value in res.components.items():
                components[f"{key}.{sub}"] = value
            total += comp.weight * clipped
        seen = {f"{key}.{name}": text for key, res in results.items() for name, text in res.seen.items()}
        status = next((r.status for r in results.values() if r.status is not Status.OK), Status.OK)
        return RewardResult(
            score=total,
            status=status,
            components=components,
            feedback="\n".join(r.feedback for r in results.values() if r.feedback),
            reason="; ".join(f"{k}: {r.reason}" for k, r in results.items() if r.reason),
            seen=seen,
        )

    async def warm_up(self) -> None:
        await asyncio.gather(*(c.rubric.warm_up() for c in self.parts.values()))

    async def unavailable(self) -> str | None:
        problems = await asyncio.gather(*(c.rubric.unavailable() for c in self.parts.values()))
        return "; ".join(f"{name}: {p}" for name, p in zip(self.parts, problems, strict=True) if p) or None

    async def aclose(self) -> None:
        await asyncio.gather(*(c.rubric.aclose() for c in self.parts.values()))


def normalize_text(text: str) -> str:
    """Unicode NFKC, casefold, collapse whitespace, drop surrounding punctuation/quotes."""
    text = unicodedata.normalize("NFKC", text).casefold()
    text = re.sub(r"\s+", " ", text).strip()
    return text.strip(" .,;:!\"'`")


_ANSWER_TAG = re.compile(r"<answer>(.*?)</answer>", re.DOTALL | re.IGNORECASE)


class ExactMatchRubric(Rubric):
    """1.0 when the final answer equals the gold after `normalize_text`, else 0.0.

    The final answer is the text after the last `</think>` (an unclosed think block has none); if
    it contains `<answer>…</answer>` tags, the last tag's content. Golds may be a string or a list
    of accepted strings.
    """

    name = "exact_match"
    deterministic = True

    async def _score(self, sample: Sample) -> RewardResult:
        final = final_segment(sample.completion_text)
        if final is None:
            return RewardResult.zero(Status.NO_ANSWER, "unclosed <think> block")
        tags = _ANSWER_TAG.findall(final)
        answer = normalize_text(tags[-1] if tags else final)
        if not answer:
            return RewardResult.zero(Status.NO_ANSWER, "empty answer")
        golds = sample.answer if isinstance(sample.answer, list | tuple) else [sample.answer]
        if any(g is None for g in golds):
            return RewardResult.unverified(Status.ERROR, "sample has no gold answer")
        hit = any(answer == normalize_text(str(g)) for g in golds)
        return RewardResult(score=1.0 if hit else 0.0, reason="match" if hit else "mismatch")
