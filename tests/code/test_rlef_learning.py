"""The RLEF learning experiment (`benchmarks/rlef_learn.py`): its policy's tokens and logprobs are
true, and through the real stack (code_repair serve, run-api, sandbox) a GRPO trainer learns to use
real feedback while the same trainer on shuffled rewards does not."""

from __future__ import annotations

import math

import pytest
from transformers import AutoTokenizer

from benchmarks.rlef_learn import ARMS, GRPOTrainer, Settings, logit, sigmoid, train_arm
from benchmarks.rlef_policy import (
    CLASSES,
    PolicyServer,
    RepairPolicy,
    bug_rate,
    bugs_of,
    problems,
    program,
    write_problems,
)


@pytest.fixture(scope="module")
def policy(tiny_model) -> RepairPolicy:
    return RepairPolicy(AutoTokenizer.from_pretrained(tiny_model))


def context(policy: RepairPolicy, statement: str, turns: list[tuple[str, str]]) -> str:
    messages = [{"role": "system", "content": "sys"}, {"role": "user", "content": statement}]
    for answer, feedback in turns:
        messages += [{"role": "assistant", "content": answer}, {"role": "user", "content": feedback}]
    return policy.tok.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)


def test_first_attempts_carry_their_true_logprobs(policy):
    row = problems(3)[2]
    expr = row["description"].split("f(x) = ")[1].rstrip(".")
    q, text = bug_rate(expr), context(policy, row["description"], [])
    family = policy.family(expr, "")
    assert sum(w for _, w in family) == pytest.approx(1.0) and len({tuple(ids) for ids, _ in family}) == 8
    policy.reseed(0)
    for _ in range(20):
        ids, lps = policy.complete(text, 1.0)
        assert len(ids) == len(lps) and ids[-1] == policy.eos
        bugs = bugs_of(policy.tok.decode(ids))
        truth = math.prod(q if c in bugs else 1 - q for c in CLASSES)
        assert sum(lps) == pytest.approx(math.log(truth))  # the chain of token logprobs = the program's
    hot = [sum(policy.complete(text, 2.0)[1]) for _ in range(5)]  # tempered: not the T=1 logprobs
    assert all(lp <= 0 for lp in hot)


def test_a_repair_turn_starts_with_the_decision_and_uses_the_named_test(policy):
    row = problems(1)[0]
    expr = row["description"].split("f(x) = ")[1].rstrip(".")
    first = program(expr, frozenset({"neg", "big"}))
    real = "Your solution failed the public tests.\n\nTest 2 of 3 failed: wrong answer.\nInput:\n-3\n\nExpected output:\n13\n"
    none = "Your solution failed the public tests.\n\nYour solution did not pass the tests."
    policy.theta = 1.3
    policy.reseed(1)
    seen = set()
    for feedback, fixed in ((real, {"big"}), (none, {"neg", "big"})):
        for _ in range(30):
            ids, lps = policy.complete(context(policy, row["description"], [(first, feedback)]), 1.0)
            used = ids[0] == policy.use_id
            assert ids[0] in (policy.use_id, policy.ignore_id) and len(ids) == len(lps)
            assert lps[0] == pytest.approx(math.log(sigmoid(1.3) if used else 1 - sigmoid(1.3)))
            if used:  # the named test's class changed (-3: neg); no test named: the same program
                assert bugs_of(policy.tok.decode(ids)) == fixed and lps[1:] == [0.0] * (len(ids) - 1)
            seen.add(used)
    assert seen == {True, False}
    policy.theta = 0.0


def test_the_trainer_reads_decisions_from_the_tokens_it_is_sent(policy):
    trainer = GRPOTrainer(policy, lr=1.0, clip=0.2, shuffle=False, seed=0)
    y, n = policy.use_id, policy.ignore_id
    tokens = [5, 6, 7, 8, 9, y, 10, 11, 12, n, 13]
    masks = [-100, -100, 7, 8, -100, y, 10, -100, -100, n, 13]
    lps = [1.0, 1.0, -0.1, 0.0, 1.0, -0.7, 0.0, 1.0, 1.0, -0.6, 0.0]
    assert trainer.decisions(tokens, masks, lps) == [(True, -0.7), (False, -0.6)]
    with pytest.raises(ValueError, match="not a decision token"):
        trainer.decisions([5, 6, 7, 8], [-100, 6, -100, 8], [1.0, 0.0, 1.0, 0.0])


@pytest.mark.slow
def test_grpo_learns_to_use_real_feedback_reproducibly_and_shuffled_rewards_teach_nothing(
    tiny_model, tmp_path
):
    """Real training runs (serve + run-api + sandbox) from P(use) = 0.1, same seed and budget: 8 steps
    x 32 episodes. Every batch is sampled by the policy it updates (importance ratio exactly 1 at
    each update), so the same seed gives the same run, step for step. On real feedback theta rises by
    about 5 in 8 steps at lr 3 (every seed tried); under shuffled rewards it wanders (|change| <= 1.6
    over seeds 0-3 and 12 steps)."""
    s = Settings(steps=8, groups_per_step=4, lr=3.0, workdir=tmp_path)
    dataset = write_problems(tmp_path / "problems.jsonl", 48)
    policy = RepairPolicy(AutoTokenizer.from_pretrained(tiny_model))
    real, shuffled = ARMS[0], ARMS[3]
    assert (real.feedback, real.shuffle, shuffled.feedback, shuffled.shuffle) == ("real", False, "real", True)
    with PolicyServer(policy) as server:
        runs = [(arm, train_arm(s, arm, 0, server, dataset, tiny_model)) for arm in (real, shuffled, real)]
    logs = {arm.name: log for arm, log in runs[:2]}
    assert runs[2][1] == runs[0][1]  # the same seed reproduces the run exactly
    start = logit(s.p_use_start)
    moved = {name: math.log(log[-1]["p_use"] / (1 - log[-1]["p_use"])) - start for name, log in logs.items()}
    for log in logs.values():
        assert len(log) == s.steps + 1 and log[0]["p_use"] == pytest.approx(s.p_use_start)
        assert all(step["episodes"] == s.batch_size and step["decisions"] > 0 for step in log[:-1])
        assert all(step["staleness"] < 1e-9 for step in log[:-1]), log  # no sample from an older theta
        assert 0 < sum(step["use_share"] for step in log[:-1]) / s.steps < 1  # both tokens sampled
    assert logs["real"][-1]["p_use"] >= 0.8, logs  # P(use) from 0.1 to >= 0.8: theta moved >= 3.6
    assert abs(moved["real-shuffled"]) <= moved["real"] / 2, logs
    shares = [step["use_share"] for step in logs["real"][:-1]]
    assert shares[-1] > shares[0]  # the sampled behaviour, read from the batches' tokens, moved too
