r"""Math spans and braces in prose: `$…$`, `$$…$$`, `\(…\)`, `\[…\]`, `**…**` and `{…}` matching.

All linear time on hostile input (unclosed openers are skipped without rescanning).
"""

from __future__ import annotations

import re


def match_brace(text: str, start: int) -> int:
    """Index of the `}` closing the `{` at `start`, or -1 when it never closes. Skips `\\{`/`\\}`."""
    depth, i, n = 0, start, len(text)
    while i < n:
        ch = text[i]
        if ch == "\\":
            i += 2
            continue
        if ch == "{":
            depth += 1
        elif ch == "}":
            depth -= 1
            if depth == 0:
                return i
        i += 1
    return -1


_OPENER = re.compile(r"(?<!\\)\$\$|(?<!\\)\$|\\\(|\\\[|\*\*")
_CLOSER = {
    "$$": re.compile(r"(?<!\\)\$\$"),
    "$": re.compile(r"(?<!\\)\$"),
    "\\(": re.compile(r"\\\)"),
    "\\[": re.compile(r"\\\]"),
    "**": re.compile(r"\*\*"),
}


def span_matches(text: str) -> list[tuple[int, int, str]]:
    """`(start, end, content)` of every `$…$`, `$$…$$`, `\\(…\\)`, `\\[…\\]`, `**…**` span, left to right.

    Linear time: once a closer is missing after some position it is missing after every later one,
    so unclosed openers are skipped without rescanning (no quadratic blow-up on hostile input).
    """
    out, pos, dead = [], 0, set()
    while True:
        m = _OPENER.search(text, pos)
        if not m:
            return out
        opener = m.group(0)
        if opener in dead:
            pos = m.end()
            continue
        close = _CLOSER[opener].search(text, m.end())
        if close is None:
            dead.add(opener)
            pos = m.end()
            continue
        out.append((m.start(), close.end(), text[m.end() : close.start()]))
        pos = close.end()


def math_spans(text: str) -> list[str]:
    return [c.strip() for _, _, c in span_matches(text)]


def replace_spans(text: str, fn) -> str:
    parts, last = [], 0
    for start, end, _ in span_matches(text):
        parts.append(text[last:start])
        parts.append(fn(text[start:end]))
        last = end
    parts.append(text[last:])
    return "".join(parts)


def outside_spans(text: str) -> str:
    """The text with every math span blanked (same length), so prose regexes skip math."""
    return replace_spans(text, lambda span: " " * len(span))


def depths(s: str) -> list[int]:
    """Bracket depth before each character; `\\{`/`\\}` count as brackets too."""
    out, d, i = [0] * len(s), 0, 0
    while i < len(s):
        out[i] = d
        ch = s[i]
        if ch in "([{":
            d += 1
        elif ch in ")]}":
            d = max(d - 1, 0)
        elif ch == "\\" and i + 1 < len(s) and s[i + 1] in "{}":
            out[i + 1] = d
            d = d + 1 if s[i + 1] == "{" else max(d - 1, 0)
            i += 1
        i += 1
    return out
