"""The real-LM GRPO trainer (`benchmarks/lm_learn.py`) on the tiny model: its update reads only what a
run-api batch carries, its ratios start at 1 on fresh samples, it moves the policy toward rewarded
samples, the shuffled control's rewards are a permutation, and the statistics are right."""

from __future__ import annotations

import dataclasses
import json
import random
from pathlib import Path

import pytest
import torch

from benchmarks.lm_learn import Policy, Settings, bootstrap, gain


@pytest.fixture
def policy(tiny_model) -> Policy:
    return Policy(tiny_model, Settings(rank=4, lr=5e-3, micro_batch=3), seed=0)


def sampled_group(policy: Policy, prompt: list[int], n: int, new: int, temperature: float) -> dict:
    """A group as run-api delivers it, sampled from `policy` itself (so the batch is fresh)."""
    torch.manual_seed(1)
    tokens, masks, logprobs = [], [], []
    for _ in range(n):
        seq = list(prompt)
        for _ in range(new):
            with torch.no_grad():
                logits = policy.model(input_ids=torch.tensor([seq])).logits[0, -1] / temperature
            seq.append(int(torch.multinomial(torch.softmax(logits, -1), 1)))
        with torch.no_grad():
            lps = policy.token_logprobs([seq], temperature)[0].tolist()
        tokens.append(seq)
        masks.append([-100] * len(prompt) + seq[len(prompt) :])
        logprobs.append([1.0] * len(prompt) + lps[len(prompt) - 1 :])
    return {"tokens": tokens, "masks": masks, "inference_logprobs": logprobs, "scores": [0.0] * n,
            "generation_params": {"temperature": temperature}, "overrides": [{}] * n,
            "messages": [[{"role": "assistant", "content": "x"}]] * n}  # fmt: skip


def test_fresh_samples_have_unit_ratios_and_the_update_favours_the_rewarded(policy):
    group = sampled_group(policy, prompt=[5, 6, 7, 8], n=6, new=5, temperature=0.8)
    group["scores"] = [1.0, 0.0, 0.0, 1.0, 0.0, 0.0]
    rewarded = [group["tokens"][i] for i in (0, 3)]
    with torch.no_grad():
        before = [float(lp.sum()) for lp in policy.token_logprobs(rewarded, 0.8)]
    stats = policy.step([group], shuffle=None)
    assert stats["fresh_share"] == 1.0 and stats["max_abs_log_ratio"] < 1e-4 and stats["clipped_share"] == 0
    assert stats["reward"] == pytest.approx(1 / 3) and stats["samples"] == 6 and stats["tokens"] == 30
    with torch.no_grad():
        after = [float(lp.sum()) for lp in policy.token_logprobs(rewarded, 0.8)]
    assert all(a > b for a, b in zip(after, before, strict=True))  # rewarded samples became likelier
    stale = policy.step([group], shuffle=None)  # the same batch again: sampled by an older adapter
    assert stale["fresh_share"] < 1.0 and stale["max_abs_log_ratio"] > 1e-3


def test_identical_or_zeroed_samples_carry_no_gradient(policy):
    group = sampled_group(policy, prompt=[5, 6, 7], n=4, new=3, temperature=1.0)
    group["scores"] = [1.0] * 4  # no signal in the group
    lora = [p.detach().clone() for p in policy.params]
    policy.step([group], shuffle=None)
    assert all(torch.equal(a, b) for a, b in zip(lora, policy.params, strict=True))
    group["scores"] = [1.0, 0.0, 1.0, 0.0]
    group["overrides"] = [{"set_advantage_to_zero": True}] * 4  # every sample truncated
    policy.step([group], shuffle=None)
    assert all(torch.equal(a, b) for a, b in zip(lora, policy.params, strict=True))


def test_the_control_trains_on_a_permutation_of_the_batch_rewards(policy, monkeypatch):
    groups = [sampled_group(policy, prompt=[5, 6, 7], n=4, new=2, temperature=1.0) for _ in range(2)]
    groups[0]["scores"], groups[1]["scores"] = [1.0, 1.0, 1.0, 1.0], [0.0, 0.0, 0.0, 0.0]
    seen: list[list[float]] = []
    real_shuffle = random.Random.shuffle

    def spy(self, values):
        real_shuffle(self, values)
        seen.append(list(values))

    monkeypatch.setattr(random.Random, "shuffle", spy)
    stats = policy.step(groups, shuffle=random.Random(3))
    assert sorted(seen[0]) == [0.0] * 4 + [1.0] * 4 and seen[0] != [1.0] * 4 + [0.0] * 4
    assert stats["reward"] == 0.5  # reported: the true rewards


def test_bootstrap_and_paired_gain():
    low, high = bootstrap([1.0] * 50 + [0.0] * 50)
    assert low < 0.5 < high and high - low < 0.25
    before = [{"uid": str(i), "correct": i % 2 == 0} for i in range(100)]
    after = [{"uid": str(i), "correct": True} for i in range(100)]
    g = gain(before, after, "correct")
    assert g["gain"] == 0.5 and g["ci"][0] > 0.35
    same = gain(before, before, "correct")
    assert same["gain"] == 0.0 and same["ci"] == (0.0, 0.0)


def test_the_merged_checkpoint_is_the_trained_policy(policy, tiny_model, tmp_path):
    """Evaluation serves the adapter merged into the base weights: the same model, as a plain
    checkpoint (vLLM's CPU LoRA path is slow)."""
    from transformers import AutoModelForCausalLM

    group = sampled_group(policy, prompt=[5, 6, 7, 8], n=4, new=4, temperature=1.0)
    group["scores"] = [1.0, 0.0, 0.0, 0.0]
    policy.step([group], shuffle=None)
    folder = policy.merged(tmp_path / "merged", tiny_model)
    merged = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32)
    seq = torch.tensor([group["tokens"][0]])
    with torch.no_grad():
        expected = policy.model(input_ids=seq).logits
        got = merged(input_ids=seq).logits
    assert torch.allclose(expected, got, atol=1e-4) and (folder / "tokenizer.json").exists()


def test_kl_to_base_is_zero_on_a_fresh_adapter_and_its_penalty_pulls_back(tiny_model):
    """The reported KL(policy || base) is 0 while the adapter is untouched and grows once it moves. Two
    twins move alike, then take the same steps without reward signal (identical scores): the one with
    the penalty ends nearer the base than the one without."""
    twins = [
        Policy(tiny_model, Settings(rank=4, lr=5e-3, micro_batch=3, kl_coef=0.0), seed=0) for _ in range(2)
    ]
    group = sampled_group(twins[0], prompt=[5, 6, 7, 8], n=6, new=5, temperature=1.0)
    group["scores"] = [1.0, 0.0, 0.0, 0.0, 0.0, 1.0]
    for twin in twins:
        assert twin.step([group], shuffle=None)["kl_to_base"] == pytest.approx(0.0, abs=1e-9)
        for _ in range(3):
            twin.step([group], shuffle=None)
    group["scores"] = [0.0] * 6
    twins[0].s.kl_coef = 1.0
    ends = [[twin.step([group], shuffle=None)["kl_to_base"] for _ in range(4)][-1] for twin in twins]
    assert ends[1] > 1e-4 and ends[0] < 0.8 * ends[1]


def test_the_committed_results_come_from_the_defaults_and_meet_the_claim():
    """benchmarks/results/lm_learning.json is what `make learn-lm` (the defaults) produces, and it
    shows what the README claims: every GRPO seed's paired gain interval excludes zero, every shuffled
    control's includes it, and at every run's first step the trainer agreed with vLLM's logprobs. A
    changed default without a rerun, or a rerun that no longer learns, fails here."""
    result = json.loads((Path(__file__).parents[2] / "benchmarks/results/lm_learning.json").read_text())
    defaults = {k: v for k, v in dataclasses.asdict(Settings()).items() if k != "workdir"}
    committed = {k: v for k, v in result["settings"].items() if k != "workdir"}
    assert committed == json.loads(json.dumps(defaults))  # tuples as the json stores them
    runs = {run["name"]: run for run in result["runs"]}
    names = [f"grpo-s{s}" for s in Settings.seeds] + [f"shuffled-s{s}" for s in Settings.control_seeds]
    assert sorted(runs) == sorted(names)
    for name, run in runs.items():
        low, high = gain(result["before"], run["after"], "correct")["ci"]
        assert (low <= 0 <= high) if run["shuffled"] else low > 0, (name, low, high)
        assert run["steps"][0]["max_abs_log_ratio"] < 1e-3 and run["steps"][0]["fresh_share"] == 1.0
        assert len(run["steps"]) == Settings.steps
