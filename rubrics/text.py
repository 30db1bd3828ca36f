"""Completion-text helpers shared by every rubric (one place for the think-block policy)."""

from __future__ import annotations

import re

_THINK_OPEN = re.compile(r"<think>", re.IGNORECASE)
_THINK_CLOSE = re.compile(r"</think>", re.IGNORECASE)


def final_segment(text: str) -> str | None:
    """The part of a completion that may be graded: the text after the last `</think>`.

    Returns None when a `<think>` block is opened after the last `</think>` and never closed:
    an unfinished reasoning trace holds no answer (a box inside it must not earn reward).
    Text without think tags is returned whole.
    """
    closes = list(_THINK_CLOSE.finditer(text))
    tail = text[closes[-1].end() :] if closes else text
    if _THINK_OPEN.search(tail):
        return None
    return tail
