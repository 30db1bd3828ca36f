"""Exact token accounting for multi-turn episodes: the chat template's turn boundaries made explicit.

The policy's context for turn k+1 is the exact id list of turn k (prompt + every sampled id) plus the
ids of the new environment message(s). Only the new messages are rendered and tokenised; earlier
turns are never re-rendered or re-tokenised, so there is no drift, no doubled end-of-turn token and
no lost mask (the failure modes of text-prefix matching, see docs/atropos.md).

How new messages become ids (`ChatTokens.env_turn`): the template renders a fixed probe conversation
`P + [assistant]` (no generation prompt) and `P + [assistant] + new` (with it); the difference is the
text of the new messages plus the next generation prompt. The template's end-of-turn text after an
assistant message is `closing` (ChatML: `<|im_end|>\\n`): the part the model already sampled (its stop
token, a special token) is not added again, the rest (ChatML: `\\n`) is. A turn that ended without
sampling a special token (stop string) gets the whole `closing`; one that sampled a different stop
token (e.g. `<|endoftext|>` under a `<|im_end|>` template) keeps it and gets the whole `closing` too:
what was sampled stays in the sequence.

Templates that rewrite history (e.g. drop `<think>` blocks of earlier assistant turns) are detected
once per tokenizer (`rewrites_history`, by rendering a probe with a think block). Documented choice:
the sequence still extends the exact sampled ids, i.e. the policy conditions on its own full earlier
turns, which is exactly what it was sampled from and what it is trained on, but differs from what a
fresh render of the conversation would show. `ChatTokens(..., on_history_rewrite="error")` refuses
such templates instead.

Environment content is defused before rendering: a special-token string inside it (feedback quoting
model output `<|im_end|>`) gets a word joiner (U+2060) after its first character, so it tokenises as
text and can never forge a turn boundary.

`assemble` builds the trained sequence (assistant ids masked in with their sampled logprobs, all else
-100 with logprob 1.0); `segment_violations` checks that the masked-in runs are exactly the
assistant turns and the masked-out runs exactly the rendered prompt and environment turns.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from itertools import chain, repeat
from operator import ne
from typing import Any, Literal

Message = Mapping[str, Any]
SegmentKind = Literal["prompt", "assistant", "env"]
WORD_JOINER = "\u2060"
_PROBE = ({"role": "system", "content": "rlvr-probe-system"}, {"role": "user", "content": "rlvr-probe-user"})
_X = "rlvr-probe-answer"
_THINK = "<think>rlvr-probe-thought</think>rlvr-probe-answer"
_USER2 = {"role": "user", "content": "rlvr-probe-next"}


class TemplateError(ValueError):
    """The chat template cannot be extended turn by turn (the message says how it fails)."""


@dataclass(frozen=True)
class Segment:
    """A run of ids in an episode's sequence. `text` is exactly `decode(ids)` (special tokens kept);
    for the prompt and environment turns it is the rendered text the ids were encoded from.
    `logprobs` (assistant only) are the sampled logprobs, one per id."""

    kind: SegmentKind
    ids: tuple[int, ...]
    text: str
    logprobs: tuple[float, ...] | None = None


class ChatTokens:
    """A tokenizer's chat template as explicit turn boundaries (see module docstring)."""

    def _read_specials(self, tokenizer: Any) -> None:
        """`tokenizer`, its special token texts (longest first) and their ids."""
        self.tokenizer = tokenizer
        self.special = sorted(
            {t for t in tokenizer.all_special_tokens if t} | set(_added_special(tokenizer)),
            key=len,
            reverse=True,
        )
        self.special_ids = frozenset(tokenizer.all_special_ids) | {
            tokenizer.convert_tokens_to_ids(t) for t in self.special
        }

    def __init__(
        self,
        tokenizer: Any,
        on_history_rewrite: Literal["keep", "error"] = "keep",
        chat_template: str | None = None,
    ) -> None:
        """`chat_template`: a Jinja template (its text) rendered instead of the tokenizer's own."""
        self._read_specials(tokenizer)
        self.chat_template = chat_template
        try:
            self.probe: tuple[dict[str, str], ...] = _PROBE
            generation = self.render(_PROBE, True)
        except Exception:  # noqa: BLE001 - e.g. "System role not supported": probe without one
            self.probe = _PROBE[1:]
            generation = self.render(self.probe, True)
        answered = self.render([*self.probe, _assistant(_X)], False)
        if not answered.startswith(generation + _X):
            raise TemplateError(
                "the template does not put the assistant content right after its generation prompt"
            )
        self.closing = answered[len(generation) + len(_X) :]
        self._base = answered
        self.rewrites_history = self._probe_rewrite(generation)
        if self.rewrites_history and on_history_rewrite == "error":
            raise TemplateError("the chat template rewrites earlier turns (e.g. drops <think> blocks)")
        bos = tokenizer.bos_token
        self._bos = bos if bos and tokenizer("a").input_ids[:1] == [tokenizer.bos_token_id] else None

    def _probe_rewrite(self, generation: str) -> bool:
        last = self.render([*self.probe, _assistant(_THINK)], False)
        earlier = self.render([*self.probe, _assistant(_THINK), _USER2], True)
        return last != generation + _THINK + self.closing or not earlier.startswith(last)

    def render(
        self, messages: Sequence[Message], generation_prompt: bool, tools: Sequence[Message] | None = None
    ) -> str:
        """The template's text; `tools` (OpenAI tool definitions) go to the template's `tools=`."""
        extra: dict[str, Any] = {"tools": [dict(t) for t in tools]} if tools else {}
        if self.chat_template is not None:
            extra["chat_template"] = self.chat_template
        return self.tokenizer.apply_chat_template(
            [_template_message(m) for m in messages],
            tokenize=False,
            add_generation_prompt=generation_prompt,
            **extra,
        )

    def encode(self, text: str) -> tuple[int, ...]:
        return tuple(self.tokenizer.encode(text, add_special_tokens=False))

    def decode(self, ids: Sequence[int], skip_special_tokens: bool = False) -> str:
        return self.tokenizer.decode(list(ids), skip_special_tokens=skip_special_tokens)

    def prompt(self, messages: Sequence[Message], tools: Sequence[Message] | None = None) -> Segment:
        """The first context: the rendered prompt (with the episode's `tools`, if any) and the
        generation prompt (and the tokenizer's BOS when it adds one and the template did not)."""
        text = self.render(messages, True, tools)
        if self._bos and not text.startswith(self._bos):
            text = self._bos + text
        return self._encoded("prompt", text)

    def assistant(self, ids: Sequence[int], logprobs: Sequence[float]) -> Segment:
        if len(ids) != len(logprobs):
            raise ValueError(f"{len(ids)} sampled ids but {len(logprobs)} logprobs")
        return Segment("assistant", tuple(ids), self.decode(ids), tuple(map(float, logprobs)))

    def content(self, segment: Segment) -> str:
        """The assistant message text of a sampled turn (special tokens removed)."""
        return self.decode(segment.ids, skip_special_tokens=True)

    def env_turn(
        self,
        previous: Segment,
        messages: Sequence[Message],
        assistant_message: Message | None = None,
        tools: Sequence[Message] | None = None,
    ) -> tuple[Segment, list[dict[str, Any]]]:
        """The ids that follow the sampled turn `previous`: the rest of its end-of-turn text, the new
        `messages` and the next generation prompt. Returns the segment and the defused messages.
        `assistant_message`: the real previous message, for templates whose rendering of new messages
        depends on it (e.g. tool results after a message with `tool_calls`); `tools`: the episode's
        tool definitions, rendered in the probe as in the prompt."""
        clean = [self.defuse_message(m) for m in messages]
        if assistant_message is None and not tools:
            base, body = self._base, self.render([*self.probe, _assistant(_X), *clean], True)
        else:
            real = dict(assistant_message) if assistant_message is not None else _assistant(_X)
            base = self.render([*self.probe, real], False, tools)
            body = self.render([*self.probe, real, *clean], True, tools)
        if not body.startswith(base):
            raise TemplateError("the template renders earlier turns differently once a message is added")
        return self._encoded("env", self.closing_rest(previous) + body[len(base) :]), clean

    def closing_rest(self, previous: Segment) -> str:
        """What of `closing` the sampled turn did not already produce (see module docstring)."""
        if previous.ids and previous.ids[-1] in self.special_ids:
            tail = self.decode(previous.ids[-1:])
            if tail and self.closing.startswith(tail):
                return self.closing[len(tail) :]
        return self.closing

    def defuse(self, text: str) -> str:
        for token in self.special:
            if token in text:
                text = text.replace(token, token[0] + WORD_JOINER + token[1:])
        return text

    def defuse_message(self, message: Message) -> dict[str, Any]:
        out = dict(message)
        if isinstance(out.get("content"), str):
            out["content"] = self.defuse(out["content"])
        return out

    def _encoded(self, kind: SegmentKind, text: str) -> Segment:
        ids = self.encode(text)
        if self.decode(ids) != text:
            raise TemplateError(f"{kind} text does not survive encode/decode: {text[:80]!r}")
        return Segment(kind, ids, text)


def assemble(segments: Sequence[Segment]) -> tuple[list[int], list[int], list[float]]:
    """(tokens, masks, logprobs) of an episode: assistant ids masked in with their sampled logprobs,
    prompt and environment ids masked out (-100) with logprob 1.0."""
    tokens: list[int] = []
    masks: list[int] = []
    logprobs: list[float] = []
    for seg in segments:
        tokens.extend(seg.ids)
        if seg.kind == "assistant":
            masks.extend(seg.ids)
            logprobs.extend(seg.logprobs or ())
        else:
            masks.extend([-100] * len(seg.ids))
            logprobs.extend([1.0] * len(seg.ids))
    return tokens, masks, logprobs


def segment_violations(
    chat: ChatTokens, segments: Sequence[Segment], tokens: Sequence[int], masks: Sequence[int]
) -> list[str]:
    """`tokens` must be the episode's segments' ids in order, masked in exactly on the assistant turns
    (one run per turn) and out on the prompt and environment turns (adjacent ones form one run), and
    each run must decode to its segments' text. A segment's `text` is `decode(ids)`, checked when it
    was made (`ChatTokens.assistant` decodes its ids, `_encoded` checks the round trip), so only a run
    of several segments is decoded again: joined texts can differ from joined ids' decoding (a
    character split across two segments)."""
    flat = list(chain.from_iterable(seg.ids for seg in segments))
    if list(tokens) != flat:
        return ["tokens are not the concatenation of the episode's segments"]
    if len(masks) != len(flat):
        return [f"{len(masks)} masks for {len(flat)} tokens"]
    runs: list[tuple[bool, list[Segment]]] = []  # (trained, segments) per expected run
    for seg in segments:
        trained = seg.kind == "assistant"
        if runs and runs[-1][0] == trained and not trained:
            runs[-1][1].append(seg)
        elif seg.ids:
            runs.append((trained, [seg]))
    if any(a[0] and b[0] for a, b in zip(runs, runs[1:], strict=False)):
        return ["two assistant turns with no prompt or environment ids between them form one masked run"]
    want = list(chain.from_iterable([trained] * len(seg.ids) for trained, segs in runs for seg in segs))
    got = list(map(ne, masks, repeat(-100)))
    if got != want:
        at = next(k for k, (g, w) in enumerate(zip(got, want, strict=True)) if g != w)
        side = ("in", "out") if got[at] else ("out", "in")
        return [f"token {at} is masked {side[0]}, but its segment is masked {side[1]}"]
    for k, (trained, segs) in enumerate(runs):
        if len(segs) > 1:
            text = chat.decode([t for seg in segs for t in seg.ids])
            expected = "".join(seg.text for seg in segs)
            if text != expected:
                what = "assistant turn" if trained else "prompt/environment text"
                return [f"run {k} ({what}) decodes to {text[:60]!r}, expected {expected[:60]!r}"]
    return []


def _template_message(message: Message) -> dict[str, Any]:
    """`message` as chat templates expect it: tool-call arguments given as a JSON string (OpenAI's
    wire form) become the object they encode (vLLM does the same before rendering); arguments that
    are not valid JSON (a malformed call) stay the string the model wrote."""
    out = dict(message)
    calls = out.get("tool_calls")
    if not calls:
        return out
    fixed = []
    for call in calls:
        call = dict(call)
        function = call.get("function")
        if isinstance(function, Mapping) and isinstance(function.get("arguments"), str):
            try:
                call["function"] = {**function, "arguments": json.loads(function["arguments"])}
            except ValueError:
                pass
        fixed.append(call)
    out["tool_calls"] = fixed
    return out


def _assistant(content: str) -> dict[str, str]:
    return {"role": "assistant", "content": content}


def _added_special(tokenizer: Any) -> list[str]:
    decoder = getattr(tokenizer, "added_tokens_decoder", None) or {}
    return [t.content for t in decoder.values() if getattr(t, "special", False)]
