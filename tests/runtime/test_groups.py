"""Alignment invariants and group assembly (what may reach a trainer, and why a group is dropped)."""

from __future__ import annotations

import copy

import pytest

from environments.atropos_runtime.checks import AlignmentError, check_group, group_violations
from environments.atropos_runtime.rollouts import DropReason, Rollout, assemble_group
from rubrics.core import RewardResult, Status

PROMPT = [{"role": "user", "content": "q"}]


def seq(
    prompt_len: int = 3, completion: tuple[int, ...] = (7, 8, 9)
) -> tuple[list[int], list[int], list[float]]:
    tokens = [1] * prompt_len + list(completion)
    masks = [-100] * prompt_len + list(completion)
    lps = [1.0] * prompt_len + [-0.5] * len(completion)
    return tokens, masks, lps


def good_group() -> dict:
    a, b = seq(), seq(completion=(4, 5))
    return {
        "tokens": [a[0], b[0]],
        "masks": [a[1], b[1]],
        "inference_logprobs": [a[2], b[2]],
        "scores": [1.0, 0.0],
    }


def test_sound_group_passes():
    assert group_violations(good_group()) == []
    check_group(good_group())
    group = good_group()  # tuples, int logprobs and float subclasses are sound too
    group["tokens"][0], group["inference_logprobs"][1] = tuple(group["tokens"][0]), [1.0, 1.0, 1.0, 0, -1]

    class Logprob(float):
        pass

    group["inference_logprobs"][0] = [1.0] * 3 + [Logprob(-0.5)] * 3
    assert group_violations(group) == []


@pytest.mark.parametrize(
    ("mutate", "needle"),
    [
        (lambda g: g["masks"][0].pop(), "lengths differ"),
        (lambda g: g["inference_logprobs"][0].__setitem__(0, -0.1), "masked but logprob"),
        (lambda g: g["inference_logprobs"][0].__setitem__(4, 0.3), "not a finite value <= 0"),
        (lambda g: g["inference_logprobs"][0].__setitem__(4, float("nan")), "not a finite value <= 0"),
        (lambda g: g["masks"][0].__setitem__(4, 1), "neither -100 nor the token id"),
        (lambda g: g["masks"].__setitem__(0, [-100] * 6), "no trained"),
        (lambda g: g["scores"].pop(), "sequences but 1 scores"),
        (lambda g: g.__setitem__("inference_logprobs", None), "no inference_logprobs"),
        (lambda g: g["scores"].__setitem__(0, float("inf")), "not a finite number"),
        # what the fast C-level pass must hand to the per-position loop, each worded there
        (lambda g: g["inference_logprobs"][0].__setitem__(4, float("-inf")), "not a finite value <= 0"),
        (lambda g: g["inference_logprobs"][0].__setitem__(4, "-0.5"), "not a finite value <= 0"),
        (lambda g: g["inference_logprobs"][0].__setitem__(4, None), "not a finite value <= 0"),
        (lambda g: g["inference_logprobs"][0].__setitem__(0, "1.0"), "masked but logprob"),
        (
            lambda g: (g["tokens"][0].__setitem__(4, -100), g["masks"][0].__setitem__(4, -100)),
            "masked but logprob",
        ),
    ],
)
def test_each_violation_is_reported(mutate, needle):
    group = copy.deepcopy(good_group())
    mutate(group)
    problems = group_violations(group)
    assert any(needle in p for p in problems), problems
    with pytest.raises(AlignmentError):
        check_group(group)


def test_bos_eos_and_length_limits():
    group = good_group()
    group["tokens"][0][:2] = [0, 0]
    assert any("doubled BOS" in p for p in group_violations(group, bos_token_id=0))
    group = good_group()
    group["tokens"][0][-2:] = [2, 2]
    group["masks"][0][-2:] = [2, 2]
    assert any("doubled EOS" in p for p in group_violations(group, eos_token_id=2))
    group = good_group()
    group["tokens"][0][3], group["tokens"][0][5] = 2, 2  # two EOS, not adjacent: sound
    group["masks"][0][3], group["masks"][0][5] = 2, 2
    assert group_violations(group, eos_token_id=2) == []
    assert any("max_token_len" in p for p in group_violations(good_group(), max_token_len=6))
    assert group_violations(good_group(), max_token_len=7) == []


def rollout(completion=(7, 8, 9), finish="stop", text="x") -> Rollout:
    t, m, lp = seq(completion=completion)
    return Rollout(text=text, finish_reason=finish, tokens=t, masks=m, logprobs=lp)


def ok(score: float) -> RewardResult:
    return RewardResult(score=score)


def build(rollouts, results, **kw):
    args = dict(group_size=len(rollouts), training=True, ensure_scores_differ=True)
    args.update(kw)
    return assemble_group(PROMPT, rollouts, results, {"temperature": 0.7}, **args)


def test_training_group_has_logprobs_temperature_and_truncation_overrides():
    out = build([rollout(finish="length"), rollout()], [ok(1.0), ok(0.0)])
    assert out.drop is None
    g = out.group
    assert g["generation_params"] == {"temperature": 0.7}
    assert g["overrides"] == [{"set_advantage_to_zero": True}, {}]
    assert g["group_overrides"] == {}
    assert g["inference_logprobs"] is not None and g["messages"][0][-1] == {
        "role": "assistant",
        "content": "x",
    }


def test_unverified_samples_never_enter_a_group():
    results = [ok(1.0), RewardResult.unverified(Status.TIMEOUT, "sandbox slow"), ok(0.0)]
    train = build([rollout()] * 3, results)
    assert train.group is None and train.drop == DropReason.TIMEOUT
    process = build([rollout()] * 3, results, training=False, ensure_scores_differ=False)
    assert process.group["scores"] == [1.0, 0.0] and process.group["group_overrides"] == {"group_size": 2}
    errors = [RewardResult.unverified(Status.ERROR, "x")] * 2
    assert build([rollout()] * 2, errors, training=False).drop == DropReason.ERROR


def test_identical_too_long_and_malformed_groups_are_dropped_with_reasons():
    assert build([rollout(), rollout()], [ok(1.0), ok(1.0)]).drop == DropReason.IDENTICAL
    assert build([rollout(), rollout()], [ok(1.0), ok(1.0)], ensure_scores_differ=False).drop is None
    assert build([rollout(), rollout()], [ok(1.0), ok(0.0)], max_token_len=5).drop == DropReason.TOO_LONG
    bad = Rollout(text="x", finish_reason="stop", tokens=[1, 7], masks=[-100, 7], logprobs=[1.0, 0.2])
    out = build([bad, rollout()], [ok(1.0), ok(0.0)])
    assert out.drop == DropReason.MALFORMED and "logprob" in out.detail
    textonly = Rollout(text="x", finish_reason="stop")
    assert build([textonly, textonly], [ok(1.0), ok(0.0)]).drop == DropReason.MALFORMED
    kept = build([textonly, textonly], [ok(1.0), ok(0.0)], training=False)
    assert kept.group["inference_logprobs"] is None and kept.group["tokens"] == []
