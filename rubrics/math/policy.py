r"""Grading policies, one paragraph per class of real-output shape, and the options where projects disagree.

Every option below changes verdicts only on inputs where RL pipelines genuinely disagree (the
`ambiguous` cases of the benchmark). The defaults are the conservative reward-mode choices; where
a stricter reading exists it is named in the option's docstring.

Fixed rules (no switch: every reading but one pays wrong answers):

* Which text: only what follows the last closed reasoning block (`<think>`, `<thinking>`,
  `<reasoning>`, `<reflection>`, `<|begin_of_thought|>`, …); an unclosed block means no answer.
  Boxes inside code, block quotes, quotations or a restated problem/instruction paragraph are not
  answers (`rubrics.math.regions`). `<answer>` tags and boxes outside them are all commitments:
  they must agree.
* Languages: answer anchors, hedges ("oder", "или", "たぶん", "या", …) and negations are read in
  en/zh/fr/es/de/pt/it/ru/ja/ko/hi/tr/vi/id/ar; a hedged statement has no answer.
* Negation: a candidate in a negated clause (`not \boxed{8}`, `cannot be 8`, `不是 8`, `no es 8`,
  `n'est pas 8`, `ist nicht 8`, `не 8`) or retracted after it (`\boxed{8} is wrong`) is no answer;
  `8, not 9` commits to 8; a candidate introduced as superseded (`at first I got 8`) yields to a
  later one.
* Several forms of one answer (`\boxed{30}` … `\boxed{30.0}`, `\frac34` = `0.75`): every boxed
  form must equal the gold; one that differs voids the answer (a hedge).
* Units: both sides naming units of different dimensions (`m` vs `m^3`, `hours` vs `kg`) is a
  mismatch; same dimension converts exactly (see `units`). A side without a unit reads as a bare
  number. Magnitude words are part of the number (`6 billion` = 6·10⁹, never 6). A `%` prediction
  answers a bare gold only when the gold is a plain number (`25%` = `25`); `0.5%` never answers `1/2`.
* Numbers: native digits (`٤٥`, `४५`), full-width forms, no-break/thin spaces, dot- or apostrophe-
  grouped thousands (`7.654.321`, `1'234'567`) and the LaTeX decimal comma `3{,}75` are read as
  written (`rubrics.math.numerals`); repeating decimals (`0.\overline{6}`, `0.1\dot{6}`, `0.(3)`,
  `0.1666…`) and mixed numbers (`66\frac23`) are exact. A decimal gold accepts decimals to its stated
  precision (`0.333` = `0.33`); an exact prediction must be its value (`1/2` = `0.5`, `1/3` ≠ `0.33`)
  unless `rounded_golds="exact_rounds"` (then `\sqrt2` = `1.41`, still `1/3` ≠ `0.3`).
* Sets of reals: unions merge, `\mathbb{R}` is `(-\infty,\infty)`, `\mathbb{R}\setminus\{a\}` and
  `x \neq a` are the line minus a point, `or`/`and` join inequalities (`rubrics.math.intervals`).
* Domains: identities are proved over the reals. Points of both signs screen every identity, so
  `\sqrt{y^2}` is `|y|`, never `y`; an odd root (`\sqrt[3]{-27}`, `x^{2/3}`, `(t^3)^{1/3}`) is the real
  root. Exact trig values in degrees, polar/rectangular complex forms (`2e^{i\pi/3}`,
  `2\operatorname{cis}60^\circ`) and scalar·matrix products are proved by the CAS.
* Multiple choice: a letter gold accepts the one committed letter, also from `\boxed{B) 40}`; a
  letter-and-text gold (`(D) 64`) also accepts the option's value; a value gold accepts a labelled
  value (`(D)\ \frac25` for `2/5`). Word answers (`yes`, `\text{No}`) compare case-free.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal


@dataclass(frozen=True)
class MathPolicy:
    r"""How `verify` extracts and compares answers.

    percent: "unit" (default) reads `%` as a unit label: `28\%` = `28` = `28 percent`, and `0.28`
        does NOT match a `28\%` gold. "value" reads `%` as x/100: `28\%` = `0.28`, and `28` does
        not match `28\%`. A `%` in the prediction never matters unless the gold carries one
        (no ×100 fudge: gold `50` never accepts `0.5`).
    decimal_comma: False (default): `1,5` is the list (1, 5) and `1,000` is one thousand. True reads
        a comma between digits that is not a thousands group (`2,74`) as a decimal point.
    unreduced_fractions: True (default) accepts `2/4` for `1/2`; False requires lowest terms when
        the gold is a reduced fraction.
    degrees: "strip" (default) reads `90^\circ` as 90; "radians" also accepts `\pi/2` for a
        `90^\circ` gold.
    relation_direction: "both" (default): a solved one-variable inequality (`-1 < x < 2`,
        `x < 0 \text{ or } x > 5`, `x \neq 2`) and its solution set (`(-1, 2)`) answer each other
        in either direction: they denote one set, and an unsolved restatement (`x^2 > 4`) is never
        read as a set, so the restatement hack stays closed. "gold_to_pred" is the stricter
        Math-Verify reading: a pred inequality never answers an interval gold (for prompts that
        demand interval notation).
    units: "convert" (default): same-dimension units convert exactly (`1.5 km` = `1500 m`,
        `90 minutes` = `1.5 hours`); "same" is stricter: a prediction in another unit than the
        gold's is wrong even when the values agree after conversion (for prompts that name the
        unit to answer in). Different dimensions never match in either mode.
    list_order: "set" (default): a bare list `4, 10, -2` is compared as a set (a box per solution
        gives no order either); "ordered" compares bare lists element by element (Hendrycks MATH).
        Bracketed tuples/intervals are always ordered, `\{…\}` sets never.
    prose_fallback: True (default): with no box, `<answer>` tag or "answer is"/"Answer:" anchor,
        grade the completion's final statement only when it holds exactly one candidate answer,
        no hedge words and no grader-directed text. It is never a last-number-anywhere search:
        a hedge ("3 or 5"), a second candidate or a question mark in that statement means
        no answer. False: such completions have no answer.
    rounded_golds: "decimals" (default): a gold written as a decimal (`0.33`) is that number, read to
        its stated precision: it accepts decimals within half a unit of its last digit (`0.333`,
        `0.3349`), and an exact answer only when it is the gold's own value (`1/2` = `0.5`). An
        exact answer that merely rounds to it (`\frac13`, `0.\overline{3}`, `0.\dot{3}`, `0.(3)`,
        `0.333…`, `\sqrt2` for `1.41`) is another number: a mismatch. A gold of 6 or more
        significant digits (`1.41421356`) stands for the exact value, as `0.3333333333` answers
        1/3. "exact_rounds" also accepts an exact answer whose value rounds to the gold, when the
        gold has at least two significant digits (`\frac13` = `0.33`, `\sqrt2` = `1.41`, never `1/3` = `0.3`): for data
        sets whose golds are roundings of exact answers the prompt did not ask to round.
    cas_timeout_s: the CPU-time budget (seconds on the CAS worker) of the CAS part of one check; the
        worker is killed past it (`timeout`, unverified). Waiting for a free worker is not part of
        it (that wait has its own, much longer bound: `pool.QUEUE_TIMEOUT_S`), and neither is a
        loaded machine's slowness: the wall time is capped only at `pool.WALL_FACTOR` × the budget.
    max_chars: a completion longer than this is not searched (no answer); answers longer than
        `max_answer_chars` are compared as strings only (`too_complex`).
    """

    percent: Literal["unit", "value"] = "unit"
    decimal_comma: bool = False
    unreduced_fractions: bool = True
    degrees: Literal["strip", "radians"] = "strip"
    relation_direction: Literal["gold_to_pred", "both"] = "both"
    units: Literal["convert", "same"] = "convert"
    list_order: Literal["set", "ordered"] = "set"
    prose_fallback: bool = True
    rounded_golds: Literal["decimals", "exact_rounds"] = "decimals"
    cas_timeout_s: float = 1.0
    max_chars: int = 400_000
    max_answer_chars: int = 2_000
    max_depth: int = 64


DEFAULT_POLICY = MathPolicy()


@dataclass(frozen=True)
class Rules:
    """The comparison knobs `rubrics.math.compare.compare` needs: relation direction, list order."""

    direction: str = "gold_to_pred"
    ordered_lists: bool = False


DEFAULT_RULES = Rules()


def rules_of(policy: MathPolicy) -> Rules:
    """The comparison knobs of `policy`."""
    return Rules(direction=policy.relation_direction, ordered_lists=policy.list_order == "ordered")
