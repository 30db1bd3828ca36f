"""Multiple-choice answers: the gold's option letter and the one letter a completion commits to.

A hedge never counts: `C or D`, `A, B, C, D`, `C/D`, `\\boxed{A}\\boxed{C}` and `(C) or (D)` have no
answer. Letters are read from boxes (`\\boxed{\\text{(C)}}`, AMC-style `\\boxed{\\textbf{(C) } 12}`), a
bare reply, "answer is (C)" anchors (also `réponse est`, `答案是`), a leading `C.`, or a closing `it's C`.
"""

from __future__ import annotations

import re

from rubrics.math.extract import _TAG, clean_tail, committed_boxes
from rubrics.math.regions import candidate_status, final_segment, mask_non_answers

_LETTER_CORE = r"[\(\[]?\s*(?:\\text\{|\\textbf\{|\\mathrm\{)?\s*\(?([A-J])\)?\s*\}?\s*[\)\]]?"
_GOLD_LETTER = re.compile(r"^\s*\(?\s*([A-J])\s*\)?(?:[\s.:]|$)")
_MCQ_ANCHOR = re.compile(
    r"(?:answer|réponse|答案|option|choice)\s*(?:is|est|:|：|是|为)?\s*(?:for\s+sure|definitely|clearly)?\s*"
    r"(?:\*\*)?" + _LETTER_CORE + r"(?![A-Za-z])",
    re.IGNORECASE,
)
_MCQ_START = re.compile(r"^\s*(?:\*\*)?" + _LETTER_CORE + r"(?:\*\*)?(?=[.:)。，,]|\s*$|[^\x00-\x7f])")
_MCQ_END = re.compile(r"(?:it's|it\s+is|is|be)\s+" + _LETTER_CORE + r"\s*[.!]?\s*$", re.IGNORECASE)
_MCQ_HEDGE = re.compile(
    r"^\s*(?:\)|\})*\s*(?:or\b|/|,\s*\(?[A-J]\b|and\s+\(?[A-J]\b|&|ou\b|或)", re.IGNORECASE
)


def _strip_wrappers(s: str) -> str:
    s = s.strip().strip("$").strip()
    for _ in range(3):
        s = re.sub(r"^\\(?:text|textbf|mathrm|mathbf|boxed)\s*\{(.*)\}$", r"\1", s.strip(), flags=re.DOTALL)
    return s.strip().strip(".").strip()


def gold_letter(gold_answer: str) -> str | None:
    """The letter of a multiple-choice gold (`C`, `(C)`, `\\text{C}`, `(D) Alina`), else None."""
    anchored = re.search(r"answer\s*(?:is|:)\s*\(?([A-J])\)?(?:\s+[A-Z][a-z]+)?\s*$", gold_answer)
    if anchored:
        return anchored.group(1)
    s = _strip_wrappers(gold_answer)
    if re.fullmatch(r"\(?([A-J])\)?", s):
        return s.strip("()")
    m = _GOLD_LETTER.match(s)
    if m and (s.startswith("(") or re.match(r"^[A-J]\s+[A-Z][a-z]", s)):
        return m.group(1)
    return None


def _box_letter(content: str) -> str:
    """`C`, `(C)`, `\\text{(C)}`, `\\textbf{(C) } 12` → `C`; anything else is returned unchanged."""
    plain = re.sub(r"\\(?:text|textbf|mathrm|mathbf)\s*\{([^{}]*)\}", r"\1", content).strip()
    plain = re.sub(r"\\[ ,;!]|[{}$]", " ", plain).strip()
    plain = re.sub(r"^(?:option|choice|answer)\s*[:：]?\s*", "", plain, flags=re.IGNORECASE)
    m = re.fullmatch(r"\(?([A-J])\)?\.?", plain)
    if m:
        return m.group(1)
    m = re.match(r"\(([A-J])\)\s|([A-J])[).:]\s", plain + " ")
    others = re.search(
        r"\([A-J]\)|(?<![A-Za-z])(?:or|and)\s+\(?[A-J]\)?(?![A-Za-z])|/\s*\(?[A-J]\b", plain[3:]
    )
    return (m.group(1) or m.group(2)) if m and not others else content


def _letter_at(match: re.Match[str], text: str) -> str | None:
    """The matched letter, unless a hedge follows it or a negation governs it (`cannot be (B)`)."""
    if _MCQ_HEDGE.match(text[match.end() :]):
        return None
    if candidate_status(text, match.start(1), match.end(1)) == "negated":
        return None
    return match.group(1)


def extract_letter(text: str) -> str | None:
    """The single option letter a completion commits to, or None (no letter, or a hedge)."""
    seg = final_segment(text)
    if seg is None:
        return None
    seg = mask_non_answers(clean_tail(seg))
    boxes, bad = committed_boxes(seg)
    if bad:
        return None
    if boxes:
        letters = {_box_letter(b) for b in boxes}
        if len(letters) != 1:
            return None
        only = letters.pop()
        return only if re.fullmatch(r"[A-J]", only) else None
    tags = _TAG.findall(seg)
    if tags:
        seg = tags[-1]
    bare = _strip_wrappers(re.sub(r"[*_`]", "", seg))
    if re.fullmatch(r"\(?[A-J]\)?", bare):
        return bare.strip("()")
    last = None
    for m in _MCQ_ANCHOR.finditer(seg):
        last = m
    if last is not None:
        return _letter_at(last, seg)
    m = _MCQ_START.match(seg)
    if m:
        return _letter_at(m, seg)
    m = _MCQ_END.search(seg)
    if m:
        return _letter_at(m, seg)
    return None


_OPTION_LABEL = re.compile(
    r"^\s*(?:\\text(?:bf)?\s*\{\s*)?(?:\(([A-J])\)|([A-J])[).:])\s*\}?\s*(?:\\[ ,;:!]|~|\s)*(?=\S)"
)


def option_text(answer: str) -> str:
    """An answer without its leading option label: `(D)\\ \\frac25` → `\\frac25`, `B) 40` → `40`."""
    m = _OPTION_LABEL.match(answer)
    return answer[m.end() :] if m else answer


def gold_option_text(gold_answer: str) -> str | None:
    """The text after a multiple-choice gold's letter (`(D) Alina` → `Alina`), else None."""
    rest = option_text(gold_answer.strip().strip("$"))
    return rest.strip() if rest != gold_answer.strip().strip("$") and rest.strip() else None
