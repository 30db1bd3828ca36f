"""Process reward models (transformers): one score per reasoning step, aggregated per completion.

Contract:
* A `PRMSpec` says how a PRM family reads steps: where labels sit (a separator token after each step,
  or the last token of each step for token-classification PRMs), the positive class or good/bad
  tokens, the chat template / system prompt, and the model class. `SPECS` covers Qwen2.5-Math-PRM,
  Math-Shepherd and TRL token-classification PRMs.
* Steps are the non-blank pieces of the completion's final segment split on `spec.split`. Separator
  text inside the question or the steps is removed before encoding (counted in `separators_removed`),
  so policy text can never add fake steps; after encoding, the number of label positions must equal the
  number of steps, or the result is an error (never a silently shorter score list).
* Inputs longer than `max_length` are never truncated silently: `overflow="error"` gives a `too_long`
  error; `"left"` keeps the question plus as many of the LAST steps as fit (earlier steps unscored,
  counted in `steps_dropped`); `"sliding"` scores every step in successive windows of question +
  `context_steps` earlier steps + new steps.
* Scoring runs under `torch.inference_mode()` with right padding and an attention mask, in
  length-sorted batches of at most `max_batch_tokens` padded tokens; softmax is taken in float32
  whatever the weights' dtype. `PRMRubric` runs it on one worker thread, never on the event loop.
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from typing import Any, Literal

from rubrics.core import RewardResult, Rubric, Sample, Status
from rubrics.text import final_segment

Aggregate = Literal["min", "last", "mean", "product"]
Overflow = Literal["error", "left", "sliding"]


@dataclass(frozen=True)
class PRMSpec:
    """How one PRM family encodes steps and where its step scores come from."""

    name: str
    kind: Literal["separator_two_class", "separator_token_logits", "step_token_classification"]
    separator: str  # text after each step: a special token, a tag, or "\n"
    split: str = "\n\n"  # how the policy's text is cut into steps
    model_class: Literal["auto", "causal_lm", "token_classification"] = "auto"
    trust_remote_code: bool = False
    system_prompt: str | None = None
    chat_template: bool = False  # wrap question/steps in the tokenizer's chat template
    positive_index: int = 1  # two-class heads: which label means "step is good"
    num_labels: int = 2
    good_token: str = "+"  # token-logit PRMs
    bad_token: str = "-"


SPECS: dict[str, PRMSpec] = {
    "qwen2.5-math-prm": PRMSpec(
        name="qwen2.5-math-prm",
        kind="separator_two_class",
        separator="<extra_0>",
        split="\n\n",
        model_class="auto",
        trust_remote_code=True,
        system_prompt="Please reason step by step, and put your final answer within \\boxed{}.",
        chat_template=True,
    ),
    "math-shepherd": PRMSpec(
        name="math-shepherd",
        kind="separator_token_logits",
        separator="ки",
        split="\n",
        model_class="causal_lm",
    ),
    "trl-token-classification": PRMSpec(
        name="trl-token-classification",
        kind="step_token_classification",
        separator="\n",
        split="\n",
        model_class="token_classification",
    ),
}


@dataclass(frozen=True)
class StepScores:
    """Scores of the scored steps (the last `len(scores)` steps when `steps_dropped` > 0)."""

    scores: tuple[float, ...]
    n_steps: int
    steps_dropped: int = 0
    separators_removed: int = 0
    error: str | None = None  # "too_long: ...", "separator_mismatch: ..."; scores empty then


@dataclass
class _Encoded:
    ids: list[int]
    positions: list[int]
    step_range: tuple[int, int]  # which steps these positions score (indices into the step list)


def split_steps(text: str, sep: str) -> list[str]:
    """Non-blank steps of `text`, stripped."""
    return [s.strip() for s in text.split(sep) if s.strip()]


def aggregate(scores: Sequence[float], how: Aggregate) -> float:
    if not scores:
        raise ValueError("no step scores to aggregate")
    if how == "min":
        return min(scores)
    if how == "last":
        return scores[-1]
    if how == "mean":
        return math.fsum(scores) / len(scores)
    return math.prod(scores)


@dataclass
class PRMScorer:
    """Loads a PRM and scores (question, steps) pairs synchronously (see module docstring)."""

    path: str
    spec: PRMSpec
    device: str = "cpu"
    dtype: str = "float32"  # float32 | bfloat16 | float16
    max_length: int | None = None  # default: the model's max_position_embeddings
    overflow: Overflow = "error"
    context_steps: int = 2  # sliding windows: earlier steps kept as context
    max_batch_tokens: int = 8192
    model: Any = field(init=False, repr=False)
    tokenizer: Any = field(init=False, repr=False)

    def __post_init__(self) -> None:
        import torch
        from transformers import (
            AutoModel,
            AutoModelForCausalLM,
            AutoModelForTokenClassification,
            AutoTokenizer,
        )

        loader = {"auto": AutoModel, "causal_lm": AutoModelForCausalLM}.get(
            self.spec.model_class, AutoModelForTokenClassification
        )
        self.tokenizer = AutoTokenizer.from_pretrained(
            self.path, trust_remote_code=self.spec.trust_remote_code
        )
        import transformers

        # transformers >= 4.56 names it `dtype`; older releases only know `torch_dtype`
        major, minor = (int(x) for x in transformers.__version__.split(".")[:2])
        dtype_kw = "dtype" if (major, minor) >= (4, 56) else "torch_dtype"
        self.model = loader.from_pretrained(
            self.path, trust_remote_code=self.spec.trust_remote_code, **{dtype_kw: getattr(torch, self.dtype)}
        )
        self.model.to(self.device).eval()
        cfg = self.model.config
        self.max_length = self.max_length or getattr(cfg, "max_position_embeddings", None) or 4096
        self._pad = self.tokenizer.pad_token_id if self.tokenizer.pad_token_id is not None else 0
        self._sep_id = None
        if self.spec.kind != "step_token_classification":
            ids = self.tokenizer.encode(self.spec.separator, add_special_tokens=False)
            if len(ids) != 1:
                raise ValueError(
                    f"{self.spec.name}: separator {self.spec.separator!r} is {len(ids)} tokens, need 1"
                )
            self._sep_id = ids[0]
        if self.spec.kind == "separator_token_logits":
            pair = self.tokenizer.encode(
                f"{self.spec.good_token} {self.spec.bad_token}", add_special_tokens=False
            )
            if len(pair) != 2:
                raise ValueError(f"{self.spec.name}: good/bad tokens encode to {pair}, need two ids")
            self._candidates = pair
        elif getattr(cfg, "num_labels", self.spec.num_labels) != self.spec.num_labels:
            raise ValueError(
                f"{self.spec.name}: model has {cfg.num_labels} labels, spec needs {self.spec.num_labels}"
            )

    # --- encoding ---------------------------------------------------------------------------------
    def _clean(self, text: str) -> tuple[str, int]:
        if self.spec.kind == "step_token_classification":
            return text, 0  # positions come from piecewise tokenisation: separators in text are harmless
        return text.replace(self.spec.separator, ""), text.count(self.spec.separator)

    def _encode(self, question: str, steps: Sequence[str]) -> tuple[list[int], list[int]]:
        """Token ids and label positions for question + steps (positions may miscount: checked later)."""
        spec, tok = self.spec, self.tokenizer
        if spec.kind == "step_token_classification":
            ids = tok(question, add_special_tokens=False)["input_ids"]
            if tok.bos_token_id is not None:
                ids = [tok.bos_token_id, *ids]
            positions = []
            for step in steps:
                ids = ids + tok(step + spec.separator, add_special_tokens=False)["input_ids"]
                positions.append(len(ids) - 1)
            return ids, positions
        if spec.chat_template:
            body = "".join(s + spec.separator for s in steps)
            messages = [{"role": "user", "content": question}, {"role": "assistant", "content": body}]
            if spec.system_prompt:
                messages.insert(0, {"role": "system", "content": spec.system_prompt})
            text = tok.apply_chat_template(messages, tokenize=False, add_generation_prompt=False)
            ids = tok.encode(text, add_special_tokens=False)
        else:  # Math-Shepherd: "question step1 ки\nstep2 ки"
            ids = tok.encode(f"{question} " + "\n".join(f"{s} {spec.separator}" for s in steps))
        return ids, [i for i, t in enumerate(ids) if t == self._sep_id]

    def _plan(self, question: str, steps: Sequence[str]) -> list[_Encoded] | str:
        """Encoded windows covering the steps to score, or an error string."""
        ids, pos = self._encode(question, steps)
        if len(ids) <= self.max_length:
            return [_Encoded(ids, pos, (0, len(steps)))]
        if self.overflow == "error":
            return f"too_long: {len(ids)} tokens > max_length {self.max_length}"
        if self.overflow == "left":  # binary search for the fewest dropped leading steps
            lo, hi = 1, len(steps) - 1
            if hi < lo or len(self._encode(question, steps[hi:])[0]) > self.max_length:
                return f"too_long: the question plus the last step exceed max_length {self.max_length}"
            while lo < hi:
                mid = (lo + hi) // 2
                if len(self._encode(question, steps[mid:])[0]) <= self.max_length:
                    hi = mid
                else:
                    lo = mid + 1
            ids, pos = self._encode(question, steps[lo:])
            return [_Encoded(ids, pos, (lo, len(steps)))]
        windows, start = [], 0
        while start < len(steps):
            ctx = max(0, start - self.context_steps)
            end = start
            while (
                end < len(steps) and len(self._encode(question, steps[ctx : end + 1])[0]) <= self.max_length
            ):
                end += 1
            if end == start:
                return (
                    f"too_long: step {start} does not fit with the question in max_length {self.max_length}"
                )
            ids, pos = self._encode(question, steps[ctx:end])
            windows.append(_Encoded(ids, pos[start - ctx :] if len(pos) == end - ctx else pos, (start, end)))
            start = end
        return windows

    # --- scoring ----------------------------------------------------------------------------------
    def score(self, items: Sequence[tuple[str, Sequence[str]]]) -> list[StepScores]:
        """Step scores for each (question, steps); batched across items and windows."""
        plans: list[tuple[int, _Encoded]] = []
        results: list[StepScores | None] = []
        meta = []
        for idx, (question, steps) in enumerate(items):
            question, removed_q = self._clean(question)
            cleaned = [self._clean(s) for s in steps]
            steps = [s for s, _ in cleaned]
            removed = removed_q + sum(n for _, n in cleaned)
            meta.append((len(steps), removed))
            plan = self._plan(question, steps)
            if isinstance(plan, str):
                results.append(StepScores((), len(steps), separators_removed=removed, error=plan))
                continue
            results.append(None)
            plans.extend((idx, enc) for enc in plan)
        window_scores = self._run([enc for _, enc in plans])
        collected: dict[int, list[tuple[_Encoded, list[float]]]] = {}
        for (idx, enc), scores in zip(plans, window_scores, strict=True):
            collected.setdefault(idx, []).append((enc, scores))
        for idx, windows in collected.items():
            n_steps, removed = meta[idx]
            results[idx] = self._assemble(windows, n_steps, removed)
        return [r for r in results if r is not None]

    def _assemble(
        self, windows: list[tuple[_Encoded, list[float]]], n_steps: int, removed: int
    ) -> StepScores:
        scores: list[float] = []
        for enc, window_scores in windows:
            want = enc.step_range[1] - enc.step_range[0]
            if len(window_scores) != want:
                why = f"separator_mismatch: {len(window_scores)} label positions for {want} steps"
                return StepScores((), n_steps, separators_removed=removed, error=why)
            scores.extend(window_scores)
        dropped = windows[0][0].step_range[0]
        return StepScores(tuple(scores), n_steps, steps_dropped=dropped, separators_removed=removed)

    def _run(self, encs: Sequence[_Encoded]) -> list[list[float]]:
        import torch

        out: list[list[float]] = [[] for _ in encs]
        order = sorted(range(len(encs)), key=lambda i: len(encs[i].ids))
        batches, current = [], []
        for i in order:
            width = len(encs[i].ids)
            if current and width * (len(current) + 1) > self.max_batch_tokens:
                batches.append(current)
                current = []
            current.append(i)
        if current:
            batches.append(current)
        with torch.inference_mode():
            for batch in batches:
                width = max(len(encs[i].ids) for i in batch)
                ids = torch.full((len(batch), width), self._pad, dtype=torch.long)
                mask = torch.zeros((len(batch), width), dtype=torch.long)
                for row, i in enumerate(batch):
                    n = len(encs[i].ids)
                    ids[row, :n] = torch.tensor(encs[i].ids)
                    mask[row, :n] = 1
                logits = self._logits(ids.to(self.device), mask.to(self.device))
                for row, i in enumerate(batch):
                    out[i] = self._step_probs(logits[row], encs[i].positions)
        return out

    def _logits(self, ids: Any, mask: Any) -> Any:
        try:
            output = self.model(input_ids=ids, attention_mask=mask, use_cache=False)
        except TypeError:  # heads whose forward takes no use_cache
            output = self.model(input_ids=ids, attention_mask=mask)
        return output.logits if hasattr(output, "logits") else output[0]

    def _step_probs(self, logits: Any, positions: list[int]) -> list[float]:
        picked = logits[positions].float()
        if self.spec.kind == "separator_token_logits":
            return picked[:, self._candidates].softmax(-1)[:, 0].tolist()
        if picked.shape[-1] != self.spec.num_labels:
            raise ValueError(
                f"{self.spec.name}: head has {picked.shape[-1]} outputs, expected {self.spec.num_labels}"
            )
        return picked.softmax(-1)[:, self.spec.positive_index].tolist()


class PRMRubric(Rubric):
    """Aggregated PRM step scores as a reward (components carry every aggregate and the step count)."""

    name = "prm"

    def __init__(self, scorer: PRMScorer, *, how: Aggregate = "min") -> None:
        self.scorer = scorer
        self.how = how
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="prm")

    async def _score(self, sample: Sample) -> RewardResult:
        return (await self._score_group([sample]))[0]

    async def _score_group(self, samples: Sequence[Sample]) -> list[RewardResult]:
        results: list[RewardResult | None] = [None] * len(samples)
        todo, items = [], []
        for i, s in enumerate(samples):
            text = final_segment(s.completion_text)
            steps = split_steps(text, self.scorer.spec.split) if text is not None else []
            if not steps:
                results[i] = RewardResult.zero(Status.NO_ANSWER, "no reasoning steps to score")
                continue
            todo.append(i)
            items.append((_question(s), steps))
        if items:
            loop = asyncio.get_running_loop()
            scored = await loop.run_in_executor(self._pool, self.scorer.score, items)
            for i, steps in zip(todo, scored, strict=True):
                results[i] = self._result(steps)
        return [r for r in results if r is not None]

    def _result(self, s: StepScores) -> RewardResult:
        if s.error is not None:
            return RewardResult.unverified(Status.ERROR, s.error)
        components = {f"prm_{h}": aggregate(s.scores, h) for h in ("min", "last", "mean", "product")}
        components.update(
            prm_steps=float(s.n_steps),
            prm_steps_dropped=float(s.steps_dropped),
            prm_separators_removed=float(s.separators_removed),
        )
        reason = f"{len(s.scores)}/{s.n_steps} steps scored"
        if s.steps_dropped:
            reason += f" (first {s.steps_dropped} dropped: over max_length)"
        return RewardResult(score=components[f"prm_{self.how}"], components=components, reason=reason)

    async def aclose(self) -> None:
        self._pool.shutdown(wait=False)


def _question(sample: Sample) -> str:
    if isinstance(sample.prompt, str):
        return sample.prompt
    users = [m for m in sample.prompt if m.get("role") == "user"]
    return str(users[-1].get("content") or "") if users else ""


def spec(name: str, **overrides: Any) -> PRMSpec:
    """A registered spec, optionally with fields replaced (e.g. `model_class` for a local checkpoint)."""
    return replace(SPECS[name], **overrides)
