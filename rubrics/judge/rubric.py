"""LLM-as-judge rubric over any OpenAI-compatible endpoint (a local vLLM by default).

Contract:
* `JudgeRubric.score(sample)` grades the completion's final segment (after its last `</think>`)
  against `sample.answer` (a reference string, or a dict with `reference` and/or `criteria`; criteria
  may also come from `sample.info["criteria"]`). The question is the last user message of the prompt.
* Canaries short-circuit WITHOUT a judge call: an empty final segment scores 0 (`no_answer`), a
  "master key" reply (":", "Solution", "Let's solve this problem step by step.", ...) scores 0 (`hack`).
* Every judge failure is unverified (`score=None`): `timeout` when the endpoint never answered in
  time, else `error` with the failure kind first in the reason (judge_error, malformed_reply,
  truncated, refusal, parse_error, out_of_range, low_confidence). A failure never becomes a number.
* Verdicts are parsed by one strict grammar (`mode`: tag / json / choice / logprobs; see
  `rubrics.judge.parse`), after cutting out verbatim restatements of our own prompt (a judge that
  repeats the instructions after its verdict is read by its verdict). The score is the verdict mapped onto [0, 1] (`normalize=True`) or the raw
  value; components hold the raw value, the sample variance over `samples` draws and the number of
  grammar tokens neutralised in the response; `seen` holds each valid draw's reply (`reply`,
  `reply 2`, ...: its last `REPLY_CHARS` characters, where the verdict is), for the viewer.
* Successful verdicts are cached (LRU, keyed by endpoint, model, full messages, sampling and parsing
  settings and sample index); identical in-flight requests share one call. Unseeded sampling at
  temperature > 0 is never cached nor shared.
* Usable from any event loop and thread at once: each loop gets its own pooled client (httpx pools
  are loop-bound) and its own in-flight table; the verdict cache is shared and locked.
"""

from __future__ import annotations

import asyncio
import dataclasses
import hashlib
import json
import statistics
import threading
from collections import Counter, OrderedDict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from pydantic import BaseModel, Field

from rubrics.core import RewardResult, Rubric, Sample, Status, normalize_text
from rubrics.judge.client import (
    JudgeCallError,
    JudgeClient,
    JudgeEndpoint,
    endpoint_problem,
    forget_client,
    release_client,
    shared_client,
)
from rubrics.judge.parse import (
    Scale,
    VerdictError,
    expected_from_logprobs,
    parse_choice,
    parse_json,
    parse_tagged,
    prompt_echoes,
)
from rubrics.judge.prompt import (
    PAIRWISE_TEMPLATE,
    SYSTEM,
    Delimiter,
    build_messages,
    default_template,
    format_criteria,
    placeholders,
)
from rubrics.text import final_segment

REPLY_CHARS = 1500  # of a judge's reply kept in `RewardResult.seen` (its end: the verdict is there)

# One-token "master keys" that fool reference-based judges (Zhao et al. 2025, arXiv 2507.08794).
MASTER_KEYS = (
    ":",
    ".",
    ",",
    "solution",
    "solution:",
    "answer",
    "answer:",
    "thought process:",
    "thought process",
    "let's solve this problem step by step.",
    "let's solve this problem step by step",
    "step 1:",
    "解",
    "解：",
    "解答",
    "答案",
    "respuesta:",
    "solución:",
    "lösung:",
)


class JudgeConfig(BaseModel):
    """Endpoint, prompting and parsing settings of a judge. Defaults work against a local vLLM."""

    base_url: str = Field(default="http://127.0.0.1:9002/v1", description="OpenAI-compatible base URL")
    model: str = Field(default="judge", description="Model name served at base_url")
    api_key_env: str = Field(default="JUDGE_API_KEY", description="Env var holding the API key")
    timeout_s: float = Field(default=60.0, gt=0, description="Overall deadline per attempt (s)")
    max_retries: int = Field(default=3, ge=0, description="Retries on transient errors (5xx, 429, timeouts)")
    backoff_s: float = Field(default=0.5, ge=0, description="First backoff ceiling (full jitter, doubles)")
    max_concurrency: int = Field(default=64, ge=1, description="Requests in flight per process")
    mode: Literal["tag", "json", "choice", "logprobs"] = "tag"
    tag: str = Field(default="score", description='Verdict tag for mode=tag ("[[" for [[N]])')
    low: float = 0.0
    high: float = 10.0
    integer: bool = False
    labels: dict[str, float] = Field(default_factory=dict, description="Labelled verdicts, e.g. yes/no")
    template: str | None = Field(default=None, description="User template; None picks a default")
    system_prompt: str | None = SYSTEM
    delimiter: Delimiter = "fence"
    structured: bool = Field(default=False, description="Constrain output (vLLM structured_outputs / json)")
    temperature: float = 0.0
    max_tokens: int = 1024
    seed: int | None = None
    top_logprobs: int = Field(default=20, ge=1, le=20)
    min_valid_mass: float = Field(default=0.5, ge=0, le=1, description="logprobs mode: low_confidence below")
    samples: int = Field(default=1, ge=1, description="Judge draws per completion")
    aggregate: Literal["mean", "majority"] = "mean"
    min_valid_samples: int | None = Field(default=None, description="Valid draws needed (default: all)")
    short_circuit: bool = True
    master_keys: tuple[str, ...] = MASTER_KEYS
    normalize: bool = Field(default=True, description="Map the verdict onto [0, 1]")
    cache_size: int = Field(default=4096, ge=0)

    def endpoint(self) -> JudgeEndpoint:
        return JudgeEndpoint(
            base_url=self.base_url,
            model=self.model,
            api_key_env=self.api_key_env,
            timeout_s=self.timeout_s,
            max_retries=self.max_retries,
            backoff_s=self.backoff_s,
            max_concurrency=self.max_concurrency,
        )

    def scale(self) -> Scale:
        return Scale(low=self.low, high=self.high, integer=self.integer, labels=dict(self.labels))


@dataclass(frozen=True)
class Verdict:
    """One judge draw: a value, or why there is none (`kind`)."""

    value: float | None
    kind: str = "ok"
    reason: str = ""
    mass: float | None = None  # logprobs mode: probability on valid score tokens
    reply: str = ""  # the judge's reply text (cut to REPLY_CHARS), shown by the viewer


class JudgeRubric(Rubric):
    """See module docstring. Pass `client` to share one explicitly; else the process pool is used."""

    name = "judge"

    def __init__(self, config: JudgeConfig | None = None, *, client: JudgeClient | None = None) -> None:
        self.config = config or JudgeConfig()
        self.scale = self.config.scale()
        if self.config.mode in ("choice", "logprobs"):
            tokens = self.scale.tokens()  # raises for a continuous scale
            if self.config.mode == "logprobs" and not self.scale.labels and max(map(len, tokens)) > 1:
                raise ValueError("logprobs mode needs single-token scores: use a 0-9 range or labels")
        if self.config.template is not None and not {"response", "format"} <= placeholders(
            self.config.template
        ):
            raise ValueError("a judge template needs {response} and {format} placeholders")
        self._client = client  # injected by the caller (bound to the caller's loop), else None
        self._owns_client = client is None
        self._clients: dict[asyncio.AbstractEventLoop, JudgeClient] = {}  # owned: one per loop
        self._client_source: JudgeRubric | None = None  # the pairwise twin borrows its parent's clients
        self._lock = threading.Lock()
        self._cache: OrderedDict[str, Verdict] = OrderedDict()
        self._inflight: dict[tuple[asyncio.AbstractEventLoop, str], asyncio.Future[Verdict]] = {}
        self._pair: JudgeRubric | None = None
        self.stats: Counter[str] = Counter()  # judge_calls, cache_hits, shared, short_circuit, <kinds>
        self._keys = {normalize_text(k) for k in self.config.master_keys}

    @property
    def deterministic(self) -> bool:  # type: ignore[override]
        """Greedy or seeded judging repeats itself; unseeded sampling does not (never cached)."""
        return self.config.temperature == 0 or self.config.seed is not None

    # --- public API ------------------------------------------------------------------------
    async def unavailable(self) -> str | None:
        return await endpoint_problem(self.config.endpoint())

    async def _score(self, sample: Sample) -> RewardResult:
        response = final_segment(sample.completion_text)
        if response is None:
            return RewardResult.zero(Status.NO_ANSWER, "unclosed <think> block: no final answer")
        canary = self.canary(response)
        if canary is not None:
            return canary
        return await self.judge(sample, response)

    def canary(self, response: str) -> RewardResult | None:
        """A zero for empty / master-key responses (no judge call), else None."""
        if not self.config.short_circuit:
            return None
        if not response.strip():
            self._bump("short_circuit")
            return RewardResult.zero(Status.NO_ANSWER, "empty response (no judge call)")
        if normalize_text(response) in self._keys or not normalize_text(response):
            self._bump("short_circuit")
            return RewardResult.zero(Status.HACK, f"master-key response {response.strip()[:40]!r}")
        return None

    async def judge(self, sample: Sample, response: str) -> RewardResult:
        """Grade `response` with the judge (no canary short-circuit)."""
        data, template = self._data(sample, response)
        if isinstance(data, RewardResult):
            return data
        messages, flagged = build_messages(
            template, data, self._format_text(), style=self.config.delimiter, system=self.config.system_prompt
        )
        echoes = self._echoes(messages, template)
        verdicts = await asyncio.gather(
            *(self._verdict(messages, i, echoes) for i in range(self.config.samples))
        )
        return self._aggregate(list(verdicts), flagged)

    async def compare(self, question: str, a: str, b: str, *, swap: bool = True) -> RewardResult:
        """Pairwise: 1.0 if `a` is better, 0.0 if `b` is, 0.5 for a tie. With `swap`, both orders are
        judged and an order-dependent (inconsistent) verdict counts as a tie (position-bias guard)."""
        if self._pair is None:
            update = {"mode": "tag", "tag": "verdict", "labels": {"A": 1, "B": 0, "tie": 0.5}, "samples": 1}
            pair = JudgeRubric(self.config.model_copy(update=update))
            pair._owns_client, pair._client_source = False, self
            self._pair = pair
        pair = self._pair
        orders = [(a, b), (b, a)] if swap else [(a, b)]
        calls = []
        for first, second in orders:
            data = {"question": question, "response_a": first, "response_b": second}
            messages, _ = build_messages(
                PAIRWISE_TEMPLATE,
                data,
                pair._format_text(),
                style=self.config.delimiter,
                system=self.config.system_prompt,
            )
            calls.append(pair._verdict(messages, 0, pair._echoes(messages, PAIRWISE_TEMPLATE)))
        verdicts = await asyncio.gather(*calls)
        for v in verdicts:
            if v.value is None:
                return self._failure(v)
        a_wins = [float(v.value) if i == 0 else 1.0 - float(v.value) for i, v in enumerate(verdicts)]  # type: ignore[arg-type]
        consistent = len(set(a_wins)) == 1
        return RewardResult(
            score=a_wins[0] if consistent else 0.5,
            components={"pairwise_consistent": float(consistent)},
            reason="consistent" if consistent else f"order-dependent verdicts {a_wins}: tie",
        )

    def metrics(self) -> dict[str, float]:
        """Reward-health counters: judge calls, cache hit rate, and the rate of each failure kind
        per judge call (alert when parse_error or timeout exceed ~1%)."""
        calls = self.stats["judge_calls"]
        lookups = calls + self.stats["cache_hits"] + self.stats["shared"]
        out = {
            "judge_calls": float(calls),
            "cache_hit_rate": (self.stats["cache_hits"] + self.stats["shared"]) / lookups if lookups else 0.0,
            "short_circuits": float(self.stats["short_circuit"]),
        }
        for kind in (
            "timeout",
            "judge_error",
            "malformed_reply",
            "truncated",
            "refusal",
            "parse_error",
            "out_of_range",
            "low_confidence",
        ):
            out[f"{kind}_rate"] = self.stats[kind] / calls if calls else 0.0
        return out

    async def aclose(self) -> None:
        """Release this rubric's clients: on the running loop now, on other live loops through those
        loops; clients of loops that have ended are forgotten (their sockets went with the loop)."""
        with self._lock:
            clients, self._clients = self._clients, {}
        here = asyncio.get_running_loop()
        for loop, client in clients.items():
            if loop is here:
                await release_client(client)
            elif loop.is_running():
                asyncio.run_coroutine_threadsafe(release_client(client), loop)
            else:
                forget_client(client)

    # --- internals ---------------------------------------------------------------------------
    def _data(self, sample: Sample, response: str) -> tuple[dict[str, str], str] | tuple[RewardResult, str]:
        answer = sample.answer
        reference = answer.get("reference") if isinstance(answer, Mapping) else answer
        criteria = answer.get("criteria") if isinstance(answer, Mapping) else None
        criteria = criteria or sample.info.get("criteria")
        template = self.config.template or default_template(reference is not None, bool(criteria))
        data = {"question": question_of(sample.prompt), "response": response}
        if reference is not None:
            data["reference"] = str(reference)
        if criteria:
            data["criteria"] = format_criteria(criteria)
        missing = {"reference", "criteria"} & placeholders(template) - set(data)
        if missing or (reference is None and not criteria):
            why = f"sample lacks {sorted(missing) or 'a reference or criteria'} for the judge"
            return RewardResult.unverified(Status.ERROR, f"invalid_input: {why}"), template
        return data, template

    def _format_text(self) -> str:
        c, s = self.config, self.scale
        if s.labels:
            what = "one of " + ", ".join(s.labels)
        else:
            kind = "an integer" if c.integer else "a number (decimals allowed)"
            what = f"{kind} from {c.low:g} (worst) to {c.high:g} (best)"
        if c.mode == "tag":
            shown = "[[V]]" if c.tag == "[[" else f"<{c.tag}>V</{c.tag}>"
            return (
                f"Reason briefly, then end your reply with one line {shown}, where V is {what}. "
                "Write that line exactly once, at the very end."
            )
        if c.mode == "json":
            return f'Reply with only a JSON object {{"score": V}}, where V is {what}.'
        return f"Reply with only the verdict V and nothing else, where V is {what}."

    def _body(self, messages: list[dict[str, str]], index: int) -> dict[str, Any]:
        c = self.config
        body: dict[str, Any] = {
            "messages": messages,
            "temperature": c.temperature,
            "max_tokens": c.max_tokens,
        }
        if c.seed is not None:
            body["seed"] = c.seed + index
        if c.mode == "logprobs":
            body.update(logprobs=True, top_logprobs=c.top_logprobs)
        if c.structured and c.mode in ("choice", "logprobs"):
            body["structured_outputs"] = {"choice": list(self.scale.tokens())}
        if c.structured and c.mode == "json":
            schema = {
                "type": "object",
                "properties": {"score": {"type": "number", "minimum": c.low, "maximum": c.high}},
                "required": ["score"],
                "additionalProperties": False,
            }
            body["response_format"] = {
                "type": "json_schema",
                "json_schema": {"name": "verdict", "schema": schema, "strict": True},
            }
        return body

    async def _get_client(self) -> JudgeClient:
        """The client for the running loop: the injected one, else this rubric's pooled client for
        this loop (taken on first use). Clients of loops that have closed are dropped on the way
        (e.g. Verifiers or `asyncio.run` callers using successive loops)."""
        if self._client_source is not None:
            return await self._client_source._get_client()
        if self._client is not None:
            return self._client
        loop = asyncio.get_running_loop()
        with self._lock:
            for dead in [lp for lp in self._clients if lp.is_closed()]:
                forget_client(self._clients.pop(dead))
            client = self._clients.get(loop)
            if client is None:
                client = self._clients[loop] = shared_client(self.config.endpoint())
        return client

    def _echoes(self, messages: list[dict[str, str]], template: str) -> list[str]:
        """Our own prompt text, which a judge may restate around its verdict (cut before parsing)."""
        return prompt_echoes(messages, (template, self._format_text(), self.config.system_prompt or ""))

    async def _verdict(
        self, messages: list[dict[str, str]], index: int, echoes: Sequence[str] = ()
    ) -> Verdict:
        body = self._body(messages, index)
        c = self.config
        deterministic = c.temperature == 0 or c.seed is not None
        if not deterministic:
            return await self._call(body, echoes)
        key = _key(
            {
                "url": c.base_url,
                "model": c.model,
                "body": body,
                "index": index,
                "mode": c.mode,
                "tag": c.tag,
                "scale": [c.low, c.high, c.integer, c.labels],
                "mass": c.min_valid_mass,
            }
        )
        with self._lock:
            cached = self._cache.get(key)
            if cached is not None:
                self._cache.move_to_end(key)
        if cached is not None:
            self._bump("cache_hits")
            return cached
        slot = (asyncio.get_running_loop(), key)  # futures belong to one loop: share within it
        if slot in self._inflight:
            self._bump("shared")
            return await asyncio.shield(self._inflight[slot])
        task = asyncio.ensure_future(self._call(body, echoes))
        self._inflight[slot] = task
        try:
            verdict = await asyncio.shield(task)
        finally:
            if task.done():
                self._inflight.pop(slot, None)
            else:
                task.add_done_callback(lambda _t: self._inflight.pop(slot, None))
        if verdict.value is not None and c.cache_size:
            with self._lock:
                self._cache[key] = verdict
                while len(self._cache) > c.cache_size:
                    self._cache.popitem(last=False)
        return verdict

    async def _call(self, body: dict[str, Any], echoes: Sequence[str] = ()) -> Verdict:
        client = await self._get_client()
        self._bump("judge_calls")
        try:
            reply = await client.chat(body)
        except JudgeCallError as exc:
            kind = "timeout" if exc.timeout else exc.kind
            return self._count(Verdict(None, kind, str(exc)))
        # logprobs mode reads only the first token: stopping there (max_tokens=1) is not a truncation
        if reply.finish_reason == "length" and not (self.config.mode == "logprobs" and reply.logprobs):
            return self._count(Verdict(None, "truncated", "judge hit max_tokens before its verdict"))
        if reply.refusal:
            return self._count(Verdict(None, "refusal", reply.refusal[:200]))
        try:
            verdict = self._parse(reply.content, reply.logprobs, echoes)
            return dataclasses.replace(verdict, reply=(reply.content or "")[-REPLY_CHARS:])
        except VerdictError as exc:
            return self._count(Verdict(None, exc.kind, f"{exc.detail}; reply tail {reply.content[-120:]!r}"))

    def _parse(self, content: str, logprobs: Sequence[Any], echoes: Sequence[str] = ()) -> Verdict:
        c = self.config
        if c.mode == "tag":
            return Verdict(parse_tagged(content, c.tag, self.scale, echoes))
        if c.mode == "json":
            return Verdict(parse_json(content, "score", self.scale, echoes))
        if c.mode == "choice":
            return Verdict(parse_choice(content, self.scale, echoes))
        value, mass = expected_from_logprobs(logprobs, self.scale)
        if mass < c.min_valid_mass:
            raise VerdictError("low_confidence", f"valid-token mass {mass:.3f} < {c.min_valid_mass}")
        return Verdict(value, mass=mass)

    def _bump(self, stat: str) -> None:
        with self._lock:  # several loops and threads may share this rubric
            self.stats[stat] += 1

    def _count(self, verdict: Verdict) -> Verdict:
        self._bump(verdict.kind)
        return verdict

    def _failure(self, verdict: Verdict) -> RewardResult:
        status = Status.TIMEOUT if verdict.kind == "timeout" else Status.ERROR
        return RewardResult.unverified(status, f"{verdict.kind}: {verdict.reason}")

    def _aggregate(self, verdicts: list[Verdict], flagged: int) -> RewardResult:
        valid = [v.value for v in verdicts if v.value is not None]
        need = self.config.min_valid_samples or len(verdicts)
        if len(valid) < need:
            failures = [v for v in verdicts if v.value is None]
            worst = next((v for v in failures if v.kind != "timeout"), failures[0])
            return self._failure(worst)
        if self.config.aggregate == "majority":
            counts = Counter(valid).most_common()
            top = [v for v, n in counts if n == counts[0][1]]
            raw = statistics.fmean(top)
        else:
            raw = statistics.fmean(valid)
        components = {
            "judge_raw": raw,
            "judge_var": statistics.variance(valid) if len(valid) > 1 else 0.0,
            "judge_samples": float(len(valid)),
            "judge_neutralised": float(flagged),
        }
        masses = [v.mass for v in verdicts if v.mass is not None]
        if masses:
            components["judge_mass"] = min(masses)
        score = self.scale.unit(raw) if self.config.normalize else raw
        replies = [v.reply for v in verdicts if v.value is not None and v.reply]
        seen = {"reply" if k == 0 else f"reply {k + 1}": r for k, r in enumerate(replies)}
        reason = f"judge {raw:g} over {len(valid)} draw(s)"
        if flagged:
            reason += f"; neutralised {flagged} judge-grammar token(s) in the response"
        return RewardResult(score=score, components=components, reason=reason, seen=seen)


def question_of(prompt: Sequence[Mapping[str, Any]] | str) -> str:
    """The last user message of a chat prompt (or the prompt itself when it is a string)."""
    if isinstance(prompt, str):
        return prompt
    for message in reversed(prompt):
        if message.get("role") == "user":
            return str(message.get("content") or "")
    return ""


def _key(obj: Any) -> str:
    return hashlib.sha256(json.dumps(obj, sort_keys=True, ensure_ascii=False).encode()).hexdigest()
