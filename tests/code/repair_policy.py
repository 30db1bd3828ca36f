"""A scripted code-repair policy for the RLEF tests, and the problems it solves.

Problems: "print f(x)" for a few expressions; public tests x = -3, 0, 4 and private x = -8, 0, 9, 2.
The policy knows f but its first attempt carries a set of bugs, each tied to a class of inputs
(negative, zero, large). A repair turn fixes exactly the bug of the input named in the feedback,
and only when the feedback says what was expected (real feedback); with no or random feedback it
resubmits the same program. The "large" bug has no public test, so it survives every repair.
Choice 5 answers its first turn without code.

`regress_policy` is a second policy: its first program fails only x = 0 (the middle public test);
its first repair fixes that and breaks the positive inputs ("pos"), its second repair fixes those.
Every repair fixes the test the feedback named while the number of passing tests stays the same.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

EXPRESSIONS = ["x * x + 1", "3 * x - 2", "x * x * x", "2 * x + 7"]
PUBLIC, PRIVATE = [-3, 0, 4], [-8, 0, 9, 2]
BUGS = {"neg": ("x < 0", 1), "zero": ("x == 0", 2), "big": ("x > 5", 3), "pos": ("0 < x <= 5", 4)}
INITIAL = [{"neg", "zero"}, {"neg"}, {"zero"}, set(), {"neg", "big"}, {"zero"}]


def write_problems(path: Path) -> Path:
    def block(xs, expr):
        return {"input": [f"{x}\n" for x in xs], "output": [f"{eval(expr, {'x': x})}\n" for x in xs]}

    rows = [
        {"name": f"f{i}", "description": f"Read an integer x and print f(x) = {expr}.",
         "public_tests": block(PUBLIC, expr), "private_tests": block(PRIVATE, expr)}
        for i, expr in enumerate(EXPRESSIONS)
    ]  # fmt: skip
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def bug_class(x: int) -> str | None:
    return "neg" if x < 0 else "zero" if x == 0 else "big" if x > 5 else "pos"


def program(expr: str, bugs: set[str]) -> str:
    lines = ["x = int(input())", f"r = {expr}"]
    lines += [f"if {BUGS[b][0]}:\n    r = r + {BUGS[b][1]}  # bug {b}" for b in sorted(bugs)]
    return "```python\n" + "\n".join([*lines, "print(r)"]) + "\n```"


def policy(text: str, index: int) -> str:
    """The next answer, conditioned on the conversation: the previous program minus the bug of the
    input named in the last feedback (when it says what was expected)."""
    expr = re.search(r"f\(x\) = (.+?)\.", text).group(1)
    answers = [a.split("<|im_end|>")[0] for a in text.split("<|im_start|>assistant\n")[1:-1]]
    if not answers:
        return "The answer is easy, I will not write code." if index == 5 else program(expr, INITIAL[index])
    bugs = remaining_bugs(answers[-1]) if "```python" in answers[-1] else INITIAL[5]
    feedback = text.split("<|im_start|>user\n")[-1]
    found = re.search(r"Input:\n(-?\d+)\n", feedback)
    if found and "Expected output:" in feedback:
        bugs = bugs - {bug_class(int(found.group(1)))}
    return program(expr, bugs)


def remaining_bugs(code_answer: str) -> set[str]:
    return set(re.findall(r"# bug (\w+)", code_answer))


def regress_policy(text: str, index: int) -> str:
    """See the module docstring: repairs the named input's bug; the first repair adds the "pos" bug."""
    expr = re.search(r"f\(x\) = (.+?)\.", text).group(1)
    answers = [a.split("<|im_end|>")[0] for a in text.split("<|im_start|>assistant\n")[1:-1]]
    if not answers:
        return program(expr, {"zero"})
    bugs = remaining_bugs(answers[-1])
    feedback = text.split("<|im_start|>user\n")[-1]
    found = re.search(r"Input:\n(-?\d+)\n", feedback)
    if found and "Expected output:" in feedback:
        bugs = (bugs - {bug_class(int(found.group(1)))}) | ({"pos"} if len(answers) == 1 else set())
    return program(expr, bugs)
