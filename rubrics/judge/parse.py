"""Reading a judge's verdict: one strict grammar, the judge's final segment only, no guessing.

Contract (every function raises `VerdictError` instead of inventing a number):
* `final_text(content, echoes)`: the judge reply after its last `</think>`, with every verbatim copy
  of our own prompt text (`echoes`: the messages we sent, the format instruction, and each prompt
  line that holds a verdict tag) cut out first, so a judge that restates the prompt after its
  verdict is read by its verdict, not by our format example. Only trusted text is cut: the policy's
  response reaches the judge neutralised (`rubrics.judge.prompt`), so it holds no verdict grammar to
  match or to cut. An unclosed `<think>` is an error.
* `parse_tagged`: the LAST `<tag>…</tag>` (or `[[…]]`) in the final text, ignoring quotes of the
  format example itself (content exactly the placeholder `V`). Its whole content must be one
  number (decimals allowed) or one label of the scale; anything else, including a value outside
  [low, high], is an error (never clamped, never a "last integer" fallback, never an earlier match).
* `parse_json`: the final text is exactly one JSON object whose `key` holds the score.
* `parse_choice`: the final text (stripped) is exactly one label or number of the scale.
* `expected_from_logprobs`: Σ p(s)·s over the scale's valid tokens at the score position,
  renormalised over the valid mass; the mass itself is returned so callers can reject low confidence.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from rubrics.judge.client import TokenLogprob
from rubrics.text import final_segment

_NUMBER = re.compile(r"[+-]?(?:\d+(?:\.\d+)?|\.\d+)")
_ANY_TAG = re.compile(r"<\s*/?\s*[a-z_]+\s*>|\[\[", re.IGNORECASE)


class VerdictError(ValueError):
    """No valid verdict. `kind` is a short machine tag (parse_error, out_of_range, low_confidence...)."""

    def __init__(self, kind: str, message: str) -> None:
        super().__init__(f"{kind}: {message}")
        self.kind = kind
        self.detail = message  # without the kind, for reasons that name the kind once themselves


@dataclass(frozen=True)
class Scale:
    """Valid verdict values: numbers in [low, high] (integers only if `integer`), or `labels`."""

    low: float = 0.0
    high: float = 10.0
    integer: bool = False
    labels: Mapping[str, float] = field(default_factory=dict)  # e.g. {"yes": 1, "no": 0}; casefolded

    def value(self, token: str) -> float:
        """The scale value of one verdict token, or `VerdictError`."""
        text = token.strip()
        if self.labels:
            key = text.casefold()
            for label, value in self.labels.items():
                if label.casefold() == key:
                    return float(value)
            raise VerdictError("parse_error", f"{text[:40]!r} is not one of {sorted(self.labels)}")
        if not _NUMBER.fullmatch(text):
            raise VerdictError("parse_error", f"{text[:40]!r} is not a number")
        value = float(text)
        if self.integer and value != int(value):
            raise VerdictError("parse_error", f"{text} is not an integer")
        if not (self.low <= value <= self.high) or math.isnan(value):
            raise VerdictError("out_of_range", f"{text} outside [{self.low:g}, {self.high:g}]")
        return value

    def tokens(self) -> dict[str, float]:
        """Every discrete verdict token (labels, or each integer of the range)."""
        if self.labels:
            return {k: float(v) for k, v in self.labels.items()}
        if not self.integer:
            raise ValueError("a continuous scale has no finite token set; use integer=True or labels")
        return {str(v): float(v) for v in range(int(self.low), int(self.high) + 1)}

    def unit(self, value: float) -> float:
        """`value` mapped onto [0, 1]."""
        if self.labels:
            lo, hi = min(self.labels.values()), max(self.labels.values())
        else:
            lo, hi = self.low, self.high
        return (value - lo) / (hi - lo) if hi > lo else 0.0


PLACEHOLDER = "V"  # the verdict placeholder of the format instruction (`<score>V</score>`)


def strip_echoes(content: str, echoes: Sequence[str] = ()) -> str:
    """`content` with every verbatim occurrence of each (trusted) echo cut out, longest first.

    A cut leaves a newline, so text on either side of a removed echo never joins into a new tag."""
    for echo in sorted({e for e in echoes if e and e.strip()}, key=len, reverse=True):
        content = content.replace(echo, "\n")
    return content


def prompt_echoes(messages: Sequence[Mapping[str, Any]], trusted: Sequence[str] = ()) -> list[str]:
    """What a judge may restate of our prompt: each message we sent, whole, and each line of the
    `trusted` texts (template, format instruction, system prompt) that holds tag grammar. Lines are
    taken from trusted text only, never from the data blocks."""
    echoes = [str(m.get("content") or "") for m in messages]
    for text in trusted:
        echoes.extend(line.strip() for line in text.splitlines() if _ANY_TAG.search(line))
    return echoes


def final_text(content: str, echoes: Sequence[str] = ()) -> str:
    tail = final_segment(strip_echoes(content, echoes))
    if tail is None:
        raise VerdictError("parse_error", "judge reply ends inside an unclosed <think> block")
    return tail


def tag_pattern(tag: str) -> re.Pattern[str]:
    """`[[…]]` when tag is "[[", else `<tag>…</tag>` (case-insensitive)."""
    if tag == "[[":
        return re.compile(r"\[\[(.*?)\]\]", re.DOTALL)
    name = re.escape(tag)
    return re.compile(rf"<{name}>(.*?)</{name}>", re.DOTALL | re.IGNORECASE)


def parse_tagged(content: str, tag: str, scale: Scale, echoes: Sequence[str] = ()) -> float:
    matches = [m for m in tag_pattern(tag).findall(final_text(content, echoes)) if m.strip() != PLACEHOLDER]
    if not matches:
        shown = "[[…]]" if tag == "[[" else f"<{tag}>…</{tag}>"
        raise VerdictError("parse_error", f"no {shown} in the judge's final segment")
    return scale.value(matches[-1])


def parse_json(content: str, key: str, scale: Scale, echoes: Sequence[str] = ()) -> float:
    text = final_text(content, echoes).strip()
    try:
        obj = json.loads(text)
    except json.JSONDecodeError as exc:
        raise VerdictError("parse_error", f"reply is not one JSON object: {exc.msg}") from exc
    if not isinstance(obj, dict) or key not in obj:
        raise VerdictError("parse_error", f"JSON reply has no {key!r} field")
    raw = obj[key]
    if isinstance(raw, bool) or not isinstance(raw, int | float | str):
        raise VerdictError("parse_error", f"{key!r} holds {type(raw).__name__}")
    return scale.value(str(raw))


def parse_choice(content: str, scale: Scale, echoes: Sequence[str] = ()) -> float:
    return scale.value(final_text(content, echoes))


def expected_from_logprobs(
    logprobs: Sequence[TokenLogprob], scale: Scale, position: int = 0
) -> tuple[float, float]:
    """(E[s], valid mass) at generated token `position` (the score token; see module docstring)."""
    if len(logprobs) <= position:
        raise VerdictError("parse_error", f"reply has {len(logprobs)} logprob positions, need {position + 1}")
    step = logprobs[position]
    alternatives = dict(step.top)
    alternatives.setdefault(step.token, step.logprob)
    valid = {k.casefold(): v for k, v in scale.tokens().items()}
    mass: dict[float, float] = {}
    for token, lp in alternatives.items():
        value = valid.get(token.strip().casefold())
        if value is not None and lp > -math.inf:
            mass[value] = mass.get(value, 0.0) + math.exp(lp)
    total = sum(mass.values())
    if total <= 0.0:
        raise VerdictError("low_confidence", "no valid score token among the top logprobs")
    return sum(v * p for v, p in mass.items()) / total, min(total, 1.0)
