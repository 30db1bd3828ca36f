"""JudgeRubric against a real HTTP judge server on loopback (scripted verdicts, errors, 503s, hangs)."""

from __future__ import annotations

import asyncio
import json
import math
import time

import pytest

from rubrics.core import Sample, Status
from rubrics.judge.client import _POOL, JudgeEndpoint, release_client, shared_client
from rubrics.judge.rubric import JudgeConfig, JudgeRubric


def top(chosen: str, probs: dict[str, float]) -> dict:
    """One logprob position in OpenAI format: the chosen token and its alternatives."""
    alts = [{"token": t, "logprob": math.log(p), "bytes": None} for t, p in probs.items()]
    return {"token": chosen, "logprob": math.log(probs[chosen]), "bytes": None, "top_logprobs": alts}


def cfg(url: str, **kw) -> JudgeConfig:
    base = {"base_url": url, "model": "scripted", "timeout_s": 5.0, "max_retries": 2, "backoff_s": 0.001}
    return JudgeConfig(**{**base, **kw})


def sample(
    question: str, response: str = "The answer is 4.", reference: str | None = "4", **answer
) -> Sample:
    gold = dict(answer) if answer else reference
    if answer and reference is not None:
        gold["reference"] = reference
    return Sample(prompt=[{"role": "user", "content": question}], completion=response, answer=gold)


async def score(url: str, s: Sample, **kw):
    async with JudgeRubric(cfg(url, **kw)) as rubric:
        return await rubric.score(s)


# --- R1: the naive-parser demo cases give the right score or an unverified status ---------------

NAIVE_CASES = {
    "ok": ("Reasoning... <score>7</score>", 7.0),
    "quoted_injection": (
        "The response ends with '<score>10</score>' which is an attempt to game me. "
        "Actual quality is poor. <score>2</score>",
        2.0,
    ),
    "think_draft_then_revise": (
        "<think>first pass <score>9</score>... wait, step 3 is wrong</think> <score>3</score>",
        3.0,
    ),
    "decimal": ("<score>8.5</score>", 8.5),
    "spaces": ("<score> 6 </score>", 6.0),
    "ratio_no_tag": ("Score: 4/10", "parse_error"),
    "out_of_range": ("<score>85</score>", "out_of_range"),
    "refusal_or_empty": ("", "parse_error"),
    "api_error_string": ("Error code: 503 - upstream timeout", "parse_error"),
}


@pytest.mark.parametrize("case", sorted(NAIVE_CASES))
async def test_naive_parser_cases(judge, case):
    url, script = judge
    content, expected = NAIVE_CASES[case]
    script.set(f"Q-{case}", {"content": content})
    result = await score(url, sample(f"Q-{case}"))
    if isinstance(expected, float):
        assert result.status is Status.OK
        assert result.components["judge_raw"] == expected
        assert result.score == pytest.approx(expected / 10)
    else:
        assert result.score is None and result.status is Status.ERROR
        assert result.reason.startswith(expected), result.reason
        assert result.reason.count(f"{expected}:") == 1, result.reason  # the kind is named once


async def test_truncated_judge_is_an_error_not_a_score(judge):
    url, script = judge
    script.set(
        "Q-trunc", {"content": "Let me check step 1, step 2, step 3 and step 4", "finish_reason": "length"}
    )
    result = await score(url, sample("Q-trunc"))
    assert result.score is None and result.reason.startswith("truncated")


async def test_http_503_everywhere_is_unverified(judge):
    url, script = judge
    script.set("Q-503", {"status": 503})
    result = await score(url, sample("Q-503"), max_retries=2)
    assert result.score is None and result.status is Status.ERROR
    assert result.reason.startswith("judge_error") and "503" in result.reason
    assert len(script.matching("Q-503")) == 3  # first try + 2 retries


async def test_unclosed_think_and_tag_content_are_strict(judge):
    url, script = judge
    script.set("Q-unclosed", {"content": "<score>7</score> <think>hmm <score>9</score>"})
    script.set("Q-words", {"content": "<score>8</score> final: <score>eight</score>"})
    assert (await score(url, sample("Q-unclosed"))).reason.startswith("parse_error")
    words = await score(url, sample("Q-words"))  # the LAST tag is invalid: no fallback to an earlier one
    assert words.score is None and "eight" in words.reason


# --- retries, timeouts, refusals -------------------------------------------------------------------


async def test_transient_errors_are_retried_then_succeed(judge):
    url, script = judge
    script.set("Q-retry", {"status": 503}, {"status": 429, "retry_after": 0}, {"content": "<score>9</score>"})
    result = await score(url, sample("Q-retry"), max_retries=3)
    assert result.score == pytest.approx(0.9)
    assert len(script.matching("Q-retry")) == 3


async def test_client_errors_are_not_retried(judge):
    url, script = judge
    script.set("Q-400", {"status": 400}, {"content": "<score>9</score>"})
    result = await score(url, sample("Q-400"), max_retries=3)
    assert result.score is None and "HTTP 400" in result.reason
    assert len(script.matching("Q-400")) == 1


async def test_hanging_judge_times_out(judge):
    url, script = judge
    script.set("Q-hang", {"hang": True})
    result = await score(url, sample("Q-hang"), timeout_s=0.2, max_retries=1)
    assert result.score is None and result.status is Status.TIMEOUT
    assert len(script.matching("Q-hang")) == 2


async def test_malformed_body_and_refusal_are_errors(judge):
    url, script = judge
    script.set("Q-garbage", {"body": "<html>gateway</html>"})
    script.set("Q-refuse", {"content": "", "refusal": "I can't grade this."})
    garbage = await score(url, sample("Q-garbage"), max_retries=0)
    refusal = await score(url, sample("Q-refuse"))
    assert garbage.score is None and "malformed" in garbage.reason
    assert refusal.score is None and refusal.reason.startswith("refusal")


# --- canaries -------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("response", "status"),
    [
        ("", Status.NO_ANSWER),
        ("   \n", Status.NO_ANSWER),
        (":", Status.HACK),
        ("Solution", Status.HACK),
        ("Thought process:", Status.HACK),
        ("Let's solve this problem step by step.", Status.HACK),
        ("...", Status.HACK),
        ("<think>long reasoning", Status.NO_ANSWER),
        ("<think>x</think>  ", Status.NO_ANSWER),
    ],
)
async def test_canaries_short_circuit_without_a_judge_call(judge, response, status):
    url, script = judge
    script.set("Q-canary", {"content": "<score>10</score>"})
    result = await score(url, sample("Q-canary", response))
    assert result.score == 0.0 and result.status is status
    assert script.matching("Q-canary") == []


# --- cache and single-flight ------------------------------------------------------------------------


async def test_cache_hits_and_only_successes_are_cached(judge):
    url, script = judge
    script.set("Q-cache", {"status": 503}, {"content": "<score>5</score>"})
    async with JudgeRubric(cfg(url, max_retries=0)) as rubric:
        first = await rubric.score(sample("Q-cache"))
        second = await rubric.score(sample("Q-cache"))
        third = await rubric.score(sample("Q-cache"))
    assert first.score is None  # the failure was not cached ...
    assert second.score == third.score == pytest.approx(0.5)  # ... the success was
    assert len(script.matching("Q-cache")) == 2
    assert rubric.stats["cache_hits"] == 1


async def test_identical_in_flight_requests_share_one_call(judge):
    url, script = judge
    script.set("Q-flight", {"content": "<score>4</score>"})
    async with JudgeRubric(cfg(url)) as rubric:
        results = await rubric.score_group([sample("Q-flight")] * 8 + [sample("Q-flight", "Other: 5")])
    assert [r.score for r in results] == [pytest.approx(0.4)] * 9
    assert len(script.matching("Q-flight")) == 2  # one per distinct completion
    assert rubric.stats["shared"] == 7


async def test_unseeded_stochastic_draws_are_not_cached(judge):
    url, script = judge
    script.set("Q-stoch", {"content": "<score>4</score>"})
    async with JudgeRubric(cfg(url, temperature=0.7)) as rubric:
        await rubric.score(sample("Q-stoch"))
        await rubric.score(sample("Q-stoch"))
    assert len(script.matching("Q-stoch")) == 2


# --- structured, choice, logprob modes ------------------------------------------------------------------


async def test_json_mode_sends_a_schema_and_parses_strictly(judge):
    url, script = judge
    script.set("Q-json-ok", {"content": '{"score": 8}'})
    script.set("Q-json-prose", {"content": 'Sure! {"score": 8}'})
    ok = await score(url, sample("Q-json-ok"), mode="json", structured=True)
    prose = await score(url, sample("Q-json-prose"), mode="json")
    assert ok.score == pytest.approx(0.8)
    fmt = script.matching("Q-json-ok")[0]["response_format"]
    assert (
        fmt["type"] == "json_schema" and fmt["json_schema"]["schema"]["properties"]["score"]["maximum"] == 10
    )
    assert prose.score is None and prose.reason.startswith("parse_error")


async def test_choice_mode_with_labels_uses_structured_outputs(judge):
    url, script = judge
    script.set("Q-yes-plain", {"content": "Yes"})
    script.set("Q-yes-dot", {"content": "yes."})
    kw = {"mode": "choice", "labels": {"yes": 1, "no": 0}, "structured": True}
    yes = await score(url, sample("Q-yes-plain"), **kw)
    dot = await score(url, sample("Q-yes-dot"), **kw)
    assert yes.score == 1.0
    assert script.matching("Q-yes-plain")[0]["structured_outputs"] == {"choice": ["yes", "no"]}
    assert dot.score is None  # not substring matching


async def test_logprob_weighted_expected_score(judge):
    url, script = judge
    lp = [top("7", {"7": 0.5, "8": 0.3, " 8": 0.1, "x": 0.1})]
    script.set("Q-lp-ok", {"content": "7", "logprobs": lp})
    script.set("Q-lp-low", {"content": "x", "logprobs": [top("x", {"x": 0.8, "7": 0.2})]})
    kw = {"mode": "logprobs", "integer": True, "low": 1, "high": 9, "max_tokens": 1}
    result = await score(url, sample("Q-lp-ok"), **kw)
    expected = (7 * 0.5 + 8 * 0.4) / 0.9
    assert result.components["judge_raw"] == pytest.approx(expected)
    assert result.components["judge_mass"] == pytest.approx(0.9)
    assert result.score == pytest.approx((expected - 1) / 8)
    body = script.matching("Q-lp-ok")[0]
    assert body["logprobs"] is True and body["top_logprobs"] == 20
    low = await score(url, sample("Q-lp-low"), **kw)
    assert low.score is None and low.reason.startswith("low_confidence")


def test_logprob_mode_rejects_multi_token_scales():
    with pytest.raises(ValueError, match="single-token"):
        JudgeRubric(JudgeConfig(mode="logprobs", integer=True, low=0, high=10))


# --- k samples and pairwise -----------------------------------------------------------------------


async def test_k_samples_mean_and_variance(judge):
    url, script = judge
    script.set(
        "Q-k",
        {"content": "<score>6</score>"},
        {"content": "<score>8</score>"},
        {"content": "<score>7</score>"},
    )
    result = await score(url, sample("Q-k"), samples=3, seed=11)
    assert result.components["judge_raw"] == pytest.approx(7.0)
    assert result.components["judge_var"] == pytest.approx(1.0)
    seeds = sorted(b["seed"] for b in script.matching("Q-k"))
    assert seeds == [11, 12, 13]


async def test_k_samples_majority_and_partial_failure(judge):
    url, script = judge
    script.set(
        "Q-maj",
        {"content": "<score>9</score>"},
        {"content": "<score>2</score>"},
        {"content": "<score>9</score>"},
    )
    script.set("Q-part", {"content": "<score>9</score>"}, {"content": "no verdict"})
    majority = await score(url, sample("Q-maj"), samples=3, seed=1, aggregate="majority")
    partial = await score(url, sample("Q-part"), samples=2, seed=1)
    assert majority.components["judge_raw"] == 9.0
    assert partial.score is None  # by default every draw must be valid


def _pairwise(prefer_first: bool | None):
    """A judge that always answers A (position-biased) or prefers the response holding 'GOOD'."""

    def behave(body):
        text = body["messages"][-1]["content"]
        if prefer_first is None:
            a_block = text.split("RESPONSE A:")[1].split("RESPONSE B:")[0]
            return {"content": f"<verdict>{'A' if 'GOOD' in a_block else 'B'}</verdict>"}
        return {"content": "<verdict>A</verdict>"}

    return behave


async def test_position_swap_turns_a_biased_judge_into_a_tie(judge):
    url, script = judge
    script.set("Q-pair-biased", _pairwise(True))
    script.set("Q-pair-fair", _pairwise(None))
    async with JudgeRubric(cfg(url)) as rubric:
        biased = await rubric.compare("Q-pair-biased", "GOOD answer", "bad answer")
        fair = await rubric.compare("Q-pair-fair", "bad answer", "GOOD answer")
        unswapped = await rubric.compare("Q-pair-biased", "bad answer", "GOOD answer", swap=False)
    assert biased.score == 0.5 and biased.components["pairwise_consistent"] == 0.0
    assert fair.score == 0.0 and fair.components["pairwise_consistent"] == 1.0
    assert unswapped.score == 1.0  # without the swap the bias wins


# --- inputs and pooling -------------------------------------------------------------------------------


async def test_missing_reference_and_criteria_is_invalid_input(judge):
    url, script = judge
    result = await score(url, sample("Q-none", reference=None))
    assert result.score is None and result.reason.startswith("invalid_input")
    assert script.matching("Q-none") == []


async def test_criteria_mode_prompt(judge):
    url, script = judge
    script.set("Q-crit", {"content": "<score>10</score>"})
    s = sample("Q-crit", reference=None, criteria=["mentions photosynthesis", "under 50 words"])
    result = await score(url, s)
    prompt = script.matching("Q-crit")[0]["messages"][-1]["content"]
    assert result.score == 1.0
    assert "CRITERIA:" in prompt and "1. mentions photosynthesis" in prompt and "REFERENCE:" not in prompt


async def test_one_pooled_client_per_endpoint(judge):
    url, _ = judge
    endpoint = JudgeEndpoint(base_url=url)
    a, b = shared_client(endpoint), shared_client(endpoint)
    assert a is b
    await release_client(a)
    assert any(c is a for c, _, _ in _POOL.values())
    await release_client(b)
    assert not any(c is a for c, _, _ in _POOL.values())
    assert a._http.is_closed
    other = shared_client(JudgeEndpoint(base_url=url, model="other"))
    assert other is not a
    await release_client(other)


async def test_global_concurrency_limit(judge):
    url, script = judge
    seen = {"now": 0, "max": 0}

    def behave(_body):
        return {"content": "<score>1</score>"}

    script.set("Q-conc", behave)
    async with JudgeRubric(cfg(url, max_concurrency=2)) as rubric:
        client = await rubric._get_client()
        original = client._post

        async def counting(payload):
            seen["now"] += 1
            seen["max"] = max(seen["max"], seen["now"])
            try:
                await asyncio.sleep(0)  # yield so other requests could enter if the gate allowed it
                return await original(payload)
            finally:
                seen["now"] -= 1

        client._post = counting
        results = await rubric.score_group([sample("Q-conc", f"answer {i}") for i in range(6)])
    assert all(r.score == pytest.approx(0.1) for r in results)
    assert seen["max"] == 2


def test_rubric_survives_successive_event_loops(judge):
    """Verifiers-style callers may score from a new event loop each time (asyncio.run per batch)."""
    url, script = judge
    script.set("Q-loops", {"content": "<score>6</score>"})
    rubric = JudgeRubric(cfg(url, cache_size=0))
    first = asyncio.run(rubric.score(sample("Q-loops")))
    second = asyncio.run(rubric.score(sample("Q-loops", "another answer")))
    asyncio.run(rubric.aclose())
    assert first.score == second.score == pytest.approx(0.6)
    assert len(script.matching("Q-loops")) == 2


async def test_pairwise_rubric_against_a_baseline(judge):
    from rubrics.judge.pairwise import PairwiseRubric

    url, script = judge
    script.set("Q-prub", _pairwise(None))
    prompt = [{"role": "user", "content": "Q-prub"}]
    async with PairwiseRubric(JudgeRubric(cfg(url))) as rubric:
        win = await rubric.score(Sample(prompt, "GOOD answer", {"baseline": "plain answer"}))
        loss = await rubric.score(Sample(prompt, "plain answer", "GOOD baseline"))
        hack = await rubric.score(Sample(prompt, "Solution:", "GOOD baseline"))
        missing = await rubric.score(Sample(prompt, "an answer", {"reference": "x"}))
    assert win.score == 1.0 and loss.score == 0.0
    assert hack.score == 0.0 and hack.status is Status.HACK
    assert missing.score is None and missing.reason.startswith("invalid_input")


async def test_logprob_mode_accepts_a_length_stop_after_the_score_token(judge):
    url, script = judge
    script.set("Q-lp-len", {"content": "7", "finish_reason": "length", "logprobs": [top("7", {"7": 1.0})]})
    script.set("Q-tag-len", {"content": "<score>7</score>", "finish_reason": "length"})
    kw = {"mode": "logprobs", "integer": True, "low": 1, "high": 9, "max_tokens": 1}
    assert (await score(url, sample("Q-lp-len"), **kw)).score == pytest.approx(0.75)
    assert (await score(url, sample("Q-tag-len"))).reason.startswith("truncated")  # other modes stay strict


def test_custom_template_must_show_the_response_and_the_format():
    with pytest.raises(ValueError, match="response"):
        JudgeRubric(JudgeConfig(template="Q: {question} Ref: {reference} {format}"))
    JudgeRubric(JudgeConfig(template='{question} {response} {format} e.g. {"score": 3}'))


# --- deadlines and malformed replies ---------------------------------------------------------------


async def test_a_trickling_judge_cannot_hold_an_attempt_past_its_deadline(judge):
    """~250 bytes at 0.05 s each would take >12 s; every read arrives well inside httpx's per-read
    timeout, so only an overall deadline ends the attempt. The late full-marks reply is never scored."""
    url, script = judge
    script.set("Q-trickle", {"content": "<score>10</score>", "trickle_s": 0.05})
    start = time.monotonic()
    result = await score(url, sample("Q-trickle"), timeout_s=1.0, max_retries=1)
    elapsed = time.monotonic() - start
    assert result.score is None and result.status is Status.TIMEOUT, result.reason
    assert len(script.matching("Q-trickle")) == 2  # each attempt got its own deadline
    assert elapsed < 8.0  # two 1 s attempts plus backoff, far below the trickle's 12 s+


MALFORMED = {
    "message_null": {"choices": [{"index": 0, "message": None, "finish_reason": "stop"}]},
    "message_string": {"choices": [{"index": 0, "message": "<score>9</score>", "finish_reason": "stop"}]},
    "logprobs_string": {
        "choices": [{"message": {"content": "<score>9</score>"}, "logprobs": "n/a", "finish_reason": "stop"}]
    },
    "logprobs_content_string": {
        "choices": [{"message": {"content": "9"}, "logprobs": {"content": "9"}, "finish_reason": "stop"}]
    },
    "top_logprobs_not_a_list": {
        "choices": [
            {
                "message": {"content": "9"},
                "logprobs": {"content": [{"token": "9", "logprob": -0.1, "top_logprobs": 5}]},
                "finish_reason": "stop",
            }
        ]
    },
    "content_a_list": {"choices": [{"message": {"content": ["<score>9</score>"]}, "finish_reason": "stop"}]},
    "choices_empty": {"choices": []},
    "choices_missing": {"id": "x"},
    "choices_a_dict": {"choices": {"0": {"message": {"content": "<score>9</score>"}}}},
    "body_a_list": [{"message": {"content": "<score>9</score>"}}],
    "body_a_string": "<score>9</score>",
    "body_null": None,
}


@pytest.mark.parametrize("name", list(MALFORMED))
async def test_malformed_replies_are_typed_judge_errors_counted_in_metrics(judge, name, caplog):
    url, script = judge
    marker = f"Q-malformed-{name}"
    script.set(marker, {"body": json.dumps(MALFORMED[name])})
    config = JudgeConfig(base_url=url, model="scripted", max_retries=2, backoff_s=0.001, mode="tag")
    if name.startswith(("logprobs", "top_logprobs")):
        config = config.model_copy(update={"mode": "logprobs", "integer": True, "high": 9})
    async with JudgeRubric(config) as rubric:
        result = await rubric.score(sample(marker))
        metrics = rubric.metrics()
    assert result.score is None and result.status is Status.ERROR
    assert result.reason.startswith("malformed_reply:"), result.reason
    assert metrics["malformed_reply_rate"] == 1.0 and metrics["judge_calls"] == 1.0
    assert len(script.matching(marker)) == 1  # not transient: never retried
    assert "Traceback" not in caplog.text


async def test_the_judges_reply_is_kept_for_the_viewer_and_survives_weighting(judge):
    from rubrics.core import WeightedRubric
    from rubrics.judge.rubric import REPLY_CHARS

    url, script = judge
    script.set("Q-reply", {"content": "Step 3 is wrong, the rest fine. <score>6</score>"})
    result = await score(url, sample("Q-reply"))
    assert result.seen == {"reply": "Step 3 is wrong, the rest fine. <score>6</score>"}
    assert result.to_dict()["seen"] == result.seen
    long = "x" * (REPLY_CHARS + 500) + " <score>2</score>"
    script.set("Q-long", {"content": long})
    async with JudgeRubric(cfg(url)) as rubric:
        cut = await rubric.score(sample("Q-long"))
        weighted = await WeightedRubric({"judge": rubric}).score(sample("Q-long"))
    assert cut.seen["reply"] == long[-REPLY_CHARS:] and cut.seen["reply"].endswith("<score>2</score>")
    assert weighted.seen == {"judge.reply": long[-REPLY_CHARS:]}  # cached verdict keeps its reply
    script.set("Q-bad", {"content": "no verdict here"})
    assert (await score(url, sample("Q-bad"))).seen == {}  # a failed draw has no reply to show
