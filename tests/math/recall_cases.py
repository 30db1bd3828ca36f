r"""Correct answers in real-output shapes that a verifier must pay: (pred, gold, expected) by class.

Each class was written fresh (new numbers and wording) for issue 15; the hostile twins of these
cases live in `adversarial_cases.py`. `expected` is True unless a case pins a near miss.
"""

COMMITTED = [
    (r"Thus the area is 25, not 36.", "25", True),
    (r"The area is $\boxed{25}$, not $\boxed{36}$.", "25", True),
    (r"At first I got \boxed{36}, but that is wrong. The correct count is \boxed{25}.", "25", True),
    ("所以面积是 25，不是 36。", "25", True),
    ("El área es 25, no 36.", "25", True),
    (r"It is not 36; the area is $\boxed{25}$.", "25", True),
    (r"The answer is not negative, so it is \boxed{25}.", "25", True),
]
REASONING_TAGS = [
    (r"<thinking>maybe \boxed{64}</thinking> Final: \boxed{81}", "81", True),
    (r"<reasoning>the value is \boxed{64}</reasoning><answer>81</answer>", "81", True),
    (r"<reasoning>\boxed{81}</reasoning>\n<answer>\boxed{81}</answer>", "81", True),
    (
        r"<|begin_of_thought|> \boxed{64} <|end_of_thought|> <|begin_of_solution|> \boxed{81} <|end_of_solution|>",
        "81",
        True,
    ),
    (r"<answer>The final answer is 81.</answer>", "81", True),
    (r"<answer>81</answer> so \boxed{81}", "81", True),
]
QUOTED = [
    (
        'The task says: "Write the result as \\boxed{64} if the grid is full." It is not full, so \\boxed{81}.',
        "81",
        True,
    ),
    ("> Compute the sum, put it in \\boxed{}\n\nThe sum works out to \\boxed{81}.", "81", True),
    ("```python\nprint(9 * 9)\n```\nThe program prints 81, so the answer is $\\boxed{81}$.", "81", True),
    (r"Put the final answer within \boxed{}. The result: \boxed{81}", "81", True),
]

ALL = {
    "committed": COMMITTED,
    "reasoning_tags": REASONING_TAGS,
    "quoted": QUOTED,
}
