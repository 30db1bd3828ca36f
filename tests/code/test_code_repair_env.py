"""RLEF code repair: public-test feedback between turns, private-test reward, feedback ablations."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import pytest
from atroposlib.envs.server_handling.server_baseline import APIServerConfig
from transformers import AutoTokenizer

from environments.atropos_runtime.local_model import build_tiny_model
from environments.code_repair_env import HUB, CodeRepairEnv, CodeRepairEnvConfig, CodeRepairTask
from rubrics.code.rubric import CodeRubric
from rubrics.code.suites import suite_from
from tests.code.repair_policy import PUBLIC, bug_class, policy, regress_policy, remaining_bugs, write_problems
from tests.runtime.scripted_policy import ScriptedPolicy

ROOT = Path(__file__).resolve().parents[2]
FORMATS = Path(__file__).with_name("data") / "code_formats.jsonl"


@pytest.fixture(scope="module")
def tiny() -> Path:
    return build_tiny_model(os.environ.get("RLVR_TINY_MODEL") or ROOT / ".cache" / "tiny-model")


@pytest.fixture(scope="module")
def server(tiny):
    with ScriptedPolicy(AutoTokenizer.from_pretrained(tiny), policy) as s:
        yield s


def make_env(tiny, server, dataset, **kwargs) -> CodeRepairEnv:
    # no scripted program loops: a generous CPU limit keeps a loaded CI's cold pool from timing one out
    kwargs.setdefault("time_limit_s", 20.0)
    config = CodeRepairEnvConfig(tokenizer_name=str(tiny), wandb_name="code_repair", use_wandb=False, group_size=6,
                                 max_token_length=2048, dataset=str(dataset), eval_fraction=0,
                                 ensure_scores_are_not_same=False, **kwargs)  # fmt: skip
    api = APIServerConfig(server_type="vllm", model_name="scripted", base_url=server.base_url, api_key="x",
                          tokenizer_name=str(tiny), timeout=60, health_check=False)  # fmt: skip
    return CodeRepairEnv(config, [api])


def last_answer(messages) -> str:
    return next(m["content"] for m in reversed(messages) if m["role"] == "assistant")


async def test_real_feedback_repairs_what_random_and_no_feedback_cannot(tiny, server, tmp_path):
    """Real feedback names a failing test; random feedback names any public test in exactly real
    feedback's form (a policy that acts on what the feedback names then repairs only by luck); no
    feedback names none. Random feedback is a function of the seed and the episode: a rerun repeats it."""
    problems = write_problems(tmp_path / "problems.jsonl")
    solved, random_runs = {}, []
    for mode in ("real", "random", "none", "random"):
        env = make_env(tiny, server, problems, feedback=mode)
        await env.setup()
        scores = []
        for item in env.train_items:
            group = (await env.group_for(item, training=False)).group
            assert len(group["scores"]) == 6, env.statuses
            for score, msgs, ep in zip(group["scores"], group["messages"], group["episodes"], strict=True):
                bugs = remaining_bugs(last_answer(msgs))
                assert score == float(not bugs and "```python" in last_answer(msgs))  # its own reward
                public_ok = "```python" in last_answer(msgs) and not bugs & {"neg", "zero"}
                assert ep["stop_reason"] == ("solved" if public_ok else "max_turns")  # stops on success
                assert len(ep["turns"]) == sum(m["role"] == "assistant" for m in msgs) <= 3
                feedback = [m["content"] for m in msgs[len(item.prompt) :] if m["role"] == "user"]
                if mode == "real":
                    assert all("Expected output:" in f or "No ```python code block" in f for f in feedback)
                if mode == "random":
                    assert all(re.fullmatch(RANDOM_FEEDBACK, f, re.S) for f in feedback if "Input" in f), (
                        feedback
                    )
                    random_runs.append(sorted(map(tuple, group["tokens"])))
                if mode == "none":
                    assert all("did not pass the tests" in f and "Input" not in f for f in feedback)
            scores += group["scores"]
        await env.aclose()
        solved[mode] = sum(scores) / len(scores)
    assert solved["none"] < solved["random"] < solved["real"]
    # real: every first attempt but the one with the hidden-only "big" bug; none: the bug-free one
    assert (solved["real"], solved["none"]) == pytest.approx((5 / 6, 1 / 6))
    half = len(random_runs) // 2
    assert half and random_runs[:half] == random_runs[half:]  # same episodes, token for token


# real feedback's fields for a wrong answer on a stdio test, with the test's real input and expected output
RANDOM_FEEDBACK = (
    r"Your solution failed the public tests\.\n\nTest [1-3] of 3 failed: wrong answer\.\nInput:\n-?\d+\n\n"
    r"Expected output:\n-?\d+\n\nYour output:\n-?\d+\n?\n\n.*"
)


def test_offline_default_splits_public_and_private_tests():
    task = CodeRepairTask(CodeRepairEnvConfig())
    train, errors = task.items("train")
    evals, _ = task.items("eval")
    assert not errors and len(train) + len(evals) == 164 + 10
    he = next(it for it in train if it.uid == "HumanEval/0")
    public, private = suite_from(he.info["public"]), suite_from(he.answer)
    assert len(public.tests) == 2 and len(private.tests) == 5 and not set(public.tests) & set(private.tests)
    stdio = next(it for it in train + evals if it.uid == "stdio_sum")
    assert [t.input for t in suite_from(stdio.info["public"]).tests] == ["1 2\n", "-5 3\n"]
    assert len(suite_from(stdio.answer).tests) == 3 and stdio.info["private_fallback"] is False


def test_dataset_shapes_keep_their_own_split_and_bad_rows_are_counted():
    items, errors = CodeRepairTask(CodeRepairEnvConfig(dataset=str(FORMATS), eval_fraction=0)).items("train")
    by_uid = {it.uid: it for it in items}
    cc = by_uid["cc_max"]  # CodeContests: public vs private + generated
    assert cc.info["tests_public"] == 1 and cc.info["tests_private"] == 2
    lcb = by_uid["lcb_fn"]  # LiveCodeBench with a pickled private blob: never unpickled, public reused
    assert lcb.info["private_fallback"] is True and lcb.answer == lcb.info["public"]
    assert len(errors) == 3 and "no tests" in errors[0]  # a problem with no tests is skipped, counted


def test_hub_names_read_their_own_splits(monkeypatch):
    import environments.code_repair_env as mod

    rows = [json.loads(line) for line in FORMATS.read_text().splitlines()]
    asked = []

    def fake_load_rows(source, split="train", config=None):
        asked.append((source, split, config))
        return rows  # local files stand in for the hub (no network in tests)

    monkeypatch.setattr(mod, "load_rows", fake_load_rows)
    for name, (hub, config, train_split, eval_split) in HUB.items():
        task = CodeRepairTask(CodeRepairEnvConfig(dataset=name))
        train, _ = task.items("train")
        evals, _ = task.items("eval")
        assert asked[-2:] == [
            (f"hf:{hub}", train_split, config),
            (f"hf:{hub}", eval_split or train_split, config),
        ]
        assert train
        if eval_split is None:  # one hub split: eval is a slice carved off its end, disjoint from train
            assert not {it.uid for it in train} & {it.uid for it in evals}


async def test_bad_inputs_no_code_long_feedback_and_a_dying_sandbox(tiny, server, tmp_path):
    problems = write_problems(tmp_path / "problems.jsonl")
    env = make_env(tiny, server, problems, feedback_chars=60)
    await env.setup()
    group = (await env.group_for(env.train_items[0], training=False)).group
    no_code = group["episodes"][
        group["messages"].index(next(m for m in group["messages"] if "will not write" in m[2]["content"]))
    ]
    first_feedback = no_code["turns"][0]["env_messages"][0]["content"]
    assert "No ```python code block found" in first_feedback
    long_ones = [
        t["env_messages"][0]["content"] for ep in group["episodes"] for t in ep["turns"] if t["env_messages"]
    ]
    assert any("characters omitted" in f for f in long_ones)  # clipped to 60 characters, marked
    assert all(t["info"].get("feedback_chars", 0) <= 60 + 40 for ep in group["episodes"] for t in ep["turns"])

    class DyingSandbox:  # the real sandbox, until it dies after its first jobs
        def __init__(self, inner, lives):
            self.inner, self.lives, self.name = inner, lives, inner.name

        async def run(self, job):
            self.lives -= 1
            if self.lives < 0:
                raise ConnectionError("sandbox worker died")
            return await self.inner.run(job)

        async def close(self):
            pass

    real = await env.rubric.get_sandbox()
    env.rubric = CodeRubric(DyingSandbox(real, lives=4), env.rubric.config)
    outcome = await env.group_for(env.train_items[1], training=True)
    assert outcome.group is None and outcome.drop == "error" and "sandbox worker died" in outcome.detail
    assert env._episode_runner.stops["env_error"] >= 1 and env.statuses["error"] >= 1
    await env.aclose()
    await real.close()


async def test_turn_penalty_is_a_named_component_and_off_by_default(tiny, server, tmp_path):
    problems = write_problems(tmp_path / "problems.jsonl")
    for penalty in (0.0, 0.25):
        env = make_env(tiny, server, problems, turn_penalty=penalty)
        await env.setup()
        group = (await env.group_for(env.train_items[0], training=False)).group
        for reward, ep in zip(group["rewards"], group["episodes"], strict=True):
            if reward["components"].get("all_passed") == 1.0:
                extra = len(ep["turns"]) - 1
                assert reward["score"] == 1.0 - penalty * extra
                assert ("turn_penalty" in reward["components"]) == (penalty > 0 and extra > 0)
        await env.aclose()


async def test_load_environment_runs_episodes_in_verifiers(tiny, server, tmp_path):
    from openai import AsyncOpenAI

    from environments.code_repair_env import load_environment

    env = load_environment(dataset=str(write_problems(tmp_path / "p.jsonl")), eval_fraction=0)
    client = AsyncOpenAI(base_url=server.base_url, api_key="x")
    out = await env.evaluate(client, "scripted", sampling_args={"max_tokens": 200}, num_examples=2,
                             rollouts_per_example=3)  # fmt: skip
    rewards = out["reward"] if isinstance(out, dict) else out.reward
    assert len(rewards) == 6 and sum(rewards) >= 4  # the scripted policy repairs from the real feedback


async def test_evaluate_reports_solve_rate_per_turn_against_the_resampling_baseline(
    tiny, server, tmp_path, capsys
):
    env = make_env(
        tiny, server, write_problems(tmp_path / "p.jsonl"), data_dir_to_save_evals=str(tmp_path / "ev")
    )
    await env.setup()
    metrics = await env.evaluate()
    await env.aclose()
    # n=1 per item: every episode starts with the {neg, zero} program; real feedback repairs both bugs
    assert [metrics[f"eval/real/solve@{k}"] for k in (1, 2, 3)] == [0.0, 0.0, 1.0]
    assert metrics["eval/real/named_fixed"] == 1.0 and metrics["eval/real/turns"] == 3.0
    # random feedback repairs only where it happens to name a failing test (twice in a row here)
    assert metrics["eval/none/solve@3"] == 0.0 < metrics["eval/random/solve@3"] < 1.0
    assert metrics["eval/none/feedback_chars"] < metrics["eval/real/feedback_chars"]
    # resampling: the first three choices all carry a public bug, so best-of-3 never solves
    assert metrics["eval/resample/solve@3"] == 0.0 and metrics["eval/real/unverified"] == 0
    table = capsys.readouterr().out
    assert "== code_repair evaluate (RLEF) ==" in table and all(
        m in table for m in ("real", "none", "random", "resample")
    )
    samples = [json.loads(line) for line in (tmp_path / "ev" / "samples.jsonl").read_text().splitlines()]
    assert {s["mode"] for s in samples} == {"real", "none", "random", "resample"}


@pytest.fixture(scope="module")
def regress_server(tiny):
    with ScriptedPolicy(AutoTokenizer.from_pretrained(tiny), regress_policy) as s:
        yield s


async def test_named_test_is_the_first_failing_one_not_a_count(tiny, regress_server, tmp_path):
    """The feedback names the first failing public test and `named_fixed` reads that test's own
    record: a repair that fixes the named test while another breaks counts as fixed (real: 1.0 on this
    deterministic policy; a count of passing tests said 0.5), and in random mode `named_fixed` is
    exactly whether the named test passes in the next attempt (read from that program's bugs)."""
    env = make_env(
        tiny,
        regress_server,
        write_problems(tmp_path / "p.jsonl"),
        data_dir_to_save_evals=str(tmp_path / "ev"),
    )
    await env.setup()
    metrics = await env.evaluate()
    await env.aclose()
    assert metrics["eval/real/named_fixed"] == 1.0 and metrics["eval/real/solve@3"] == 1.0
    samples = [json.loads(line) for line in (tmp_path / "ev" / "samples.jsonl").read_text().splitlines()]
    checked = 0
    for sample in (s for s in samples if s["mode"] == "random"):
        feedback = [m["content"] for m in sample["messages"][2:] if m["role"] == "user"]
        attempts = [m["content"] for m in sample["messages"][2:] if m["role"] == "assistant"]
        for k, text in enumerate(feedback):
            named = int(text.split("Test ", 1)[1].split(" of ", 1)[0]) - 1
            passes = bug_class(PUBLIC[named]) not in remaining_bugs(attempts[k + 1])
            assert sample["turn_info"][k + 1]["named_fixed"] is passes, (named, sample["turn_info"])
            checked += 1
    assert checked == 2 * len(env.eval_items) > 0


async def test_evaluate_keeps_going_when_an_episode_fails_and_says_why(tiny, server, tmp_path):
    """One item's inference fails in every mode (as a retried call does: a RetryError around the
    server's 400): evaluate finishes, that item is unverified with the server's own reason, and the
    others are scored as before."""
    import tenacity

    from environments import code_repair_eval
    from environments.atropos_runtime.token_completions import InferenceError

    env = make_env(
        tiny, server, write_problems(tmp_path / "p.jsonl"), data_dir_to_save_evals=str(tmp_path / "ev")
    )
    await env.setup()
    bad = env.eval_items[0].uid

    def failing() -> tenacity.RetryError:
        attempt = tenacity.Future(attempt_number=3)
        attempt.set_exception(InferenceError("vLLM /completions returned 400: prompt too long"))
        return tenacity.RetryError(attempt)

    real_rollout, real_sample = env.rollout_and_score, code_repair_eval.sample_group

    async def rollout_and_score(item, *args, **kwargs):
        if item.uid == bad:
            raise failing()
        return await real_rollout(item, *args, **kwargs)

    async def sample_group(server_, tokenizer, prompt, *args, **kwargs):
        if prompt == env.eval_items[0].prompt:
            raise failing()
        return await real_sample(server_, tokenizer, prompt, *args, **kwargs)

    env.rollout_and_score = rollout_and_score
    code_repair_eval.sample_group = sample_group
    try:
        metrics = await env.evaluate()
    finally:
        code_repair_eval.sample_group = real_sample
        await env.aclose()
    assert metrics["eval/real/unverified"] == 1 and metrics["eval/real/solve@3"] == 1.0
    samples = [json.loads(line) for line in (tmp_path / "ev" / "samples.jsonl").read_text().splitlines()]
    failed = [s for s in samples if s["uid"] == bad]
    assert {s["mode"] for s in failed} == {"real", "none", "random", "resample"}
    assert all(s["score"] is None and s["status"] == "error" for s in failed)
    assert all(
        s["reason"] == "InferenceError: vLLM /completions returned 400: prompt too long" for s in failed
    )


async def test_greedy_resampling_asks_for_one_sample_as_vllm_requires(tiny, server, tmp_path):
    """vLLM refuses n > 1 with greedy sampling ("n must be 1 when using greedy sampling"): at
    eval_temperature 0 the baseline asks for one sample, which stands for all (they coincide);
    at a temperature it asks for max_turns independent ones."""
    from environments import code_repair_eval

    asked: list[int] = []
    real_sample = code_repair_eval.sample_group

    async def sample_group(server_, tokenizer, prompt, n, *args, **kwargs):
        asked.append(n)
        return await real_sample(server_, tokenizer, prompt, n, *args, **kwargs)

    code_repair_eval.sample_group = sample_group
    try:
        for temperature, expected in ((0.0, 1), (0.7, 3)):
            asked.clear()
            env = make_env(tiny, server, write_problems(tmp_path / "p.jsonl"), eval_temperature=temperature,
                           data_dir_to_save_evals=str(tmp_path / f"ev{temperature}"))  # fmt: skip
            await env.setup()
            metrics = await env.evaluate()
            await env.aclose()
            assert asked and set(asked) == {expected} and metrics["eval/resample/unverified"] == 0
    finally:
        code_repair_eval.sample_group = real_sample
