"""Scripted answers for the v1 fixtures (ScriptedPolicy answer functions) and the tests' own
re-computation of each fixture's reward from a rollout's decoded tokens.

v1 sends one request per rollout turn (n=1), so the choice index is always 0: these policies vary
their answers by the order requests arrive in (random, with the policy's random latency), which is
what makes pairing by position detectable."""

from __future__ import annotations

import re
from collections import Counter

from tests.verifiers_bridge.policies import END, assistant_runs, calc_policy

FEEDBACK = "Not quite, try again."


class SumPolicy:
    """Every other request for a question is answered right (a + b), the others wrong (a + b + 1),
    with a leading space (as sampled text often has)."""

    def __init__(self) -> None:
        self.seen: Counter[tuple[int, int]] = Counter()

    def __call__(self, text: str, index: int) -> str:
        a, b = map(int, re.findall(r"What is (\d+) \+ (\d+)\?", text)[-1])
        self.seen[(a, b)] += 1
        return f" {a + b + self.seen[(a, b)] % 2}"  # v1 strips `trace.last_reply`: the bridge must too


class RetryPolicy:
    """A rollout's first reply fixes how many feedback turns it needs: `wrong<k>` needs k more
    tries (k = 0, 1, 3 by arrival order; 3 never succeeds within the fixture's 3 attempts)."""

    def __init__(self) -> None:
        self.first: Counter[str] = Counter()

    def __call__(self, text: str, index: int) -> str:
        word = re.findall(r"Spell '(\w+)' backwards", text)[-1]
        tries = text.count(FEEDBACK)
        if tries == 0:
            self.first[word] += 1
            need = [0, 1, 3][self.first[word] % 3]
            return word[::-1] if need == 0 else f"wrong{need}"
        need = int(re.findall(r"wrong(\d)", text)[0])
        return word[::-1] if tries >= need else f"wrong{need}"


def decoded(tok, tokens: list[int], masks: list[int]) -> tuple[str, list[str]]:
    """(the whole sequence's text, each assistant turn's text) from a rollout's own tokens."""
    replies = [tok.decode(run, skip_special_tokens=True) for run in assistant_runs(tokens, masks)]
    return tok.decode(tokens), replies


def sum_reward(tok, tokens: list[int], masks: list[int]) -> float:
    text, replies = decoded(tok, tokens, masks)
    a, b = map(int, re.findall(r"What is (\d+) \+ (\d+)\?", text)[0])
    return float(replies[-1].strip() == str(a + b))


def retry_reward(tok, tokens: list[int], masks: list[int]) -> float:
    text, replies = decoded(tok, tokens, masks)
    word = re.findall(r"Spell '(\w+)' backwards", text)[0]
    return float(replies[-1].strip() == word[::-1])


def mismatches(tok, group: dict, reward) -> list[int]:
    """Rollouts whose score is not the fixture's reward of their own decoded tokens."""
    return [
        k
        for k, (t, m, s) in enumerate(zip(group["tokens"], group["masks"], group["scores"], strict=True))
        if s != reward(tok, t, m)
    ]


class CalcPolicy:
    """`calc_policy` (the classic tool tests' Hermes-format replies) over v1's one-request-per-turn
    calls: a rollout's kind (0 tools then right, 1 tools then wrong, 2 a malformed first call, 3 an
    answer without tools) is fixed by the arrival order of its first request. Calls use the names
    the prompt offers (v1 qualifies MCP tools by server: `<server>_add`)."""

    def __init__(self) -> None:
        self.first: Counter[str] = Counter()

    def __call__(self, text: str, index: int) -> str:
        question = re.findall(r"Compute \(\d+ \+ \d+\) \* \d+", text)[-1]
        if END in text.split("<|im_start|>assistant\n", 1)[1]:
            reply = calc_policy(text, 0)  # a later turn: calc_policy reads the kind from the first turn
        else:
            self.first[question] += 1
            reply = calc_policy(text, self.first[question] % 4)
        for tool in ("add", "multiply"):
            offered = re.search(rf'"name": "(\w*{tool})"', text)
            reply = reply.replace(f'"name": "{tool}"', f'"name": "{offered.group(1) if offered else tool}"')
        return reply


def calc_reward(tok, tokens: list[int], masks: list[int]) -> float:
    text, replies = decoded(tok, tokens, masks)
    a, b, c = map(int, re.findall(r"Compute \((\d+) \+ (\d+)\) \* (\d+)", text)[0])
    found = re.fullmatch(r"<answer>(\d+)</answer>", replies[-1].strip())
    return float(bool(found) and int(found.group(1)) == (a + b) * c)
