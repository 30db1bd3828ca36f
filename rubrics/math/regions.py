r"""Which regions of a completion may hold the answer at all (before any box or anchor is read).

* Reasoning blocks: `<think>`, `<thinking>`, `<thought(s)>`, `<reasoning>`, `<reason>`, `<reflection>`,
  `<scratchpad>`, `<analysis>`, `<inner_monologue>` and `<|begin_of_thought|>…<|end_of_thought|>`.
  Only the text after the last closed block counts; a block opened after the last closer and never
  closed means no answer (an unfinished trace commits to nothing). `rubrics.text.final_segment`
  knows only `<think>`; this is its superset for math.
* Regions that are not the model's own answer are blanked (same length, so offsets stay valid):
  fenced and inline code, block quotes (`> …` lines), quoted text (`"…"`, `“…”`, `«…»`, `„…“`,
  `「…」`, `『…』`) and restated problem/instruction paragraphs (`Problem: …`, `Question: …`,
  `Instructions: …` up to a blank line).
"""

from __future__ import annotations

import re

_NAMES = r"think|thinking|thoughts?|reasoning|reason|reflection|scratchpad|analysis|inner_monologue"
_OPEN = re.compile(
    rf"<(?:{_NAMES}|seed:think)>|<\|begin_of_thought\|>|\[THINK\]|◁think▷|<\|channel\|>\s*analysis",
    re.IGNORECASE,
)
_CLOSE = re.compile(
    rf"</(?:{_NAMES}|seed:think)>|<\|end_of_thought\|>|\[/THINK\]|◁/think▷|<\|channel\|>\s*final\s*<\|message\|>",
    re.IGNORECASE,
)
_SOLUTION_TAGS = re.compile(
    r"<\|(?:begin|end)_of_solution\|>|<\|(?:end|return|start)\|>(?:assistant)?", re.IGNORECASE
)

_FENCE = re.compile(r"```.*?(?:```|\Z)|~~~.*?(?:~~~|\Z)", re.DOTALL)
_INLINE_CODE = re.compile(r"`[^`\n]*`")
_BLOCK_QUOTE = re.compile(r"^[ \t]*>.*$", re.MULTILINE)
_QUOTES = re.compile(
    r'"[^"\n]{0,600}"|“[^”]{0,600}”|«[^»]{0,600}»|„[^“”]{0,600}[“”]|「[^」]{0,600}」|『[^』]{0,600}』'
)
_RESTATED_HEAD = re.compile(
    r"[ \t*#]*(?:problem|question|task|instructions?|prompt|exercise|énoncé|enunciado|aufgabe|题目|问题)"
    r"\s*(?:statement)?\s*\**\s*[:：]",
    re.IGNORECASE,
)
_RESTATING_VERB = re.compile(
    r"\b(?:problem|question|task|instructions?|prompt)\s+(?:says|asks|states|reads|wants|tells\s+us|requires)\b",
    re.IGNORECASE,
)
# a restated problem ends at a blank line or at a line that starts the model's own work
_RESTATED_STOP = re.compile(
    r"\n[ \t]*\n|\n(?=[ \t*#]*(?:answer|final|solution|step|so\b|therefore|thus|hence|we\b|let\b|réponse|"
    r"solución|respuesta|lösung|答案|解))",
    re.IGNORECASE,
)
_SENTENCE_END = re.compile(r"[.!?][\"”»']?(?:\s|$)|\n")


def _blank_restated(text: str) -> str:
    """Blank `Problem: …` paragraphs (to a blank line) and sentences that say what the problem asks
    when they hold a box. Linear: only line starts and keyword hits are examined."""
    spans = []
    starts = [0] + [m.end() for m in re.finditer(r"\n", text)] if "\n" in text else [0]
    for pos in starts:
        if _RESTATED_HEAD.match(text, pos):
            stop = _RESTATED_STOP.search(text, pos)
            spans.append((pos, stop.start() if stop else len(text)))
    for m in _RESTATING_VERB.finditer(text):
        start = max(text.rfind(c, 0, m.start()) for c in ".!?\n") + 1
        stop = _SENTENCE_END.search(text, m.end())
        end = stop.start() if stop else len(text)
        if re.search(r"\\(?:boxed|fbox)", text[start:end]):
            spans.append((start, end))
    if not spans:
        return text
    chars = list(text)
    for start, end in spans:
        for i in range(start, end):
            if chars[i] != "\n":
                chars[i] = " "
    return "".join(chars)


def final_segment(text: str) -> str | None:
    """The text after the last closed reasoning block, or None when one is left open."""
    closes = list(_CLOSE.finditer(text))
    tail = text[closes[-1].end() :] if closes else text
    if _OPEN.search(tail):
        return None
    return _SOLUTION_TAGS.sub(" ", tail)


def _blank(match: re.Match[str]) -> str:
    return re.sub(r"[^\n]", " ", match.group(0))


def _blank_if_boxed(match: re.Match[str]) -> str:
    return _blank(match) if re.search(r"\\(?:boxed|fbox)", match.group(0)) else match.group(0)


def mask_non_answers(text: str) -> str:
    """`text` with code, block quotes, quotations and restated problems blanked (module docstring).

    A quotation is blanked only when it holds a `\\boxed`/`\\fbox` (a quoted word is harmless)."""
    text = _FENCE.sub(_blank, text)
    text = _INLINE_CODE.sub(lambda m: _blank(m) if "box" in m.group(0) else m.group(0), text)
    text = _BLOCK_QUOTE.sub(_blank, text)
    text = _blank_restated(text)  # before quotes: a blanked quote must not hide a sentence's end
    return _QUOTES.sub(_blank_if_boxed, text)


# ----------------------------------------------------------------------------- negated candidates

_NEG_WORDS = (
    r"not|cannot|can\s*not|\w+n't|never|neither|nor|rule[sd]?\s+out|ruling\s+out|"
    r"instead\s+of|rather\s+than|exclude[sd]?|no\s+es|no\s+son|no\s+será|n'est\s+pas|ne\s+sont\s+pas|"
    r"nicht|kein|keine|não\s+é|non\s+è|не|нет|ليس|ليست|नहीं|không(?:\s+phải)?|bukan|tidak"
)
_NEG_AFTER = r"ではない|ではありません|じゃない|ではなく|아니다|아닙니다|아니라|아니|नहीं|değil"
NEGATION = re.compile(
    rf"(?<![\w'])(?:{_NEG_WORDS})(?!\w)|不是|并非|而非|不等于|不可能|不会|{_NEG_AFTER}", re.IGNORECASE
)
# a candidate is negated when a negation ends its clause's prefix ("… is not \boxed{8}", "不是 8")
_NEG_BEFORE = re.compile(
    rf"(?:(?<![\w'])(?:{_NEG_WORDS})(?!\w)|不是|并非|而非|不等于)"
    r"(?:\s|\$|\\\(|\\\[|[(\[{]|\\text\{|\\textbf\{|\*|:|：|,|option|choice|equal(?:s|\s+to)?|be|equals|es|est|ist|égal\s+à|igual\s+a|равно|等于|为|是)*$",
    re.IGNORECASE,
)
# a candidate retracted right after it ("\boxed{8} is wrong", "\boxed{8}, but that is incorrect")
_RETRACTED_AFTER = re.compile(
    r"^[\s$)\]*]*(?:[,;:(]\s*)?(?:(?:but|however|which|though|wait|no)[,\s]+)?(?:that|this|it)?\s*"
    r"(?:is|was|'s|seems|looks)?\s*(?:wrong|incorrect|a\s+mistake|an\s+error|not\s+(?:correct|right|valid|"
    r"the\s+answer)|invalid|impossible|erroneous|false|faux|incorrecto|falsch|неверно|错误|错|不对)"
    rf"|^[\s$)\]*]*(?:は|가|이|है)?\s*(?:{_NEG_AFTER})",
    re.IGNORECASE,
)
# an earlier candidate superseded by a later one ("at first I got \boxed{8}")
_SUPERSEDED_BEFORE = re.compile(
    r"(?<![A-Za-z])(?:initially|at\s+first|first\s+(?:I|we)\s+(?:got|thought|wrote)|previously|earlier|"
    r"mistakenly|wrongly|originally|before\s+correcting)(?![A-Za-z])[^.;\n]*$",
    re.IGNORECASE,
)
# `\boxed{\frac13} \approx \boxed{0.33}`: a rounded restatement of a box that stands
_APPROX_BEFORE = re.compile(
    r"(?:\\approx|≈|\\simeq|(?<![A-Za-z])(?:approximately|approx\.?|about|roughly|around|environ|etwa|aproximadamente|"
    r"примерно|约|大约|約))[\s$\\(\[{]*$",
    re.IGNORECASE,
)
_CLAUSE_BREAK = re.compile(
    r"[.;!?。；\n]|\\boxed|\\fbox|(?<![A-Za-z])(?:so|thus|hence|therefore)(?![A-Za-z])"
)


def _clause_before(text: str, start: int) -> str:
    head = text[max(0, start - 120) : start]
    cut = None
    for m in _CLAUSE_BREAK.finditer(head):
        cut = m.end()
    return head[cut:] if cut is not None else head


def _clause_after(text: str, end: int) -> str:
    tail = text[end : end + 120]
    m = re.search(r"[.;!?。；\n](?:\s|$)|\\boxed|\\fbox", tail)
    return tail[: m.start()] if m else tail


def candidate_status(text: str, start: int, end: int) -> str:
    """ "negated", "superseded" or "ok" for the candidate answer at `text[start:end]`."""
    before = _clause_before(text, start)
    if _NEG_BEFORE.search(before) or _RETRACTED_AFTER.match(_clause_after(text, end)):
        return "negated"
    if _SUPERSEDED_BEFORE.search(before):
        return "superseded"
    if _APPROX_BEFORE.search(before) and not re.search(
        r"(?<![A-Za-z])(?:or|oder|ou|o)(?![A-Za-z])|或", before
    ):
        return "approximation"
    return "ok"


_NEGATED_TAIL = re.compile(
    rf"\s*[,;，、(—–]?\s*(?:and\s+|but\s+|y\s+|et\s+|und\s+)?(?:(?<![\w'])(?:{_NEG_WORDS}|no|nein|non)(?!\w)|而不是|不是|并非|而非)\s*"
    r"(?:\$[^$]*\$|\\\(.*?\\\)|\*\*[^*]*\*\*|[-+]?[\w.,/\\{}^]+(?:\s*%)?)\s*\)?\s*(?=[,.;!)。]|$)",
    re.IGNORECASE,
)


_NOT_BUT = re.compile(
    r"(?:(?<![\w'])(?:not|no\s+es|n'est\s+pas|nicht|isn't)(?!\w)|不是)\s*(?:\$[^$]*\$|[-+]?[\w.,/\\{}^]+)\s*[,;，]?\s*"
    r"(?:(?<![\w'])(?:but(?:\s+rather)?|rather|instead|sino|mais|sondern)(?!\w)|而是)\s*",
    re.IGNORECASE,
)


def drop_negated_tails(piece: str) -> str:
    """`7, not 12` → `7` and `not 12 but 7` → `7`: a negated alternative next to a committed
    candidate is not a hedge."""
    if not re.search(r"[\d$\\]", piece):
        return piece
    out = _NOT_BUT.sub(" ", _NEGATED_TAIL.sub("", piece))
    return out if re.search(r"\S", out) else piece
