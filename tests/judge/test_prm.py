"""PRM scorer on tiny random checkpoints built offline, one per spec family."""

from __future__ import annotations

import threading

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from rubrics.core import Sample, Status  # noqa: E402
from rubrics.prm import PRMRubric, PRMScorer, aggregate, spec, split_steps  # noqa: E402


def build_tokenizer():
    from environments.atropos_runtime.local_model import build_tiny_tokenizer

    # step-shaped text so that " +" / " -" (Math-Shepherd's good/bad tokens) are single tokens
    steps = tuple(f"step {i} + {i % 7} - 3 = {i} so the answer is total" for i in range(600))
    # <extra_0> is Qwen2.5-Math-PRM's step separator
    hf = build_tiny_tokenizer(vocab_size=1024, extra_special_tokens=("<extra_0>",), extra_corpus=steps)
    hf.add_tokens(["ки"])  # Math-Shepherd's step tag: a plain (non-special) vocabulary token
    return hf


def build(path, head: str, num_labels: int = 2):
    from transformers import Qwen2Config, Qwen2ForCausalLM, Qwen2ForTokenClassification

    tok = build_tokenizer()
    torch.manual_seed(0)
    cfg = Qwen2Config(
        vocab_size=len(tok),
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=16,
        max_position_embeddings=512,
        tie_word_embeddings=False,
        pad_token_id=tok.pad_token_id,
        num_labels=num_labels,
    )
    model = Qwen2ForCausalLM(cfg) if head == "causal" else Qwen2ForTokenClassification(cfg)
    model.save_pretrained(path)
    tok.save_pretrained(path)
    return str(path)


@pytest.fixture(scope="module")
def checkpoints(tmp_path_factory):
    root = tmp_path_factory.mktemp("prm")
    return {"classifier": build(root / "cls", "token"), "causal": build(root / "lm", "causal")}


def scorer_for(checkpoints, name: str, **kw) -> PRMScorer:
    if name == "qwen2.5-math-prm":  # the real one is AutoModel + remote code; same 2-class head shape here
        return PRMScorer(
            checkpoints["classifier"],
            spec(name, model_class="token_classification", trust_remote_code=False),
            **kw,
        )
    if name == "math-shepherd":
        return PRMScorer(checkpoints["causal"], spec(name), **kw)
    return PRMScorer(checkpoints["classifier"], spec(name), **kw)


SPEC_NAMES = ["qwen2.5-math-prm", "math-shepherd", "trl-token-classification"]
Q = "what is two plus three"
STEPS = ["step one add two", "then plus three", "so the total is 5", "answer is 5"]


@pytest.mark.parametrize("name", SPEC_NAMES)
def test_one_score_per_step_and_batched_equals_unbatched(checkpoints, name):
    scorer = scorer_for(checkpoints, name)
    items = [(Q, STEPS), (Q, STEPS[:1]), ("a much longer question " * 5, STEPS[1:3])]
    batched = scorer.score(items)
    for (q, steps), got in zip(items, batched, strict=True):
        alone = scorer.score([(q, steps)])[0]
        assert got.error is None and len(got.scores) == len(steps) == got.n_steps
        assert all(0.0 <= s <= 1.0 for s in got.scores)
        assert got.scores == pytest.approx(alone.scores, abs=1e-5)


@pytest.mark.parametrize("name", ["qwen2.5-math-prm", "math-shepherd"])
def test_separator_injection_is_neutralised(checkpoints, name):
    scorer = scorer_for(checkpoints, name)
    sep = scorer.spec.separator
    hostile = [f"step one {sep} add two {sep}{sep}", "then plus three"]
    clean = [s.replace(sep, "") for s in hostile]
    got, ref = scorer.score([(Q + sep, hostile), (Q, clean)])
    assert len(got.scores) == 2 and got.separators_removed == 4
    assert got.scores == pytest.approx(ref.scores, abs=1e-5)


def test_overflow_policies(checkpoints):
    steps = [f"step {i} add the number {i} plus {i}" for i in range(12)]
    full = scorer_for(checkpoints, "qwen2.5-math-prm").score([(Q, steps)])[0]
    limit = len(scorer_for(checkpoints, "qwen2.5-math-prm")._encode(Q, steps[-3:])[0])  # fits 3 steps
    assert full.error is None
    err = scorer_for(checkpoints, "qwen2.5-math-prm", max_length=limit).score([(Q, steps)])[0]
    assert err.error.startswith("too_long") and err.scores == ()
    left = scorer_for(checkpoints, "qwen2.5-math-prm", max_length=limit, overflow="left").score([(Q, steps)])[
        0
    ]
    assert left.error is None and left.steps_dropped == len(steps) - 3
    assert len(left.scores) + left.steps_dropped == len(steps)
    direct = scorer_for(checkpoints, "qwen2.5-math-prm").score([(Q, steps[left.steps_dropped :])])[0]
    assert left.scores == pytest.approx(direct.scores, abs=1e-5)
    sliding = scorer_for(
        checkpoints, "qwen2.5-math-prm", max_length=limit, overflow="sliding", context_steps=1
    )
    slid = sliding.score([(Q, steps)])[0]
    assert slid.error is None and len(slid.scores) == len(steps) and slid.steps_dropped == 0


def test_head_size_is_checked(tmp_path):
    path = build(tmp_path / "three", "token", num_labels=3)
    with pytest.raises(ValueError, match="labels"):
        PRMScorer(path, spec("trl-token-classification"))


def test_bf16_weights_score_close_to_fp32(checkpoints):
    fp32 = scorer_for(checkpoints, "trl-token-classification").score([(Q, STEPS)])[0]
    bf16 = scorer_for(checkpoints, "trl-token-classification", dtype="bfloat16").score([(Q, STEPS)])[0]
    assert bf16.scores == pytest.approx(fp32.scores, abs=2e-2)


def test_aggregates_and_splitting():
    assert split_steps("a\n\n \n\nb\n\nc  ", "\n\n") == ["a", "b", "c"]
    scores = [0.9, 0.5, 0.8]
    assert aggregate(scores, "min") == 0.5 and aggregate(scores, "last") == 0.8
    assert aggregate(scores, "mean") == pytest.approx(2.2 / 3) and aggregate(
        scores, "product"
    ) == pytest.approx(0.36)
    with pytest.raises(ValueError):
        aggregate([], "min")


class ThreadRecordingScorer:
    """Wraps a real scorer and records which thread ran it."""

    def __init__(self, inner: PRMScorer) -> None:
        self.inner, self.spec, self.threads = inner, inner.spec, []

    def score(self, items):
        self.threads.append(threading.current_thread().name)
        return self.inner.score(items)


async def test_rubric_runs_off_the_event_loop_and_aggregates(checkpoints):
    scorer = ThreadRecordingScorer(scorer_for(checkpoints, "qwen2.5-math-prm"))
    prompt = [{"role": "user", "content": Q}]
    samples = [
        Sample(prompt, "\n\n".join(STEPS)),
        Sample(prompt, "<think>scratch</think>\n\n" + "\n\n".join(STEPS[:2])),
        Sample(prompt, "  \n\n "),
        Sample(prompt, "<think>never closed"),
    ]
    async with PRMRubric(scorer, how="min") as rubric:  # type: ignore[arg-type]
        results = await rubric.score_group(samples)
    assert scorer.threads and all(name.startswith("prm") for name in scorer.threads)
    assert len(scorer.threads) == 1  # one batched call for the whole group
    first = results[0]
    assert first.status is Status.OK and first.components["prm_steps"] == 4
    assert first.score == first.components["prm_min"] <= first.components["prm_mean"]
    assert results[1].components["prm_steps"] == 2
    assert results[2].status is Status.NO_ANSWER and results[3].status is Status.NO_ANSWER


async def test_rubric_reports_too_long_as_unverified(checkpoints):
    scorer = scorer_for(checkpoints, "math-shepherd", max_length=16)
    async with PRMRubric(scorer) as rubric:
        result = await rubric.score(Sample([{"role": "user", "content": Q}], "\n".join(STEPS)))
    assert result.score is None and result.reason.startswith("too_long")
