"""Verifiers' tool definitions as the bridge needs them (classic API, 0.1.9.post2 .. 0.3.x), and the
one check that a tool env can run here (`tool_parser_for`; the parsing itself is
`environments.vf_bridge.tool_calls`, independent of Verifiers)."""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from typing import Any

from environments.atropos_runtime.turn_tokens import ChatTokens
from environments.vf_bridge.tool_calls import ToolCallParser, ToolSupportError, check_tool_template


def tool_specs(env: Any, info: Any) -> list[dict[str, Any]]:
    """The OpenAI tool definitions a rollout of `env` with row `info` offers, by Verifiers' own rule
    (`init_state`): 0.2+ `info["tool_defs"]` else `env.tool_defs`; 0.1.9 `env.oai_tools`."""
    if isinstance(info, str):
        info = json.loads(info) if info.strip() else {}
    defs = (
        info["tool_defs"]
        if isinstance(info, Mapping) and "tool_defs" in info
        else getattr(env, "tool_defs", None)
    )
    return [_openai_tool(t) for t in (defs or getattr(env, "oai_tools", None) or [])]


def state_tools(state: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The tools a Verifiers state says its rollout has (`tool_defs` on 0.2+, `oai_tools` on 0.1.9)."""
    defs = state.get("tool_defs") if "tool_defs" in state else state.get("oai_tools")
    return [_openai_tool(t) for t in defs or []]


def _openai_tool(tool: Any) -> dict[str, Any]:
    """An OpenAI `{"type": "function", "function": {...}}` from either that or a vf.Tool (0.2+)."""
    if isinstance(tool, Mapping) and "function" in tool:
        return {"type": "function", **dict(tool)}
    get = tool.get if isinstance(tool, Mapping) else lambda k, d=None: getattr(tool, k, d)
    function = {
        "name": get("name"),
        "description": get("description") or "",
        "parameters": get("parameters") or {},
    }
    return {"type": "function", "function": function}


def tool_names(tools: Iterable[Mapping[str, Any]]) -> list[str]:
    return [str(t.get("function", {}).get("name")) for t in tools]


def tool_parser_for(
    parser_name: str, tokenizer: Any, token_capable: bool, tools: list[dict[str, Any]]
) -> ToolCallParser:
    """The tool parser for an env offering `tools`, or `ToolSupportError` saying why tools cannot
    work with this server, parser and chat template."""
    if not token_capable:
        raise ToolSupportError(
            "tool envs need a token server (server_type vllm/sglang), where the bridge renders the "
            "tools and parses the calls itself"
        )
    parser = ToolCallParser(parser_name, tokenizer)
    check_tool_template(ChatTokens(tokenizer), parser, tools)
    return parser
