"""Scripted answers for the bridge fixtures (`ScriptedPolicy` answer functions) and the test's own
independent re-computation of each fixture's reward from a rollout's decoded tokens."""

from __future__ import annotations

import json
import re
from collections import Counter

END = "<|im_end|>"


def sum_policy(text: str, index: int) -> str:
    """Choice 0 and 3: right and tagged; 1: wrong by one; 2: right but untagged."""
    a, b = map(int, re.findall(r"What is (\d+) \+ (\d+)\?", text)[-1])
    s = a + b
    return [f"<answer>{s}</answer>", f"<answer>{s + 1}</answer>", str(s), f"<answer>{s}</answer>"][index % 4]


def guess_policy(text: str, index: int) -> str:
    """Bisection over the hints; choice `index` shifts the first guess."""
    guesses = [int(p.split(END)[0]) for p in text.split("<|im_start|>assistant\n")[1:] if END in p]
    hints = [p.split(END)[0] for p in text.split("<|im_start|>user\n")[2:]]
    low, high = 1, 8
    for guess, hint in zip(guesses, hints, strict=False):
        low, high = (guess + 1, high) if hint == "higher" else (low, guess - 1)
    return str(1 + (index * 3) % 8) if not guesses else str((low + high) // 2)


def majority_policy(text: str, index: int) -> str:
    """Every third choice says purple; for cyan it is the other way round (purple is the majority)."""
    word = re.findall(r"Say (\w+)\.", text)[-1]
    minority = index % 3 == 2
    return ("purple" if minority else word) if word != "cyan" else (word if minority else "purple")


def assistant_runs(tokens: list[int], masks: list[int]) -> list[list[int]]:
    """The trained (masked-in) runs of a sequence: one per assistant turn."""
    runs: list[list[int]] = []
    for k, (t, m) in enumerate(zip(tokens, masks, strict=True)):
        if m == -100:
            continue
        if k == 0 or masks[k - 1] == -100:
            runs.append([])
        runs[-1].append(t)
    return runs


def replies(tok, group: dict) -> list[list[str]]:
    """Each rollout's assistant turns, decoded from its own trained tokens."""
    return [
        [tok.decode(r, skip_special_tokens=True) for r in assistant_runs(t, m)]
        for t, m in zip(group["tokens"], group["masks"], strict=True)
    ]


def expected_sum(reply: str, answer: str) -> float:
    """vf_sum's reward: correct (1.0) + 0.25 x XMLParser format reward (1.0 for `<answer>N</answer>`,
    0.2 for a bare number: only XMLParser's spacing credit, no field, no start/end tag)."""
    tagged = re.fullmatch(r"<answer>(\d+)</answer>", reply.strip())
    correct = 1.0 if tagged and tagged.group(1) == answer else 0.0
    return correct + 0.25 * (1.0 if tagged else 0.2)


def expected_majority(group_replies: list[str], answer: str) -> list[float]:
    top = Counter(group_replies).most_common(1)[0][0]
    return [(1.0 if r == answer else 0.0) + (0.5 if r == top else 0.0) for r in group_replies]


def calc_policy(text: str, index: int) -> str:
    """vf_tools' (a + b) * c through the tools, hermes format. Choice 0: add, multiply, answer;
    1: the same (its first turn says "Let me add.") with a wrong answer; 2: a malformed first call
    (bad JSON), then as 0 after the env's error; 3: answers at once, no tools. Later turns are
    sampled one at a time (index 0), so they read the choice from the episode's first turn. Numbers
    come only from the tool results in its context."""
    a, b, c = map(int, re.findall(r"Compute \((\d+) \+ (\d+)\) \* (\d+)", text)[-1])
    turns = [p.split(END)[0] for p in text.split("<|im_start|>assistant\n")[1:] if END in p]
    results = re.findall(r"<tool_response>\n(.*?)\n</tool_response>", text, re.DOTALL)
    numbers = [int(r) for r in results if r.strip().isdigit()]
    if not turns:
        kind = index % 4
        if kind == 3:
            return f"<answer>{(a + b) * c}</answer>"
        if kind == 2:
            return (
                'Adding first.\n<tool_call>\n{"name": "add", "arguments": {"a": '
                + str(a)
                + ', "b": }}\n</tool_call>'
            )
        return ("Let me add.\n" if kind == 1 else "") + call("add", a=a, b=b)
    if not numbers:
        return call("add", a=a, b=b)
    if len(numbers) == 1:
        return call("multiply", a=numbers[0], b=c)
    return f"<answer>{numbers[1] + turns[0].startswith('Let me add.')}</answer>"


def call(name: str, **arguments: int) -> str:
    """One hermes-format tool call."""
    return "<tool_call>\n" + json.dumps({"name": name, "arguments": arguments}) + "\n</tool_call>"
