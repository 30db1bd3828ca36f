"""Code rubric: extract a Python solution, run its tests in ONE sandbox job, judge on the host.

`CodeRubric.score(sample)` expects `sample.answer` to be a `TestSuite` (or its dict form; see
`rubrics.code.suites`). Outcomes:

* no fenced code block in the final segment (after `</think>`)   → 0, `Status.NO_ANSWER`
* the code does not compile (SyntaxError)                           → 0, `Status.INVALID`
* a hack detector hit (static scan, in-sandbox audit hook, system call filter, early exit)
                                                                    → 0, `Status.HACK`, components hack=1
* tests ran: `reward="binary"` → 1.0 iff all pass; `"fraction"` → passed/total   (`Status.OK`)
* sandbox/infrastructure failure (no records, corrupt channel, the job's own wall limit, harness
  failure, no result within the job's wall budget + `sandbox_wait_s`) → `score=None`, `ERROR`/`TIMEOUT`

Feedback (safe to show the policy, deterministic): the first failing test with its input (or call),
expected vs actual (clipped head+tail), or the error line; or "All N tests passed.". Tests are
numbered from 1 in every text (feedback and reason); `RewardResult.tests` holds one `TestRecord` per
test (index from 0): which test failed first is `result.first_failure`, never a count.
Identical completions of one group are scored once (`_score_group`); distinct ones run concurrently.
"""

from __future__ import annotations

import ast
import asyncio
import json
import re
import time
from collections.abc import Sequence
from typing import Any, Literal

from pydantic import BaseModel, Field, model_validator

from rubrics.aio import Limiter
from rubrics.code import pyparse
from rubrics.code.suites import (
    AssertTest,
    CallTest,
    DecodeError,
    Outcome,
    StdioTest,
    TestSuite,
    compare_stdout,
    decode,
    run_check,
    suite_from,
)
from rubrics.core import RewardResult, Rubric, Sample, Status, TestOutcome, TestRecord
from rubrics.text import final_segment
from sandbox.core import ExecResult, Job, LimitHit, Limits, Sandbox, default_slots
from sandbox.harness import harness_job

INLINE_CHARS = 16_000  # completions / result channels up to this size are handled on the event loop
_OPEN = re.compile(r"[ \t]{0,3}(`{3,}|~{3,})[ \t]*([^\s`]*)")
_CLOSE = re.compile(r"[ \t]{0,3}(`{3,}|~{3,})[ \t]*")
# Attribute/module names that only frame walking, heap scanning or interpreter tampering need.
_SUSPECT_ATTRS = {
    "_getframe",
    "f_back",
    "f_globals",
    "f_locals",
    "tb_frame",
    "gi_frame",
    "cr_frame",
    "_current_frames",
    "settrace",
    "setprofile",
    "get_referrers",
    "get_referents",
    "get_objects",
    "addaudithook",
}
_SUSPECT_MODULES = {"ctypes", "_ctypes"}
_SUSPECT_TEXT = re.compile("|".join(sorted(_SUSPECT_ATTRS | _SUSPECT_MODULES | {"__builtins__"})))
_VERDICT_TEXT = {
    "wrong_answer": "wrong answer",
    "runtime_error": "runtime error",
    "timeout": "time limit exceeded",
    "memory": "memory limit exceeded",
    "output_limit": "output limit exceeded",
    "invalid_value": "returned a value of a non-builtin type",
    "not_run": "not run",
}


class CodeRubricConfig(BaseModel):
    """How completions are extracted, run and rewarded. Defaults work offline."""

    reward: Literal["binary", "fraction"] = Field("binary", description="all-pass or pass fraction")
    languages: tuple[str, ...] = Field(("python", "py", "python3", ""), description="accepted fence tags")
    python: str = Field("python3", description="interpreter inside the sandbox")
    max_concurrency: int | None = Field(
        None,
        ge=1,
        description="sandbox jobs in flight per rubric (None: twice the sandbox's slots, at least 8)",
    )
    sandbox_slots: int | None = Field(
        None, description="slots of a sandbox built by name (None: its default)"
    )
    sandbox_options: dict[str, Any] = Field(
        default_factory=dict,
        description="other options of a sandbox built by name (BwrapConfig / DockerConfig fields, "
        "e.g. bwrap path, warm_pool, docker image)",
    )
    wall_factor: float = Field(
        3.0, description="per-test wall limit = time limit x this + 0.5 s (safety net)"
    )
    job_overhead_s: float = Field(10.0, description="job wall budget on top of the per-test limits")
    load_headroom: float = Field(
        4.0,
        ge=1.0,
        description="job wall budget = per-test limits x this + overhead: how much longer than on an idle "
        "machine checks may take while waiting for a CPU before the sample is unverified (the per-test "
        "verdicts use CPU time; a sleeping or spinning solution still stops at its own limit)",
    )
    sandbox_wait_s: float = Field(
        300.0,
        gt=0,
        description="longest a job may wait for a sandbox slot: with no result after its wall budget plus "
        "this, the sample is unverified (error), never a hang",
    )
    stop_on_error: bool | None = Field(
        None,
        description="stop after the first test that fails inside the sandbox (runtime error, time, memory or "
        "output limit, non-builtin value); wrong answers are judged on the host after the job, so they never "
        "stop it. Default: on for binary rewards",
    )
    feedback_chars: int = Field(600, description="clip each feedback field to this many characters")
    static_hack_scan: bool = Field(True, description="flag frame/heap/ctypes access in call/assert tests")
    max_value_bytes: int = Field(1 << 20, description="largest encoded return value of one test")

    @model_validator(mode="before")
    @classmethod
    def _renamed(cls, data: Any) -> Any:
        if isinstance(data, dict) and "stop_on_failure" in data:
            raise ValueError(
                "stop_on_failure is now stop_on_error: the sandbox stops only on errors and limits, "
                "wrong answers are judged on the host after every test ran"
            )
        return data


def extract_code(text: str, languages: Sequence[str] = ("python", "py", "python3", "")) -> str | None:
    """The last closed fenced block whose tag is in `languages` ('' = untagged), in the final segment
    (text after the last `</think>`; None if a think block is left open). None if there is none.

    Fences follow CommonMark: a block opens with 3+ backticks or tildes (plus an optional info
    string) and closes with a line of at least as many of the same character; an unclosed block
    is not an answer. One pass over the lines (no regex backtracking across the text).
    """
    final = final_segment(text)
    if final is None:
        return None
    wanted = {lang.lower() for lang in languages}
    last, fence, tag, body = None, "", "", []
    for line in final.split("\n"):
        if not fence:
            opened = _OPEN.match(line)
            if opened and (opened.group(1)[0] == "~" or "`" not in line[opened.end() :]):
                fence, tag, body = opened.group(1), opened.group(2).lower(), []
            continue
        closed = _CLOSE.fullmatch(line.rstrip())
        if closed and closed.group(1)[0] == fence[0] and len(closed.group(1)) >= len(fence):
            if tag in wanted and "".join(body).strip():
                last = "".join(body)
            fence = ""
            continue
        body.append(line + "\n")
    return last


def static_hack_scan(tree: ast.AST, source: str | None = None) -> str | None:
    """A reason if the code reaches for frames, the heap, tracing or ctypes; None otherwise.

    With `source`: ASCII source that names none of the suspect attributes/modules cannot contain
    them (non-ASCII identifiers are NFKC-normalised, so anything else gets the full AST walk)."""
    if source is not None and source.isascii() and not _SUSPECT_TEXT.search(source):
        return None
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and node.attr in _SUSPECT_ATTRS:
            return f"uses .{node.attr} (line {node.lineno})"
        if isinstance(node, ast.Import | ast.ImportFrom):
            names = [a.name for a in node.names] + ([node.module] if isinstance(node, ast.ImportFrom) else [])
            if any((n or "").split(".")[0] in _SUSPECT_MODULES for n in names):
                return f"imports ctypes (line {node.lineno})"
        if isinstance(node, ast.Name) and node.id == "__builtins__":
            return f"touches __builtins__ (line {node.lineno})"
    return None


def clip(text: str, limit: int) -> str:
    """Head and tail of `text` within about `limit` characters, saying how much was cut."""
    if len(text) <= limit:
        return text
    head, tail = limit * 2 // 3, limit // 3
    return f"{text[:head]}\n...[{len(text) - head - tail} characters omitted]...\n{text[len(text) - tail :]}"


class CodeRubric(Rubric):
    """Runs a completion's code against `sample.answer` (a TestSuite) in a sandbox (see module doc)."""

    name = "code"

    def __init__(self, sandbox: Sandbox | str = "auto", config: CodeRubricConfig | None = None) -> None:
        self.config = config or CodeRubricConfig()
        self._sandbox_spec = sandbox
        self._sandbox: Sandbox | None = sandbox if not isinstance(sandbox, str) else None
        self._owns_sandbox = isinstance(sandbox, str)
        # loop-agnostic: one rubric serves many event loops and threads at once (see rubrics.aio)
        self._limit = Limiter(self.config.max_concurrency or self._default_concurrency())
        self._creating = Limiter(1)

    def _default_concurrency(self) -> int:
        """Twice the sandbox's slots (at least 8): a slot's next job is prepared while it runs the
        current one, and a machine with many CPUs gets its whole pool used (a fixed 8 capped it)."""
        slots = self.config.sandbox_slots or getattr(getattr(self._sandbox, "config", None), "slots", None)
        return max(8, 2 * (slots if isinstance(slots, int) and slots > 0 else default_slots()))

    async def get_sandbox(self) -> Sandbox:
        """The sandbox; a named one is built on first use, off the event loop (pools start workers)."""
        if self._sandbox is None:
            async with self._creating:
                if self._sandbox is None:
                    from sandbox import get_sandbox  # lazily: only when no sandbox object was given

                    slots = self.config.sandbox_slots
                    options = {**self.config.sandbox_options, **({"slots": slots} if slots else {})}
                    self._sandbox = await asyncio.to_thread(get_sandbox, str(self._sandbox_spec), **options)
        return self._sandbox

    async def aclose(self) -> None:
        if self._owns_sandbox and self._sandbox is not None:
            sandbox, self._sandbox = self._sandbox, None
            await sandbox.close()

    async def _score(self, sample: Sample) -> RewardResult:
        return (await self._score_group([sample]))[0]

    async def _score_group(self, samples: Sequence[Sample]) -> list[RewardResult]:
        # extraction, parsing and the static scan are CPU work: off the event loop, unless the texts are
        # so small that the thread hand-off would cost more than the work (sub-millisecond)
        if sum(len(s.completion_text) for s in samples) <= INLINE_CHARS:
            prepared = [self._prepare(s) for s in samples]
        else:
            prepared = await asyncio.to_thread(lambda: [self._prepare(s) for s in samples])
        jobs: dict[tuple[str, str], tuple[str, TestSuite]] = {}
        for item in prepared:
            if isinstance(item, tuple):
                jobs.setdefault(item[0], item[1:])  # type: ignore[arg-type]
        keys = list(jobs)
        if len(keys) == 1:  # the common lone job: no task (and no extra loop iteration)
            results = [await self._guarded_run(*jobs[keys[0]])]
        else:
            results = await asyncio.gather(*(self._guarded_run(*jobs[k]) for k in keys))
        by_key = dict(zip(keys, results, strict=True))
        return [item if isinstance(item, RewardResult) else by_key[item[0]] for item in prepared]

    def _prepare(self, sample: Sample) -> RewardResult | tuple[tuple[str, str], str, TestSuite]:
        """An immediate verdict, or (dedup key, code, suite) to run."""
        try:
            suite = suite_from(sample.answer)
        except (ValueError, KeyError, TypeError) as exc:
            return RewardResult.unverified(Status.ERROR, f"bad test suite: {exc}")
        code = extract_code(sample.completion_text, self.config.languages)
        if code is None:
            return RewardResult.zero(
                Status.NO_ANSWER,
                "no fenced python block",
                feedback="No ```python code block found in the answer.",
            )
        try:
            tree = pyparse.parse(code)
        except (SyntaxError, ValueError) as exc:
            line = getattr(exc, "lineno", None)
            msg = f"SyntaxError: {getattr(exc, 'msg', exc)}" + (f" (line {line})" if line else "")
            return RewardResult.zero(Status.INVALID, msg, feedback=f"Your code does not compile. {msg}")
        except RecursionError:
            return RewardResult.zero(Status.INVALID, "code nested too deeply to parse")
        if self.config.static_hack_scan and not all(isinstance(t, StdioTest) for t in suite.tests):
            hit = static_hack_scan(tree, code)
            if hit:
                return RewardResult(
                    score=0.0,
                    status=Status.HACK,
                    components={"hack": 1.0},
                    reason=f"hack suspected (static): {hit}",
                    feedback="",
                )
        return (code, suite.fingerprint), code, suite

    async def _guarded_run(self, code: str, suite: TestSuite) -> RewardResult:
        async with self._limit:
            job = self.build_job(code, suite)
            deadline = job.limits.wall_time_s + self.config.sandbox_wait_s
            started = time.monotonic()
            try:
                sandbox = await self.get_sandbox()
                result = await asyncio.wait_for(sandbox.run(job), deadline)
            except asyncio.CancelledError:
                raise
            except TimeoutError as exc:
                if time.monotonic() - started < deadline:  # the backend's own, not our deadline
                    return RewardResult.unverified(Status.ERROR, f"sandbox failed: TimeoutError: {exc}")
                # a wedged backend: the job was cancelled, which frees its slot
                return RewardResult.unverified(
                    Status.ERROR,
                    f"sandbox gave no result in {deadline:.0f} s (the job's wall budget "
                    f"{job.limits.wall_time_s:.0f} s + sandbox_wait_s {self.config.sandbox_wait_s:g} s)",
                )
            except Exception as exc:  # noqa: BLE001 - infrastructure, never the model's fault
                return RewardResult.unverified(Status.ERROR, f"sandbox failed: {type(exc).__name__}: {exc}")
        if len(result.channel) <= INLINE_CHARS:
            return self.judge(result, suite)
        return await asyncio.to_thread(self.judge, result, suite)

    # ------------------------------------------------------------------------- job construction

    def build_job(self, code: str, suite: TestSuite) -> Job:
        """One sandbox job running every test of `suite` against `code`."""
        tests_json, stdio_bytes, calls, asserts = suite.harness_tests  # once per suite
        channel_budget = stdio_bytes + calls * (self.config.max_value_bytes + 8192) + asserts * 8192
        stop = self.config.stop_on_error
        spec = {
            "version": 1,
            "setup": suite.setup,
            "code": code,
            "entry_point": suite.entry_point,
            "time_limit_s": suite.time_limit_s,
            "wall_factor": self.config.wall_factor,
            "memory_mb": suite.memory_mb,
            "stop_on_error": self.config.reward == "binary" if stop is None else stop,
            "max_value_bytes": self.config.max_value_bytes,
        }
        per_test = suite.time_limit_s * self.config.wall_factor + 0.7
        # the harness stretches a check's wall deadline by the time it waited for a CPU (a busy
        # machine), up to this budget; a job that does not finish within it is unverified, not failed
        budget = len(suite.tests) * per_test * self.config.load_headroom + self.config.job_overhead_s
        spec["wall_budget_s"] = budget
        limits = Limits(
            wall_time_s=budget,
            cpu_time_s=budget,
            memory_mb=suite.memory_mb + 256,
            processes=64,
            output_bytes=max(1 << 20, channel_budget),
        )
        # the suite's tests, serialised once per suite, go last: `{...}` -> `{..., "tests": [...]}`
        spec_json = f'{json.dumps(spec)[:-1]}, "tests": {tests_json}}}'
        return harness_job(spec_json, limits, self.config.python)

    # ------------------------------------------------------------------------- judging

    def judge(self, result: ExecResult, suite: TestSuite) -> RewardResult:
        """Turn the job's channel records into a RewardResult (runs in a worker thread)."""
        records = _read_records(result.channel)
        if records is None or result.channel_truncated:
            return RewardResult.unverified(Status.ERROR, "corrupt or truncated result channel")
        if not records or records[0].get("type") != "hello":
            return _infra(result, "runner never started")
        done = records[-1].get("type") == "done"
        rows = [r for r in records if r.get("type") == "result"]
        if any(r.get("outcome") == "internal" for r in rows):
            bad = next(r for r in rows if r.get("outcome") == "internal")
            return RewardResult.unverified(Status.ERROR, f"harness failure: {bad.get('error')}")
        if not done:
            return _infra(result, f"runner stopped after {len(rows)} of {len(suite.tests)} tests")
        if [r.get("index") for r in rows] != list(range(len(rows))) or len(rows) > len(suite.tests):
            return RewardResult.unverified(Status.ERROR, "result records out of order")
        outcomes = [self._outcome(row, suite.tests[row["index"]], suite) for row in rows]
        outcomes += [Outcome(i, "not_run") for i in range(len(rows), len(suite.tests))]
        return self._reward(outcomes, suite)

    def _outcome(self, row: dict[str, Any], test: Any, suite: TestSuite) -> Outcome:
        index, kind = row["index"], row.get("outcome")
        if kind == "hack":
            return Outcome(index, "hack", {"why": str(row.get("hack"))[:500]})
        if kind == "invalid":
            returned = row.get("returned") if isinstance(row.get("returned"), dict) else {}
            verdict = "hack" if returned.get("rigged") else "invalid_value"
            return Outcome(index, verdict, {"why": f"returned {returned.get('type')}"})
        if kind in ("timeout", "memory"):
            return Outcome(index, kind)
        if kind == "output":
            return Outcome(index, "output_limit")
        if kind == "error":
            return Outcome(index, "runtime_error", {"error": _error_text(row.get("error"))})
        if kind != "ok":
            return Outcome(index, "runtime_error", {"error": f"unknown outcome {kind!r}"})
        if isinstance(test, StdioTest):
            ok, why = compare_stdout(str(row.get("stdout", "")), test.output, suite.float_tol)
            return Outcome(
                index, "passed" if ok else "wrong_answer", {"got": row.get("stdout", ""), "why": why}
            )
        if isinstance(test, CallTest):
            try:
                values = decode(json.loads(row.get("values", "null")))
            except (DecodeError, ValueError, RecursionError) as exc:
                return Outcome(index, "invalid_value", {"why": f"undecodable value: {exc}"})
            if not isinstance(values, list) or len(values) != len(test.calls):
                return Outcome(index, "invalid_value", {"why": "wrong number of values"})
            ok = run_check(test.check, values, test.expected)
            return Outcome(index, "passed" if ok else "wrong_answer", {"values": values})
        return Outcome(index, "passed")

    def _reward(self, outcomes: list[Outcome], suite: TestSuite) -> RewardResult:
        total = len(outcomes)
        passed = sum(o.passed for o in outcomes)
        counts: dict[str, int] = {}
        for o in outcomes:
            counts[o.verdict] = counts.get(o.verdict, 0) + 1
        summary = ", ".join(f"{k}={v}" for k, v in sorted(counts.items()))
        tests = tuple(test_record(o, suite) for o in outcomes)
        hacks = [o for o in outcomes if o.verdict == "hack"]
        if hacks:
            first = hacks[0]
            return RewardResult(
                score=0.0,
                status=Status.HACK,
                components={"hack": 1.0, "passed": float(passed), "total": float(total)},
                reason=f"hack suspected in test {first.index + 1} of {total}: {first.detail.get('why')}",
                tests=tests,
            )
        fraction = passed / total if total else 0.0
        score = fraction if self.config.reward == "fraction" else float(passed == total)
        components = {
            "pass_fraction": fraction,
            "passed": float(passed),
            "total": float(total),
            "all_passed": float(passed == total),
        }
        failing = next((o for o in outcomes if not o.passed), None)
        feedback = f"All {total} tests passed." if failing is None else self.feedback(failing, suite, total)
        return RewardResult(
            score=score,
            status=Status.OK,
            components=components,
            feedback=feedback,
            reason=f"{passed}/{total} passed ({summary})",
            tests=tests,
        )

    def feedback(self, outcome: Outcome, suite: TestSuite, total: int) -> str:
        """Deterministic text about one failing test (first failure), clipped field by field."""
        return failure_text(outcome, suite, total, self.config.feedback_chars)


def failure_text(outcome: Outcome, suite: TestSuite, total: int, n: int) -> str:
    """Deterministic text about one failing test (the rubric's feedback), each field clipped to `n` chars."""
    test = suite.tests[outcome.index]
    lines = [
        f"Test {outcome.index + 1} of {total} failed: {_VERDICT_TEXT.get(outcome.verdict, outcome.verdict)}."  # noqa: E501
    ]
    if outcome.verdict == "timeout":
        lines[0] = lines[0][:-1] + f" ({suite.time_limit_s:g} s)."
    if outcome.verdict == "memory":
        lines[0] = lines[0][:-1] + f" ({suite.memory_mb} MB)."
    if isinstance(test, StdioTest):
        lines += ["Input:", clip(test.input, n)]
        if outcome.verdict == "wrong_answer":
            lines += [
                "Expected output:",
                clip(test.output, n),
                "Your output:",
                clip(str(outcome.detail["got"]), n),
            ]
            if outcome.detail.get("why"):
                lines.append(f"({outcome.detail['why']})")
    elif isinstance(test, CallTest):
        lines.append(f"Test: {clip(test.source or ' ; '.join(test.calls), n)}")
        if outcome.verdict == "wrong_answer":
            if "expected" in test.check and test.expected is not None:
                lines.append(f"Expected: {clip(repr(test.expected), n)}")
            got = outcome.detail.get("values", [])
            shown = repr(got[0]) if len(got) == 1 else ", ".join(f"v{i}={v!r}" for i, v in enumerate(got))
            lines.append(f"Got: {clip(shown, n)}")
    elif isinstance(test, AssertTest):
        lines.append(f"Test: {clip(test.source or test.code, n)}")
    if outcome.verdict in ("runtime_error", "invalid_value") and outcome.detail:
        lines.append(clip(str(outcome.detail.get("error") or outcome.detail.get("why")), n))
    return "\n".join(lines)


_RECORD_OUTCOME: dict[str, TestOutcome] = {
    "passed": "passed",
    "wrong_answer": "failed",
    "invalid_value": "failed",
    "output_limit": "failed",
    "runtime_error": "error",
    "memory": "error",
    "hack": "error",
    "timeout": "timeout",
    "not_run": "not_run",
}


def test_record(outcome: Outcome, suite: TestSuite) -> TestRecord:
    """The typed per-test record of one host-side verdict (no expected values in `detail`)."""
    test = suite.tests[outcome.index]
    kind = "stdio" if isinstance(test, StdioTest) else "call" if isinstance(test, CallTest) else "assert"
    detail = _VERDICT_TEXT.get(outcome.verdict, outcome.verdict.replace("_", " "))
    why = outcome.detail.get("error") or (
        outcome.detail.get("why") if outcome.verdict != "wrong_answer" else ""
    )
    if why:
        detail = f"{detail}: {str(why)[:200]}"
    return TestRecord(outcome.index, kind, _RECORD_OUTCOME.get(outcome.verdict, "error"), detail)


_decode_json = json.JSONDecoder().decode  # str in: no encoding sniffing per record


def _read_records(data: bytes) -> list[dict[str, Any]] | None:
    """The channel's `len(4) + JSON` records; None if any is cut short or is not a JSON object."""
    out, pos, end = [], 0, len(data)
    view = memoryview(data)
    while pos < end:
        if pos + 4 > end:
            return None
        size = int.from_bytes(view[pos : pos + 4], "big")
        pos += 4
        if pos + size > end:
            return None
        try:
            record = _decode_json(str(view[pos : pos + size], "utf-8"))
        except (ValueError, RecursionError):
            return None
        if not isinstance(record, dict):
            return None
        out.append(record)
        pos += size
    return out


def _infra(result: ExecResult, what: str) -> RewardResult:
    tail = result.stderr[-300:].decode(errors="replace").strip()
    detail = f"{what} (exit {result.exit_code}, signal {result.signal}, limit {result.limit_hit.value})"
    if tail:
        detail += f": {tail}"
    if result.limit_hit in (LimitHit.WALL_TIME, LimitHit.CPU_TIME):
        return RewardResult.unverified(Status.TIMEOUT, detail)
    return RewardResult.unverified(Status.ERROR, detail)


def _error_text(error: Any) -> str:
    if isinstance(error, dict):
        text = f"{error.get('type', 'Error')}: {error.get('message', '')}".rstrip(": ")
        if error.get("line") and error.get("where") == "solution":
            text += f" (line {error['line']} of your code)"
        return text
    return str(error)
