"""Tool definitions and the bookkeeping of their calls (`environments/tools/task.py` runs them).

A `Tool` is an OpenAI tool definition (`schema()`) plus its implementation `run(args, call)`;
`function_tool(fn)` builds one from a (sync or async) function's signature and docstring (parameter
types from the annotations, descriptions from a Google-style `Args:` section). A keyword-only
parameter named `call` is not part of the schema: it receives the `ToolCall` (the episode's `state`,
this call's time and output limits). A tool answers with a `ToolOutput` (or a string / JSON value);
it raises `ToolInfraError` (or returns `infra_error`) only when its own infrastructure failed.
`check_arguments` checks the model's arguments against a schema, `clip_output` cuts output that
is over its byte cap (and says so), `ToolBudget` / `ToolLedger` are an episode's limits and counts.
"""

from __future__ import annotations

import inspect
import json
import re
import types
import typing
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal


class ToolInfraError(Exception):
    """Raised by a tool whose infrastructure failed: the episode becomes unverified."""


@dataclass(frozen=True)
class ToolCall:
    """What a tool implementation gets besides its arguments: the episode's `state` (its own
    resources, e.g. a Python session) and this call's limits (the tool should honour them)."""

    state: dict[str, Any]
    timeout_s: float
    output_bytes: int


@dataclass(frozen=True)
class ToolOutput:
    """A tool's answer. `error`: the tool failed on the model's input (shown, counted);
    `truncated`: the tool already cut its output and said so in `text`; `infra_error`: the
    tool could not run (the episode becomes unverified)."""

    text: str
    error: bool = False
    timed_out: bool = False
    truncated: bool = False
    infra_error: str | None = None


Run = Callable[[dict[str, Any], ToolCall], Awaitable[ToolOutput]]


@dataclass(frozen=True)
class Tool:
    """A tool: its OpenAI definition (`schema()`), its implementation and, optionally, what to
    release at the end of an episode (`end_episode(state)`) and what to do before each call,
    outside its time limit (`prepare(state)`, e.g. wait for a free sandbox session). A tool with
    `own_timeout` stops its call itself at the time limit (the layer waits a grace period longer,
    e.g. for a sandbox to interrupt and report); any other is cancelled by the layer at the limit."""

    name: str
    description: str
    parameters: dict[str, Any]
    run: Run
    end_episode: Callable[[dict[str, Any]], Awaitable[None]] | None = None
    own_timeout: bool = False  # `run` stops itself at `ToolCall.timeout_s` (else the layer stops it then)
    prepare: Callable[[dict[str, Any]], Awaitable[None]] | None = None  # before a call, untimed

    def schema(self) -> dict[str, Any]:
        return {
            "type": "function",
            "function": {"name": self.name, "description": self.description, "parameters": self.parameters},
        }


_JSON_TYPES = {str: "string", int: "integer", float: "number", bool: "boolean", dict: "object", list: "array"}


def _json_type(annotation: Any) -> dict[str, Any]:
    """The JSON schema of a parameter annotation (str, int, float, bool, list[X], dict, Literal,
    X | None)."""
    origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    if origin is Literal:
        return {"enum": list(args)}
    if origin in (typing.Union, types.UnionType):
        rest = [a for a in args if a is not type(None)]
        return _json_type(rest[0]) if len(rest) == 1 else {"anyOf": [_json_type(a) for a in rest]}
    if origin in (list, Sequence, tuple):
        return {"type": "array", **({"items": _json_type(args[0])} if args else {})}
    if origin in (dict, Mapping):
        return {"type": "object"}
    if annotation in _JSON_TYPES:
        return {"type": _JSON_TYPES[annotation]}
    raise TypeError(f"no JSON schema for the annotation {annotation!r}")


def _docstring(fn: Callable[..., Any]) -> tuple[str, dict[str, str]]:
    """(description, {parameter: description}) of a Google-style docstring."""
    doc = inspect.getdoc(fn) or ""
    head, _, args = doc.partition("\nArgs:\n")
    params: dict[str, str] = {}
    name = None
    for line in args.splitlines():
        match = re.match(r"\s+(\w+)(?:\s*\([^)]*\))?:\s*(.*)", line)
        if match and len(line) - len(line.lstrip()) <= 4:
            name, params[match.group(1)] = match.group(1), match.group(2).strip()
        elif line.strip() and name:
            params[name] += " " + line.strip()
        elif not line.startswith(" ") and line.strip():
            break  # the next section (Returns:, ...)
    return " ".join(head.split("\n\n")[0].split()), params


def function_tool(
    fn: Callable[..., Any],
    name: str | None = None,
    end_episode: Callable[[dict[str, Any]], Awaitable[None]] | None = None,
    own_timeout: bool = False,
    prepare: Callable[[dict[str, Any]], Awaitable[None]] | None = None,
) -> Tool:
    """A `Tool` from a (sync or async) function: its name, its docstring's first paragraph as the
    description, its parameters as a JSON schema (required: those without a default; no other
    keys allowed). It returns a `ToolOutput`, a string, or any other value (shown as JSON). A sync
    function runs on the event loop (quick work only: the layer cannot stop it at its time limit);
    make a tool that waits or computes long async, or give it its own limit (`own_timeout`)."""
    hints = typing.get_type_hints(fn)
    description, docs = _docstring(fn)
    properties: dict[str, Any] = {}
    required = []
    wants_call = False
    for p in inspect.signature(fn).parameters.values():
        if p.name == "call" and p.kind is p.KEYWORD_ONLY:
            wants_call = True
            continue
        if p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD):
            raise TypeError(f"{fn.__name__}: *args/**kwargs cannot be described to the model")
        properties[p.name] = _json_type(hints.get(p.name, str))
        if p.name in docs:
            properties[p.name]["description"] = docs[p.name]
        if p.default is p.empty:
            required.append(p.name)
    parameters = {
        "type": "object",
        "properties": properties,
        "required": required,
        "additionalProperties": False,
    }

    async def run(args: dict[str, Any], call: ToolCall) -> ToolOutput:
        value = fn(**args, **({"call": call} if wants_call else {}))
        if inspect.isawaitable(value):
            value = await value
        if isinstance(value, ToolOutput):
            return value
        return ToolOutput(value if isinstance(value, str) else json.dumps(value, default=str))

    return Tool(name or fn.__name__, description, parameters, run, end_episode, own_timeout, prepare)


def check_arguments(raw: Any, parameters: Mapping[str, Any]) -> tuple[dict[str, Any] | None, str]:
    """(arguments, "") or (None, what is wrong), against the top level of a JSON schema: an
    object, its required keys, no unknown key where `additionalProperties` is false, and the
    simple JSON types of the keys given."""
    if isinstance(raw, str):
        try:
            raw = json.loads(raw) if raw.strip() else {}
        except ValueError as exc:
            return None, f"the arguments are not valid JSON ({exc})"
    if not isinstance(raw, dict):
        return None, f"the arguments must be a JSON object, got {type(raw).__name__}"
    props = parameters.get("properties") or {}
    missing = [k for k in parameters.get("required") or () if k not in raw]
    if missing:
        return None, f"missing required argument(s): {', '.join(missing)}"
    extra = [k for k in raw if k not in props]
    if extra and parameters.get("additionalProperties") is False:
        return None, f"unknown argument(s): {', '.join(extra)} (takes: {', '.join(props) or 'none'})"
    for key, value in raw.items():
        want = (props.get(key) or {}).get("type")
        if isinstance(want, str) and not _is_type(value, want):
            return None, f"argument {key!r} must be of type {want}, got {type(value).__name__}"
    return raw, ""


def _is_type(value: Any, want: str) -> bool:
    if want == "integer":
        return isinstance(value, int) and not isinstance(value, bool)
    if want == "number":
        return isinstance(value, int | float) and not isinstance(value, bool)
    kinds = {"string": str, "boolean": bool, "object": dict, "array": list, "null": type(None)}
    return want not in kinds or isinstance(value, kinds[want])


def clip_output(text: str, cap: int) -> tuple[str, bool]:
    """`text` within `cap` bytes (UTF-8), and whether it was cut; a cut says so at its end."""
    data = text.encode("utf-8", errors="replace")
    if len(data) <= cap:
        return text, False
    kept = data[:cap].decode("utf-8", errors="ignore")
    return f"{kept}\n[tool output truncated: {len(data)} bytes, the first {cap} shown]", True


@dataclass
class ToolBudget:
    """An episode's tool budget: calls, seconds (of tool time), bytes (of tool output shown),
    and each call's own caps within what is left."""

    max_calls: int = 8
    seconds: float = 60.0
    output_bytes: int = 32 << 10
    call_timeout_s: float = 10.0
    call_output_bytes: int = 8 << 10


@dataclass
class ToolLedger:
    """What an episode's tools did so far (`ctx.state[LEDGER]`). `calls`: every call the model
    made (malformed and refused ones too); `malformed`: not valid JSON, unknown tool or bad
    arguments; `errors`: the tool ran and failed (traceback, tool error; timeouts included);
    `refused`: not run, a budget was used up."""

    calls: int = 0
    malformed: int = 0
    errors: int = 0
    timeouts: int = 0
    truncated: int = 0
    refused: int = 0
    seconds: float = 0.0
    output_bytes: int = 0

    def counts(self) -> dict[str, float]:
        return {
            "tool_calls": self.calls,
            "tool_malformed": self.malformed,
            "tool_errors": self.errors,
            "tool_timeouts": self.timeouts,
            "tool_truncated": self.truncated,
            "tool_refused": self.refused,
            "tool_seconds": round(self.seconds, 4),
            "tool_output_bytes": self.output_bytes,
        }
