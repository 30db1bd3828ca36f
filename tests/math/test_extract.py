"""The extraction policy, rule by rule."""

from __future__ import annotations

import pytest

from rubrics.math.choice import extract_letter, gold_letter
from rubrics.math.extract import extract, find_boxes, gold_answers


def test_boxes_use_real_brace_matching():
    boxes, bad = find_boxes(r"so \boxed{\frac{1}{2}} and \fbox{x^{2}}")
    assert boxes == [r"\frac{1}{2}", "x^{2}"] and not bad


@pytest.mark.parametrize("text", [r"\boxed{", r"\boxed{12", r"\boxed{}", r"\boxed{1} \boxed{"])
def test_empty_or_unclosed_box_is_no_answer(text):
    assert extract(text).answers is None


def test_agreeing_boxes_collapse_and_distinct_boxes_are_kept():
    assert extract(r"\boxed{4} ... \boxed{4}").answers == ("4",)
    assert extract(r"\boxed{3} or \boxed{5}").answers == ("3", "5")


def test_only_text_after_the_last_think_counts():
    assert extract(r"<think>\boxed{1}</think> \boxed{2}").answers == ("2",)
    assert extract(r"<think>\boxed{1}</think>").answers is None
    assert extract(r"<think>\boxed{1}").answers is None


def test_answer_tag_then_anchor():
    assert extract("<answer> 7 </answer>").answers == ("7",)
    assert extract("blah. The final answer is $12$. I hope it is correct.").answers == ("12",)
    assert extract("Final Answer: The volume of $ABCDEFGH$ is 120. I hope it is correct.").answers == ("120",)


def test_last_anchor_wins():
    assert extract("The answer is 3. Wait, recheck. The answer is 5.").answers == ("5",)


def test_no_last_number_fallback():
    assert extract("We computed 12 and 15 along the way, but I am stuck.").answers is None
    assert extract("Let me think 42 times about it. Done.").answers is None
    assert extract("Maybe 7?").answers is None


def test_final_statement_needs_one_candidate_and_a_conclusion():
    assert extract("Adding them up, the total is 42.").answers == ("42",)
    assert extract("The total is 42 or 43.").answers is None
    assert extract("So 3 + 4 = 7 apples.").answers == ("7",)
    assert extract("Adding them up, the total is 42.", fallback=False).answers is None


def test_bare_answers_are_taken_whole():
    assert extract(r"\frac{3}{4}").answers == (r"\frac{3}{4}",)
    assert extract("$x^2+1$").answers == ("x^2+1",)


def test_gold_answers():
    assert gold_answers("$1$ and $2$") == ("1", "2")
    assert gold_answers(r"so \boxed{7}.") == ("7",)
    assert gold_answers("12") == ("12",)


@pytest.mark.parametrize(
    ("gold", "letter"),
    [
        ("C", "C"),
        ("(D) Alina", "D"),
        (r"\text{(B)}", "B"),
        ("Cecile", None),
        ("Alina and the answer is\n(C) Cecile", "C"),
    ],
)
def test_gold_letter(gold, letter):
    assert gold_letter(gold) == letter


@pytest.mark.parametrize(
    ("text", "letter"),
    [
        ("C", "C"),
        ("The answer is (B).", "B"),
        ("D. it can't be A or B", "D"),
        (r"\boxed{\text{(C)}}", "C"),
        ("C or D", None),
        ("A, B, C, D", None),
        ("The answer is C/D", None),
        (r"\boxed{A}\boxed{B}", None),
        ("I think the correct answer is E", "E"),
        ("therefore I think it's B", "B"),
        ("nothing here", None),
    ],
)
def test_extract_letter(text, letter):
    assert extract_letter(text) == letter
