"""`verify(response, gold)` → `Verdict` (answer, verdict, reason), and the plain `check_answer`.

Cheapest first: normalised string → exact rationals → structured comparison without a CAS → the
CAS worker pool under a hard deadline. Reasons: match_string, match_exact, match_structured,
match_cas, mismatch, no_answer, parse_error, too_complex, timeout (and error for a broken gold or
a dead worker). Deterministic: the same inputs give the same verdict in any thread or process.
`verify_steps` is the same check as a generator that yields its CAS jobs (for an event loop), and
`Gold` / `prepare_gold` the gold side of a check, which a caller may keep and reuse.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Generator
from dataclasses import dataclass

from rubrics.math.choice import extract_letter, gold_letter, gold_option_text, option_text
from rubrics.math.compare import compare
from rubrics.math.extract import extract, gold_answers
from rubrics.math.normalize import normalize
from rubrics.math.numeric import cheap_numbers
from rubrics.math.policy import DEFAULT_POLICY, MathPolicy, rules_of
from rubrics.math.pool import CasPool, Outcome, default_pool
from rubrics.math.structure import UNDEFINED, Leaf, NeedCAS, Node, TooComplex, _group, parse_answer
from rubrics.math.units import reconcile, split_quantity

REASONS = (
    "match_string",
    "match_exact",
    "match_structured",
    "match_cas",
    "mismatch",
    "no_answer",
    "parse_error",
    "too_complex",
    "timeout",
    "error",
)
COUNTERS: Counter[str] = Counter()  # reason -> count, for metrics


@dataclass(frozen=True)
class Verdict:
    correct: bool
    reason: str
    answer: str | None = None  # the extracted prediction (joined with " | " when several)
    detail: str = ""
    how: str = ""  # which extraction rule found the answer ("boxed", "anchor", ...)

    @property
    def verified(self) -> bool:
        """False when the check could not complete (timeout or error): not a real zero."""
        return self.reason not in ("timeout", "error")


def _done(v: Verdict) -> Verdict:
    COUNTERS[v.reason] += 1
    return v


class Gold:
    """The gold side of a check: its answers and option letter at once; its unit-free and normalised
    forms and its parsed structure on first use (a check needs them only once it has an answer to
    compare), then kept. A pure function of `(text, policy)`, never of a completion: a rubric may
    keep one per gold and reuse it for every completion scored against that gold."""

    __slots__ = ("_forms", "_node", "answers", "letter", "option", "policy", "text")

    def __init__(self, text: str, policy: MathPolicy) -> None:
        self.text, self.policy = text, policy
        self.answers = gold_answers(text)
        self.letter = gold_letter(self.answers[0]) if len(self.answers) == 1 else None
        self.option = gold_option_text(self.answers[0]) if self.letter is not None else None
        self._forms: tuple[tuple[str, ...], tuple[str, ...]] | None = None
        self._node: Node | TooComplex | None = None

    @property
    def raw(self) -> tuple[str, ...]:
        """The answers without their units (`split_quantity`)."""
        return self._forms_()[0]

    @property
    def norm(self) -> tuple[str, ...]:
        """`raw`, normalised under the policy."""
        return self._forms_()[1]

    def _forms_(self) -> tuple[tuple[str, ...], tuple[str, ...]]:
        if self._forms is None:
            raw = tuple(split_quantity(g)[0] for g in self.answers)
            self._forms = raw, tuple(normalize(g, self.policy) for g in raw)
        return self._forms

    def node(self) -> Node:
        """The parsed structure of `norm`; raises `TooComplex` (every time) or `RecursionError`
        (not kept: it depends on the caller's stack) as parsing did."""
        if self._node is None:
            try:
                self._node = _group([parse_answer(g) for g in self.norm], flatten=True)
            except TooComplex as exc:
                self._node = exc
        if isinstance(self._node, TooComplex):
            raise self._node.with_traceback(None)
        return self._node


def prepare_gold(gold: object, policy: MathPolicy = DEFAULT_POLICY) -> Gold:
    """The `Gold` of a gold answer (any object: its `str`; None is the empty gold)."""
    return Gold("" if gold is None else str(gold), policy)


CasJob = tuple[object, float]  # (payload for the CAS worker, CPU seconds left of the check's budget)


def verify(
    response: str, gold: str, policy: MathPolicy = DEFAULT_POLICY, pool: CasPool | None = None
) -> Verdict:
    """Grade one completion (or bare answer) against one gold answer. Never raises for model output.

    The CAS part of the call (retries included) shares one budget, `policy.cas_timeout_s` CPU
    seconds on the CAS worker (waiting for a free worker is not part of it, nor is a loaded
    machine's slowness); past it the verdict is `timeout` (unverified), never a zero. (Starting the
    process-wide pool on the very first CAS request is a one-time cost outside that budget.)
    """
    steps = verify_steps(response, prepare_gold(gold, policy))
    try:
        job = next(steps)
        pool = pool or default_pool()
        while True:
            job = steps.send(pool.run(*job))
    except StopIteration as done:
        return done.value


def verify_steps(response: str, gold: Gold) -> Generator[CasJob, Outcome, Verdict]:
    """`verify` as a generator: yields each CAS job it needs (payload, timeout), is sent the job's
    `Outcome`, and returns the verdict. A check that needs no CAS returns at the first `next`, so a
    caller on an event loop runs the cheap part inline and awaits only the CAS jobs (no re-parse)."""
    policy = gold.policy
    response = "" if response is None else str(response)
    golds = gold.answers
    if not any(g.strip() for g in golds):
        return _done(Verdict(False, "error", detail="empty gold"))
    if gold.letter is not None:
        got = extract_letter(response)
        if got is None and gold.option is not None:  # gold `(D) 40`: the option's text answers too
            return (yield from verify_steps(response, prepare_gold(gold.option, policy)))
        if got is None:
            return _done(Verdict(False, "no_answer", detail="no single option letter"))
        letter = gold.letter
        return _done(
            Verdict(got == letter, "match_string" if got == letter else "mismatch", got, how="letter")
        )
    ext = extract(response, fallback=policy.prose_fallback, max_chars=policy.max_chars)
    if ext.answers is None:
        return _done(Verdict(False, "no_answer", detail=ext.how))
    shown = " | ".join(ext.answers)[:500]
    how = ext.how
    answers = tuple(option_text(a) for a in ext.answers)  # `(D) \frac25` answers gold 2/5
    p_raw, g_raw = [split_quantity(a)[0] for a in answers], gold.raw
    if len(answers) == 1 and len(golds) == 1:
        converted = reconcile(answers[0], golds[0], convert=policy.units == "convert")
        if converted is None:
            return _done(Verdict(False, "mismatch", shown, "different units", how))
        p_raw, g_raw = [converted[0]], (converted[1],)
    p_norm = [normalize(a, policy) for a in p_raw]
    g_norm = gold.norm if g_raw == gold.raw else tuple(normalize(g, policy) for g in g_raw)
    if len(p_norm) == 1 and len(g_norm) == 1:  # new sequences: `gold`'s own are shared
        p_norm, g_norm = [_decimal_comma(p_norm[0], g_norm[0])], (_decimal_comma(g_norm[0], p_norm[0]),)
    if sorted(set(p_norm)) == sorted(set(g_norm)) and all(p_norm) and not any(map(UNDEFINED.search, g_norm)):
        return _done(Verdict(True, "match_string", shown, how=how))
    if any(len(a) > policy.max_answer_chars for a in (*p_norm, *g_norm)):
        return _done(Verdict(False, "too_complex", shown, "answer too long", how))
    try:
        pred_node = _group([parse_answer(a) for a in p_norm], flatten=True)
        same = g_norm == gold.norm  # no unit conversion, no decimal comma: the gold's own parse
        gold_node = gold.node() if same else _group([parse_answer(g) for g in g_norm], flatten=True)
    except (TooComplex, RecursionError) as exc:
        return _done(Verdict(False, "too_complex", shown, str(exc), how))
    used_numbers = []

    def cheap_leaf(p: str, g: str, kind: str) -> bool:
        if kind != "value":
            raise NeedCAS
        quick = cheap_numbers(p, g, policy)
        if quick is not None:
            used_numbers.append(quick)
            return quick
        if _is_bare_symbol(p) != _is_bare_symbol(g) and (_is_number(p) or _is_number(g)):
            return False
        raise NeedCAS

    try:
        ok = compare(pred_node, gold_node, cheap_leaf, rules_of(policy))
    except NeedCAS:
        ok = None
    except (TooComplex, RecursionError) as exc:
        return _done(Verdict(False, "too_complex", shown, str(exc), how))
    if ok is not None:
        if not ok:
            return _done(Verdict(False, "mismatch", shown, how=how))
        simple = isinstance(pred_node, Leaf) and isinstance(gold_node, Leaf)
        return _done(Verdict(True, "match_exact" if simple else "match_structured", shown, how=how))
    budget = policy.cas_timeout_s  # CPU seconds on the CAS worker, shared by this check's jobs
    outcome = yield (pred_node, gold_node, policy), budget
    if outcome.status == "timeout":
        return _done(Verdict(False, "timeout", shown, outcome.detail, how))
    if outcome.status != "ok":
        return _done(Verdict(False, "error", shown, outcome.detail, how))
    correct, reason = outcome.value
    if not correct and policy.degrees == "radians" and len(g_norm) == 1 and _DEGREES.search(gold.text):
        radians = Leaf(f"\\frac{{({g_norm[0].rstrip('%')})\\pi}}{{180}}")
        again = yield (pred_node, radians, policy), max(budget - outcome.cpu_s, 0.0)
        if again.status == "ok" and again.value[0]:
            return _done(Verdict(True, "match_cas", shown, "degrees read as radians", how))
    return _done(Verdict(bool(correct), reason, shown, how=how))


_COMMA_DECIMAL = re.compile(r"(-?\d+),(\d{1,2}|\d{4,})(%?)")
_POINT_DECIMAL = re.compile(r"-?\d+\.\d+%?")


_INDIAN = re.compile(r"-?\d{1,2}(?:,\d{2})+,\d{3}")


def _decimal_comma(text: str, other: str) -> str:
    """`3,75` against the single decimal `3.75` is a decimal comma, and `12,34,567` against one
    integer is lakh grouping: no list of answers can equal one number, and a comma followed by
    exactly three digits (an English thousands group) is never read as a decimal point."""
    m = _COMMA_DECIMAL.fullmatch(text)
    if m and _POINT_DECIMAL.fullmatch(other):
        return f"{m.group(1)}.{m.group(2)}{m.group(3)}"
    if _INDIAN.fullmatch(text) and re.fullmatch(r"-?\d+", other):
        return text.replace(",", "")
    return text


_DEGREES = re.compile(r"\\circ|°|degree")


def _is_bare_symbol(s: str) -> bool:
    return bool(re.fullmatch(r"\s*[A-Za-z]\s*", s))


def _is_number(s: str) -> bool:
    return bool(re.fullmatch(r"\s*-?\d+(?:\.\d+)?\s*", s))


def check_answer(response: str, gold: str) -> bool:
    """True when `response` (a whole completion or a bare answer) answers `gold` (default policy)."""
    return verify(response, gold).correct
