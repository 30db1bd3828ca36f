"""Alignment invariants every group must satisfy before it reaches a trainer.

Checked per sequence `i`:
* `len(tokens) == len(masks) == len(inference_logprobs)`;
* `masks[j]` is `-100` or exactly `tokens[j]`; at least one trained position;
* `inference_logprobs[j] == 1.0` exactly where `masks[j] == -100`, and a finite value ≤ 0 elsewhere;
* no doubled BOS at the start, no doubled EOS anywhere;
* `len(tokens) < max_token_len` when the trainer gave one (`/info`, > 0);
plus group-level: every per-sequence list has one entry per sequence, scores are finite numbers.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from itertools import compress, pairwise, repeat
from operator import eq, or_
from typing import Any


class AlignmentError(ValueError):
    """A group violates the alignment invariants; the message lists every violation found."""


def group_violations(
    group: Mapping[str, Any],
    max_token_len: int = -1,
    bos_token_id: int | None = None,
    eos_token_id: int | None = None,
) -> list[str]:
    """All invariant violations of a ScoredDataGroup-like mapping (empty list: the group is sound)."""
    problems: list[str] = []
    tokens: Sequence[Sequence[int]] = group.get("tokens") or []
    masks = group.get("masks") or []
    logprobs = group.get("inference_logprobs")
    scores = group.get("scores") or []
    if not tokens:
        return ["group has no sequences"]
    if logprobs is None:
        return ["group has no inference_logprobs (trainers need them for importance ratios)"]
    for key, value in (("masks", masks), ("inference_logprobs", logprobs), ("scores", scores)):
        if len(value) != len(tokens):
            problems.append(f"{len(tokens)} sequences but {len(value)} {key}")
    if problems:
        return problems
    for i, score in enumerate(scores):
        if not isinstance(score, int | float) or not math.isfinite(score):
            problems.append(f"seq {i}: score {score!r} is not a finite number")
    for i, (toks, mask, lps) in enumerate(zip(tokens, masks, logprobs, strict=True)):
        problems.extend(
            f"seq {i}: {p}" for p in _sequence_violations(toks, mask, lps, bos_token_id, eos_token_id)
        )
        if max_token_len > 0 and len(toks) >= max_token_len:
            problems.append(f"seq {i}: {len(toks)} tokens >= trainer max_token_len {max_token_len}")
    return problems


def _sequence_violations(
    tokens: Sequence[int],
    mask: Sequence[int],
    logprobs: Sequence[float],
    bos: int | None,
    eos: int | None,
) -> list[str]:
    if not (len(tokens) == len(mask) == len(logprobs)):
        return [f"lengths differ: tokens {len(tokens)}, masks {len(mask)}, logprobs {len(logprobs)}"]
    problems = (
        [] if _positions_sound(tokens, mask, logprobs) else _position_violations(tokens, mask, logprobs)
    )
    if bos is not None and len(tokens) >= 2 and tokens[0] == tokens[1] == bos:
        problems.append("doubled BOS at the start")
    if eos is not None and tokens.count(eos) >= 2 and any(a == b == eos for a, b in pairwise(tokens)):
        problems.append("doubled EOS")
    return problems


def _positions_sound(tokens: Sequence[int], mask: Sequence[int], logprobs: Sequence[float]) -> bool:
    """The per-position invariants hold (see `_position_violations`), checked with C-level passes
    over the lists: every group is checked, and a Python loop per token was ~10% of process's CPU.
    False only means "look closer": `_position_violations` then finds and words each problem."""
    masked = list(map(eq, mask, repeat(-100)))
    trained = list(map(eq, mask, tokens))
    if -100 in tokens or not all(map(or_, masked, trained)) or not any(trained):
        return False
    if not all(map(eq, compress(logprobs, masked), repeat(1.0))):
        return False
    sampled = list(compress(logprobs, trained))
    try:
        return set(map(type, sampled)) <= {float, int} and math.isfinite(sum(sampled)) and max(sampled) <= 0
    except TypeError:  # a logprob that is not a number
        return False


def _position_violations(tokens: Sequence[int], mask: Sequence[int], logprobs: Sequence[float]) -> list[str]:
    """Each position: masked (-100) with logprob exactly 1.0, or trained (mask = its token id) with a
    finite logprob <= 0; and at least one trained position. At most five problems are listed."""
    problems = []
    trained = 0
    for j, (tok, m, lp) in enumerate(zip(tokens, mask, logprobs, strict=True)):
        if m == -100:
            if lp != 1.0:
                problems.append(f"pos {j}: masked but logprob {lp} != 1.0")
        elif m != tok:
            problems.append(f"pos {j}: mask {m} is neither -100 nor the token id {tok}")
        else:
            trained += 1
            if not isinstance(lp, int | float) or not math.isfinite(lp) or lp > 0:
                problems.append(f"pos {j}: trained logprob {lp} is not a finite value <= 0")
        if len(problems) >= 5:
            problems.append("(more violations not listed)")
            return problems
    if trained == 0:
        problems.append("no trained (unmasked) position")
    return problems


def check_group(group: Mapping[str, Any], **kwargs: Any) -> None:
    """Raise `AlignmentError` listing the violations, if any (see `group_violations`)."""
    problems = group_violations(group, **kwargs)
    if problems:
        raise AlignmentError("group fails alignment invariants: " + "; ".join(problems))
