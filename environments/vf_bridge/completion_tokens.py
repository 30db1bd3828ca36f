"""Exact tokens for completion-mode Verifiers envs (`message_type="completion"`): no chat template.

`CompletionTokens` is the episode runner's `ChatTokens` for raw text (same interface, no template
probe, so a tokenizer without a chat template works):

* the prompt is the row's prompt text tokenised as vLLM's `/v1/completions` tokenises a string
  prompt (and atroposlib's completion call): `tokenizer(text)`, special tokens added (e.g. BOS);
* an assistant turn is exactly the sampled ids; its text is their decoding without special tokens
  (vLLM's `choice.text`, what Verifiers stores as the completion);
* an environment turn (multi-turn completion envs: `env_response` returns a string) is its text
  tokenised alone, without special tokens, appended after the exact sampled ids (the earlier ids
  are never re-tokenised; a stop token the model sampled stays in the context, where Verifiers'
  re-sent prompt string would drop it).

Conversations are messages for the runtime (prompt and environment text as `user`, turns as
`assistant`: labels only); `classic_group.text_of` joins them into the string Verifiers keeps.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from environments.atropos_runtime.turn_tokens import ChatTokens, Message, Segment
from environments.vf_bridge.classic_group import text_of


class CompletionTokens(ChatTokens):
    """`ChatTokens` for raw text prompts (see module docstring)."""

    def __init__(self, tokenizer: Any) -> None:  # no template probe: nothing to render
        self._read_specials(tokenizer)
        self.probe, self.closing, self._base, self._bos = (), "", "", None
        self.rewrites_history, self.chat_template = False, None

    def prompt(self, messages: Sequence[Message], tools: Sequence[Message] | None = None) -> Segment:
        ids = tuple(self.tokenizer(text_of(list(messages))).input_ids)
        return Segment("prompt", ids, self.decode(ids))

    def env_turn(
        self,
        previous: Segment,
        messages: Sequence[Message],
        assistant_message: Message | None = None,
        tools: Sequence[Message] | None = None,
    ) -> tuple[Segment, list[dict[str, Any]]]:
        ids = self.encode(text_of([dict(m) for m in messages]))
        return Segment("env", ids, self.decode(ids)), [dict(m) for m in messages]
