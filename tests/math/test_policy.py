"""Named policies on the cases projects disagree on (the benchmark's `ambiguous` group)."""

from __future__ import annotations

from rubrics.math import MathPolicy, verify


def ok(pred: str, gold: str, **policy) -> bool:
    return verify(pred, gold, MathPolicy(**policy)).correct


def test_percent_policy():
    assert ok(r"\boxed{28}", r"28\%") and not ok(r"\boxed{0.28}", r"28\%")
    assert ok(r"\boxed{0.28}", r"28\%", percent="value") and not ok(r"\boxed{28}", r"28\%", percent="value")
    assert not ok(r"\boxed{0.5}", "50") and not ok(r"\boxed{0.5}", "50", percent="value")


def test_decimal_comma_policy():
    # against one decimal gold a comma decimal is unambiguous (no list or thousands reading can match)
    assert ok(r"\boxed{2,74}", "2.74") and not ok(r"\boxed{1,250}", "1.25")
    assert not ok(r"\boxed{2,74}", "2.74, 1") and ok(r"\boxed{2,74}", "2.74", decimal_comma=True)
    assert ok(r"\boxed{1,000}", "1000")


def test_unreduced_fraction_policy():
    assert ok(r"\boxed{\frac{2}{4}}", r"\frac{1}{2}")
    assert not ok(r"\boxed{\frac{2}{4}}", r"\frac{1}{2}", unreduced_fractions=False)


def test_degrees_policy():
    assert ok(r"\boxed{90}", r"90^\circ")
    assert not ok(r"\boxed{\frac{\pi}{2}}", r"90^\circ")
    assert ok(r"\boxed{\frac{\pi}{2}}", r"90^\circ", degrees="radians")


def test_relation_direction_policy():
    assert ok(r"\boxed{(-1, 2)}", "-1 < x < 2")
    assert ok(r"\boxed{-1 < x < 2}", "(-1, 2)")  # a solved inequality is the same set
    assert ok(r"\boxed{x<0 \text{ or } x>3}", r"(-\infty,0)\cup(3,\infty)")
    assert not ok(r"\boxed{-1 < x < 2}", "(-1, 2)", relation_direction="gold_to_pred")
    assert not ok(r"\boxed{x \neq 4}", r"\mathbb{R}\setminus\{4\}", relation_direction="gold_to_pred")
    assert ok(r"\boxed{\mathbb{R}\setminus\{4\}}", r"x \neq 4", relation_direction="gold_to_pred")
    assert not ok(r"\boxed{x > 2}", "x^2 > 4")  # an unsolved inequality is never a solution set


def test_prose_fallback_policy():
    assert ok("Adding them up, the total is 42.", "42")
    assert not ok("Adding them up, the total is 42.", "42", prose_fallback=False)


def test_list_order_policy():
    assert ok("4, 10, -2", "10, 4, -2")
    assert not ok("4, 10, -2", "10, 4, -2", list_order="ordered")
    assert ok("10, 4, -2", "10, 4, -2", list_order="ordered")
    assert not ok(r"\boxed{(3, 2)}", "(2, 3)")


def test_approximation_remarks_and_trailing_text():
    assert ok("$x=1/3\\approx0.33$", "1/3")
    assert ok("$x = 5+5+1 = 1/3 \\approx 11$", "x = 1/3")
    assert ok("17\\text{ any text}", "17") and ok("17", "17\\text{ any text}")
    assert not ok("\\boxed{17 \\text{ or } 18}", "17")


def test_units_policy():
    assert ok(r"\boxed{1.5\text{ km}}", r"1500\text{ m}")
    assert not ok(r"\boxed{1.5\text{ km}}", r"1500\text{ m}", units="same")
    assert ok(r"\boxed{1500\text{ m}}", r"1500\text{ m}", units="same")
    assert not ok(r"\boxed{1500\text{ g}}", r"1500\text{ m}")
    assert ok(r"\boxed{7}", r"7\text{ m}^2", units="same")  # a bare number reads in the gold's unit


def test_rounded_golds_policy():
    """A decimal gold is a number to its stated precision: decimals round to it, exact values do not
    (unless the policy says so); golds of 6+ significant digits stand for the exact value."""
    for exact in (r"\boxed{\frac13}", r"\boxed{0.\overline{3}}", r"\boxed{0.\dot{3}}", r"\boxed{0.(3)}"):
        assert not ok(exact, "0.33")
        assert ok(exact, "0.33", rounded_golds="exact_rounds")
        assert not ok(exact, "0.3", rounded_golds="exact_rounds")  # one significant digit rounds nothing
        assert ok(exact, "0.333333")
    assert ok(r"\boxed{0.333}", "0.33") and ok(r"\boxed{0.3349}", "0.33") and not ok(r"\boxed{0.336}", "0.33")
    assert ok(r"\boxed{\frac12}", "0.5") and ok(r"\boxed{\frac{33}{100}}", "0.33")  # the gold's own value
    assert not ok(r"\boxed{\sqrt2}", "1.41") and ok(r"\boxed{\sqrt2}", "1.41", rounded_golds="exact_rounds")
    assert ok(r"\boxed{\sqrt2}", "1.414214")
    assert not ok(r"\boxed{\sqrt2}", "1.42", rounded_golds="exact_rounds")
