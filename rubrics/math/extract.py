r"""Which part of a completion is the answer (the extraction policy, stated once).

Order, on the text after the last closed reasoning block only (`rubrics.math.regions.final_segment`:
`<think>`, `<thinking>`, `<reasoning>`, `<|begin_of_thought|>`, …; an unclosed block holds no
answer), with code, block quotes, boxed quotations and restated problems blanked first
(`rubrics.math.regions.mask_non_answers`):

1. `\boxed{…}` / `\fbox{…}` / `\boxed 5` with real brace matching. Every committed box counts:
   distinct boxes form a multi-answer that must equal the gold as a whole (so `\boxed{3} or
   \boxed{5}` never matches `3`; several forms of one answer each match it), agreeing duplicates
   collapse. A negated or retracted box (`not \boxed{8}`, `\boxed{8} is wrong`) is dropped, a
   superseded one (`at first I got \boxed{8}`) yields to a later box. An empty or unclosed box
   means no answer (an empty box named by an instruction, `in \boxed{}`, is skipped).
2. `<answer>…</answer>` tags; boxes outside the tags are further commitments that must agree.
3. The last "final answer is" / "the answer is" / "Answer:" anchor (also `réponse est`, `答案是`):
   the statement after it, cut at the copula ("…volume is 120" → `120`); a negated statement
   (`is not 8`, `不是 8`) has no answer, `7, not 8` and `not 8 but 7` commit to 7.
4. Optional (`MathPolicy.prose_fallback`): the final statement, only when it holds exactly one
   candidate, no hedge or negation and no grader-directed text. Never "the last number anywhere".

Multiple-choice golds (a single letter A–J) use `rubrics.math.choice` instead.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from rubrics.math.regions import (
    NEGATION,
    candidate_status,
    drop_negated_tails,
    final_segment,
    mask_non_answers,
)
from rubrics.math.spans import (
    depths,
    match_brace,
    math_spans,
    outside_spans,
    replace_spans,
    span_matches,
)

_BOX = re.compile(r"\\(?:boxed|fbox)\b\s*")
_TAG = re.compile(r"<answer>(.*?)</answer>", re.DOTALL | re.IGNORECASE)
_ANCHOR = re.compile(
    r"(?:final\s+answer|the\s+answer|answer)\s*(?:is|are|should\s+be|would\s+be|:|：|=)\s*"
    r"|\banswer\s*(?=\$|\\\(|\\\[)"
    r"|réponse(?:\s+finale)?\s*(?:est|:|：|[—–])\s*|答案\s*(?:是|为|:|：)\s*"
    r"|(?:respuesta|resposta|risposta|antwort|antwoord|ответ|відповідь|odpowiedź|odpověď|svar|答え|정답|답|उत्तर"
    r"|cevap|yanıt|đáp\s+án|jawaban(?:nya)?|الإجابة|الجواب)"
    r"(?:\s+final[e]?)?\s*(?:es|é|è|ist|lautet|est|is|är|er|je|là|adalah|равен|равна|равно|составляет|дорівнює"
    r"|wynosi|هي|है|は|은|는|:|：|=|[—–])?\s*"
    r"(?=\$|\\\(|\\\[|\d|-\s*\d|\*\*|\\boxed)",
    re.IGNORECASE,
)
_CHAT_JUNK = re.compile(r"<\|(?:im_start|im_end|endoftext|eot_id)\|>.*", re.DOTALL)
_HOPE = re.compile(r"I\s+hope\s+it\s+is\s+correct\.?", re.IGNORECASE)
_INJECTION = re.compile(
    r"ignore\s+(?:all|any|the|previous|prior|above|your)|(?:previous|prior|system|new)\s+instructions?|grader|"
    r"grading|verifier|reward\s+(?:model|function|of)|system\s+prompt|mark\s+(?:this|it|the\s+answer)|"
    r"(?:graded|accepted|treated)\s+as\s+correct|override",
    re.IGNORECASE,
)
_HEDGE = re.compile(
    r"(?<![A-Za-z])(?:or|maybe|perhaps|either|probably|possibly|might|could\s+be|not\s+sure|between|"
    r"unsure|guess|not|n't|ou|oder|o|vielleicht|talvez|forse|quizás|quizá|peut-être|belki|mungkin|atau|veya|"
    r"oppure|hoặc)(?![A-Za-z])|có\s+lẽ|tal\s+vez|ya\s+da|或|可能|也许|大概|不是|たぶん|多分|または|아마|또는|"
    r"(?<![\u0900-\u097f])(?:शायद|या)(?![\u0900-\u097f])|(?<![\u0600-\u06ff])(?:ربما|أو)(?![\u0600-\u06ff])|"
    r"(?<!\w)(?:возможно|может\s+быть|или)(?!\w)|\?|？",
    re.IGNORECASE,
)
_COPULA = re.compile(
    r"(?<![A-Za-z])(?:is|are|equals|est|es|be|it's)(?![A-Za-z])|是|为|：|=|:(?!\d)", re.IGNORECASE
)
_STATEMENT_END = re.compile(r"(?<=[.!?])\s+(?=\S)|(?<=\$\$)\s+(?=[A-Z])|(?<=\\\])\s+(?=[A-Z])|[。।\n]+")
_CLAUSE = re.compile(
    r"(?:所以|因此|इसलिए|لذا|(?<![A-Za-z])(?:therefore|thus|hence|so|donc|we\s+(?:find|get|obtain|have)\s+(?:that)?|"
    r"gives|yields|results\s+in|conclude\s+(?:that)?)(?![A-Za-z]))",
    re.IGNORECASE,
)
# thousands grouped by a space of any width or an apostrophe (`4 500`, `4\u00a0500`, `4\u202f500`,
# `1'000`, `1’000`): one number, never the two candidates `4` and `500`
_GROUPED = r"-?\d{1,3}(?:[ \u00a0\u2007\u2009\u202f'’](?=\d{3}(?!\d))\d{3})+(?:[.,]\d+)?"
_CANDIDATE = re.compile(
    r"\\frac\{[^{}]*\}\{[^{}]*\}|(?<![A-Za-z\d.])(?:" + _GROUPED + r"(?![\d'’])\s*%?|"
    r"-?\d[\d,]*(?:\.\d+)?(?:\s*/\s*\d+(?:\.\d+)?)?\s*%?|-?\.\d+)(?![A-Za-z\d])"
)


_ANCHOR_KEY = re.compile(
    "answer|réponse|答案|respuesta|resposta|risposta|antwort|antwoord|ответ|відповідь|odpowiedź|odpověď|svar|答え|답"
    "|उत्तर|cevap|yanıt|đáp|jawaban|الإجابة|الجواب",
    re.IGNORECASE,
)


def last_anchor(text: str) -> re.Match[str] | None:
    """The last `_ANCHOR` match, found from the end: every anchor contains an `_ANCHOR_KEY`, so only
    the windows around those words are matched (no regex scan of long prose)."""
    for pos in reversed([m.start() for m in _ANCHOR_KEY.finditer(text)]):
        found = None
        for m in _ANCHOR.finditer(text, max(0, pos - 24), pos + 80):
            if m.start() <= pos < m.end():
                found = m
        if found is not None:
            return found
    return None


@dataclass(frozen=True)
class Extraction:
    """`answers` is None when the text holds no gradable answer; `how` names the rule used."""

    answers: tuple[str, ...] | None
    how: str


def box_spans(text: str) -> tuple[list[tuple[int, int, str]], bool]:
    """`(start, end, content)` of every `\\boxed`/`\\fbox` in order, and whether one was empty or
    unclosed. An empty box that an instruction names (`put it in \\boxed{}`) is skipped, not bad."""
    boxes, bad, pos = [], False, 0
    while True:
        m = _BOX.search(text, pos)
        if not m:
            return boxes, bad
        i = m.end()
        if i < len(text) and text[i] == "{":
            j = match_brace(text, i)
            if j < 0:
                return boxes, True
            content = text[i + 1 : j].strip()
            pos = j + 1
        else:
            # `\boxed 5` form: only a number or a lone letter (never "\boxed and …" in an instruction)
            tok = re.match(r"[-+]?\d[\d.,/]*|[A-Za-z](?![A-Za-z])", text[i:])
            if not tok or m.group(0).endswith(("boxed", "fbox")):
                pos = i
                continue
            content = tok.group(0).rstrip(".,;")
            pos = i + tok.end()
        if content:
            boxes.append((m.start(), pos, content))
        elif not _INSTRUCTION_BEFORE.search(text[max(0, m.start() - 40) : m.start()]):
            bad = True


_INSTRUCTION_BEFORE = re.compile(
    r"(?:in|within|inside|into|with|using|use)\s+(?:an?\s+|the\s+)?\$?\s*$", re.I
)


def find_boxes(text: str) -> tuple[list[str], bool]:
    """Contents of every `\\boxed`/`\\fbox` in order, and whether one was empty or unclosed."""
    spans, bad = box_spans(text)
    return [c for _, _, c in spans], bad


def committed_boxes(text: str) -> tuple[list[str], bool]:
    """The boxes the text commits to: negated/retracted ones dropped (`not \\boxed{8}`); superseded
    ones (`at first I got \\boxed{8}`) and rounded restatements (`\\approx \\boxed{0.33}`) dropped
    when a plain box stands. Second value: bad (as above)."""
    spans, bad = box_spans(text)
    status = [candidate_status(text, a, b) for a, b, _ in spans]
    keep = [c for (_, _, c), st in zip(spans, status, strict=True) if st == "ok"]
    if not keep:  # with no plain box left, a rounded or superseded one is the answer
        keep = [
            c for (_, _, c), st in zip(spans, status, strict=True) if st in ("approximation", "superseded")
        ]
    return keep, bad


def _cut_statement(piece: str) -> str:
    piece = _HOPE.split(piece)[0]
    piece = re.split(r"\n\s*\n", piece)[0]
    # a sentence ends at ". " unless the period is inside a math span: walk spans to find it
    out, pos = [], 0
    for start, end, _ in span_matches(piece):
        head = piece[pos:start]
        cut = re.search(r"(?<!\d)[.!](?:\s|$)|。", head)
        if cut:
            out.append(head[: cut.start()])
            return "".join(out).strip()
        out.append(piece[pos:end])
        pos = end
    tail = piece[pos:]
    cut = re.search(r"[.!](?:\s|$)|。", tail)
    out.append(tail[: cut.start()] if cut else tail)
    return "".join(out).strip()


def _after_copula(piece: str) -> str:
    if piece.startswith("(") and piece.endswith(")") and piece.count("(") == 1:
        piece = piece[1:-1].strip()
    prose = outside_spans(piece)
    depth = depths(prose)
    last = None
    for m in _COPULA.finditer(prose):
        if depth[m.start()] == 0:
            last = m
    if last is None:
        return piece
    after = piece[last.end() :].strip()
    if math_spans(after) or _CANDIDATE.search(after):
        return after
    return piece[: last.start()].strip()


def _statement_answers(piece: str, *, unique: bool) -> tuple[str, ...] | None:
    """Answer(s) inside one statement: its math spans, else its one numeric candidate. A negated
    statement (`cannot be 8`, `不是 8`, `no es 8`) has none; `7, not 8` commits to 7."""
    whole = drop_negated_tails(piece.strip())
    piece = _after_copula(whole)
    head = whole[: len(whole) - len(piece)] if whole.endswith(piece) else ""
    earlier = [m.end() for m in _CANDIDATE.finditer(head)]  # a negation before an earlier candidate
    if NEGATION.search(outside_spans(head[earlier[-1] if earlier else 0 :] + " " + piece)):
        return None
    if not piece:
        return None
    if _HEDGE.search(outside_spans(piece)):
        return None
    spans = [s for s in math_spans(piece) if s]
    if spans:
        prose = outside_spans(piece)
        if unique and len(spans) > 1 and re.search(r"[A-Za-z]{3,}", prose.replace("and", "")):
            return None
        return tuple(spans)
    text = piece.strip().rstrip(".;:,!")
    if not text:
        return None
    if re.fullmatch(r"[*_]*([^\W\d_]{1,15})[*_]*", text):  # one word: `Answer: Yes`
        return (text.strip("*_"),)
    if not re.search(r"[A-Za-z\u00C0-\uFFFF]{3,}", re.sub(r"\\[A-Za-z]+", "", text)):
        return (text,)
    cands = list(dict.fromkeys(c.strip() for c in _CANDIDATE.findall(text)))
    if len(cands) == 1 or (cands and not unique):
        return (cands[0],)
    return None


def _anchor_answer(text: str) -> tuple[str, ...] | None:
    last = last_anchor(text)
    if last is None:
        return None
    rest = text[last.end() :].lstrip(" :")
    if rest.startswith("**") and rest.count("**") % 2 == 1:  # the anchor's own bold closer ("**Answer:** 12")
        rest = rest[2:].lstrip(" :")
    piece = _cut_statement(rest)
    boxes, _ = find_boxes(piece)
    if boxes:
        return tuple(boxes)
    spans = [s for s in math_spans(piece) if s]
    if spans and not outside_spans(piece).strip(" ,.;\"'"):
        return tuple(spans)
    return _statement_answers(piece, unique=False)


def _late_anchor(seg: str) -> tuple[str, ...] | None:
    """An anchored answer written after the last box (the completion's final commitment)."""
    last_box = None
    for m in _BOX.finditer(seg):
        last_box = m
    anchor = last_anchor(seg)
    if last_box is None or anchor is None or anchor.start() < last_box.start():
        return None
    end = (
        match_brace(seg, last_box.end())
        if seg[last_box.end() : last_box.end() + 1] == "{"
        else last_box.end()
    )
    if anchor.start() < end:
        return None
    return _anchor_answer(seg[anchor.start() :])


_PROSE_WORD = re.compile(r"(?<![\\A-Za-z])[A-Za-z]{3,}|[^\x00-\x7f]{2,}")
_KNOWN_WORDS = frozenset(
    (
        "sqrt frac infty cdot times left right begin end pmatrix bmatrix matrix array text mathrm textbf "
        "boxed arcsin arccos arctan sinh cosh tanh percent percentage emptyset varnothing sin cos tan sec "
        "csc cot log exp max min gcd lcm mod det and pct deg pmod cup cap units unit square cubic feet "
        "foot inches inch meters meter metres miles mile yards degrees degree dollars dollar cents yuan "
        "euros hours hour minutes seconds days weeks years grams kilograms liters litres points mph "
    ).split()
)


def _bare_answer(seg: str) -> str | None:
    """The whole text when it is one short answer (a lone math span, or math without prose)."""
    s = seg.strip()
    if not s or len(s) > 300:
        return None
    spans = math_spans(s)
    outside = outside_spans(s).strip(" .,;")
    if len(spans) == 1 and not outside:
        return spans[0]
    if len(spans) == 1 and re.fullmatch(
        r"(?:%|\\%|percent(?:age)?|pct|[a-z]{1,2}|degrees?|units?|dollars?)", outside
    ):
        return spans[0] + " " + outside
    if spans:
        return None
    plain = re.sub(r"\\(?:text|textbf|mathrm|mbox)\s*\{[^{}]*\}", " ", s)
    words = [w for w in _PROSE_WORD.findall(plain) if w.lower() not in _KNOWN_WORDS]
    return None if words else s


_TAIL = 4000


def _fallback_answer(text: str) -> tuple[str, ...] | None:
    """The final statement's one candidate; the statement must conclude (copula, 'so', '=', bold)."""
    if _INJECTION.search(text[-2000:]):
        return None
    if len(text) > _TAIL:  # only the final statement counts: split the tail, from a statement start
        tail = text[-_TAIL:]
        cut = _STATEMENT_END.search(tail)
        if cut is None:
            return None  # one statement longer than the tail commits to no single answer
        text = tail[cut.end() :]
    statements = [s.strip() for s in _STATEMENT_END.split(_outside_spans_keep(text)) if s.strip()]
    for st in statements[-1:]:  # the final statement only: an earlier number is never the answer
        if re.search(r"\d", st) or math_spans(st):
            parts = _CLAUSE.split(st)
            clauses = [c for c in parts if re.search(r"\d", c) or math_spans(c)]
            chosen = clauses[-1] if clauses else st
            concluded = len(parts) > 1 and clauses and chosen is parts[-1] or "**" in chosen
            if not (concluded or _copula_at_top(chosen)):
                return None
            return _statement_answers(chosen, unique=True)
    return None


def _copula_at_top(piece: str) -> bool:
    prose = outside_spans(piece)
    depth = depths(prose)
    return any(depth[m.start()] == 0 for m in _COPULA.finditer(prose))


def _outside_spans_keep(text: str) -> str:
    """Protect sentence splitting from periods/newlines inside math spans (kept, but newline-free)."""
    return replace_spans(text, lambda span: span.replace("\n", " ").replace(". ", ".\u00a0"))


def clean_tail(text: str) -> str:
    return _HOPE.sub("", _CHAT_JUNK.sub("", text)).strip()


def extract(text: str, *, fallback: bool = True, max_chars: int = 400_000) -> Extraction:
    """The answer strings of a completion (see module docstring), or `answers=None`."""
    if len(text) > max_chars:
        return Extraction(None, "completion too long")
    seg = final_segment(text)
    if seg is None:
        return Extraction(None, "unclosed <think> block")
    seg = mask_non_answers(clean_tail(seg))
    tagged = [t.strip() for t in _TAG.findall(seg)]
    outside = _TAG.sub(lambda m: " " * len(m.group(0)), seg) if tagged else seg
    boxes, bad = committed_boxes(outside)
    if bad:
        return Extraction(None, "empty or unclosed \\boxed")
    if tagged:
        if not all(tagged):
            return Extraction(None, "empty <answer> tag")
        answers = [a for t in tagged for a in _tag_answers(t)]
        # a box outside the tags is a second commitment: it must agree (the verifier checks all)
        return Extraction(tuple(dict.fromkeys(answers + boxes)), "answer tag")
    if boxes:
        late = _late_anchor(seg)
        if late:
            return Extraction(late, "anchor after the boxes")
        return Extraction(tuple(dict.fromkeys(boxes)), "boxed")
    if _BOX.search(seg) and find_boxes(seg)[0]:
        return Extraction(None, "every boxed candidate negated or retracted")
    anchored = _anchor_answer(seg)
    if anchored is None and last_anchor(seg) is not None:
        return Extraction(None, "an answer anchor without a usable answer")
    if anchored:
        if _INJECTION.search(seg[-2000:]):
            return Extraction(None, "anchored answer next to grader-directed text")
        return Extraction(anchored, "anchor")
    bare = _bare_answer(seg)
    if bare:
        return Extraction((bare,), "bare answer")
    if not fallback:
        return Extraction(None, "no box, tag or anchor")
    found = _fallback_answer(seg)
    return Extraction(found, "final statement") if found else Extraction(None, "no unambiguous answer")


def _tag_answers(tag: str) -> tuple[str, ...]:
    """The answer inside one `<answer>` tag: its boxes, a bare answer, an anchored one, or the tag."""
    boxes = find_boxes(tag)[0]
    if boxes:
        return tuple(boxes)
    bare = _bare_answer(tag)
    return (bare,) if bare else _anchor_answer(tag) or (tag,)


def gold_answers(gold: str) -> tuple[str, ...]:
    """The answer(s) inside a gold: its boxes, else (for a worked solution) its anchored answer, else
    its `$…$` spans (`$1$ and $2$` is two answers), else the gold itself."""
    gold = gold.strip()
    boxes, _ = find_boxes(gold)
    if boxes:
        return tuple(dict.fromkeys(boxes))
    if len(gold) > 80 or re.search(r"answer", gold, re.IGNORECASE):
        anchored = _anchor_answer(gold)
        if anchored:
            return anchored
    spans = [s for s in math_spans(gold) if s]
    return tuple(spans) if spans else (gold.strip("$ "),)
