"""Tools for our own multi-turn environments: declared as typed Python functions, offered through
the chat template, called by the model, answered as `role: tool` messages, every token exact.

An environment declares tools by subclassing `ToolTask` (a `MultiTurnTask`) and returning them
from `own_tools()` (`function_tool(fn)`: a tool from a typed function, `environments/tools/core.py`;
`environments/tools/python.py`: a sandboxed Python interpreter per episode). MCP servers add theirs
(`--env.mcp_servers`, `environments/tools/mcp_servers.py`). Its config subclasses `ToolConfig`.

An episode (`environments/atropos_runtime/episodes.py`): the prompt is rendered with `tools=` (the
model's own template shows them: one that cannot carry tools, ignoring `tools=` or writing calls the
parser does not read back, is refused at start, `vf_bridge.tool_calls.check_tool_template`; tools
need a token server, `--openai.server_type vllm`); each sampled turn is parsed by the model family's tool parser
(vLLM's, `--env.tool_parser`, default hermes: `<tool_call>{json}</tool_call>`); a turn with calls
gets one tool message per call (in order, run one after another: a parallel call of two gets two
messages), a turn without calls is the final answer (`answered`). The sampled ids stay exactly as
sampled (masked in); tool messages and template text are rendered by `ChatTokens.env_turn` after
the real assistant message (masked out, -100), as user turns are. The message's text before the
first call loses its trailing whitespace (templates write their own separator), so a call written as
the template writes it renders back to exactly the sampled text.

The model's mistakes are answered, never raised: a call that is not valid JSON, an unknown tool,
arguments that do not fit the schema, a tool that raises, each get an `error: ...` tool message
and are counted (`tool_malformed`, `tool_errors`). Per-episode budgets (`ToolBudget`): calls, total
seconds and output bytes; a call is also capped in time and bytes. A call over time is stopped and
answered with a timeout message; output over the cap is cut and the message says so; calls past
a used-up budget are not run and the message says that. A tool's infrastructure failure (the
sandbox is down, the MCP server died: `ToolOutput.infra_error` or `ToolInfraError`) is not the
model's: the episode becomes unverified (`EnvStep.failure`), never a wrong answer.

Per-turn counts go to the turn's `info`; the episode totals become reward components
(`tool_calls`, `tool_errors`, ...: reported, not added to the score). The reward grades the final
answer only: the last assistant message, if it made no call.
"""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any

from pydantic import Field

from environments.atropos_runtime.base import RubricEnvConfig
from environments.atropos_runtime.config_types import NameList
from environments.atropos_runtime.episodes import EnvStep, EpisodeContext, MultiTurnTask
from environments.task import Item
from environments.tools.core import (
    Tool,
    ToolBudget,
    ToolCall,
    ToolInfraError,
    ToolLedger,
    ToolOutput,
    check_arguments,
    clip_output,
)
from rubrics.core import RewardResult, Sample

# --env.chat_template names that need no file: ChatML with hermes tool calls, for ChatML models whose
# own template has no tools (SmolLM2-Instruct; without tools it renders what SmolLM2's template does)
BUILTIN_TEMPLATES = {"chatml-tools": Path(__file__).with_name("chatml_tools.jinja")}
LEDGER = "tool_ledger"  # ctx.state key of the episode's ToolLedger
GRACE_S = 5.0  # past a call's time limit, before the layer stops a tool that stops itself (`own_timeout`)


class ToolConfig(RubricEnvConfig):
    """The options of a tool environment (mixed into its config)."""

    tools: bool = Field(default=True, description="Offer the tools (false: the same env without them)")
    tool_parser: str = Field(default="hermes", description="vLLM tool parser of the model's family")
    max_tool_calls: int = Field(default=8, description="Tool calls per episode")
    tool_seconds: float = Field(default=60.0, description="Tool time per episode (seconds)")
    tool_output_bytes: int = Field(default=32 << 10, description="Tool output shown per episode (bytes)")
    tool_call_timeout_s: float = Field(default=10.0, description="Time limit of one tool call")
    tool_call_output_bytes: int = Field(default=8 << 10, description="Output shown of one tool call (bytes)")
    mcp_servers: NameList = Field(
        default_factory=list,
        description="stdio MCP server commands whose tools are offered too (JSON array: '[\"python srv.py\"]')",
    )
    mcp_timeout_s: float = Field(default=30.0, description="Start-up time limit of an MCP server")
    chat_template: str | None = Field(
        default=None,
        description="Chat template instead of the tokenizer's own: a Jinja file, or chatml-tools (ChatML "
        "with hermes tool calls, for ChatML models whose template has no tools, e.g. SmolLM2)",
    )


class ToolTask(MultiTurnTask):
    """A `MultiTurnTask` whose episodes are tool-calling conversations (see module docstring).
    Subclasses return their tools from `own_tools()`; the config is a `ToolConfig`."""

    max_turns = 8

    def __init__(self, config: Any) -> None:
        super().__init__(config)
        self._mcp: list[Any] = []  # started McpServers
        self._parser: Any = None  # the ToolCallParser, once started
        self.stats: Counter[str] = Counter()  # over every episode: `episodes` and `ToolLedger.counts`

    def own_tools(self) -> list[Tool]:
        return []

    def budget(self) -> ToolBudget:
        c = self.config
        return ToolBudget(
            c.max_tool_calls,
            c.tool_seconds,
            c.tool_output_bytes,
            c.tool_call_timeout_s,
            c.tool_call_output_bytes,
        )

    def enabled(self) -> bool:
        return bool(getattr(self.config, "tools", True))

    def chat_template(self) -> str | None:
        """The text of `--env.chat_template` (a built-in name or a file), None when not set."""
        name = getattr(self.config, "chat_template", None)
        if not name:
            return None
        path = BUILTIN_TEMPLATES.get(name, Path(name))
        try:
            return path.read_text(encoding="utf-8")
        except OSError as exc:
            raise ValueError(
                f"--env.chat_template {name!r} is neither a built-in ({', '.join(BUILTIN_TEMPLATES)}) nor a "
                f"readable file: {exc.strerror or exc}"
            ) from exc

    def all_tools(self) -> list[Tool]:
        return [*self.own_tools(), *(t for server in self._mcp for t in server.tools)]

    async def start(self, tokenizer: Any | None) -> None:
        """Start the MCP servers, build the tool parser, and check that the chat template can
        carry these tools (`ToolSupportError` otherwise). Idempotent."""
        if not self.enabled() or self._parser is not None:
            return
        if tokenizer is None:
            raise SystemExit(
                "tool environments sample token-in/token-out: use a token server "
                "(--openai.server_type vllm), or --env.tools false"
            )
        from environments.atropos_runtime.turn_tokens import ChatTokens
        from environments.tools.mcp_servers import start_servers
        from environments.vf_bridge.tool_calls import ToolCallParser, ToolSupportError, check_tool_template

        self._mcp = await start_servers(self.config.mcp_servers, self.config.mcp_timeout_s)
        names = [t.name for t in self.all_tools()]
        if len(set(names)) != len(names):
            await self.aclose()
            raise ValueError(f"two tools have the same name: {sorted(names)}")
        try:
            parser = ToolCallParser(self.config.tool_parser, tokenizer)
            chat = ChatTokens(tokenizer, chat_template=self.chat_template())
            check_tool_template(chat, parser, [t.schema() for t in self.all_tools()])
        except ValueError as exc:  # ToolSupportError or a bad --env.chat_template: stop the MCP servers
            await self.aclose()
            template_refused = isinstance(exc, ToolSupportError) and str(exc).startswith("the chat template")
            if template_refused and not self.config.chat_template:
                raise ToolSupportError(f"{exc} (a ChatML model: --env.chat_template chatml-tools)") from exc
            raise
        self._parser = parser

    async def aclose(self) -> None:
        servers, self._mcp, self._parser = self._mcp, [], None
        for server in servers:
            await server.aclose()

    def tools(self, item: Item | None) -> list[dict[str, Any]] | None:
        return [t.schema() for t in self.all_tools()] if self.enabled() else None

    def assistant_message(self, content: str) -> dict[str, Any]:
        if not self.enabled() or self._parser is None:
            return {"role": "assistant", "content": content}
        message = self._parser.parse(content, self.tools(None)).message()
        if not message.get("tool_calls"):
            return {"role": "assistant", "content": content}
        # templates put their own separator between the text and the first call
        message["content"] = (message["content"] or "").rstrip() or None
        return message

    async def env_step(self, ctx: EpisodeContext) -> EnvStep:
        ledger: ToolLedger = ctx.state.setdefault(LEDGER, ToolLedger())
        calls = ctx.messages[-1].get("tool_calls") or []
        if not calls:
            return EnvStep(done=True, reason="answered")
        if ctx.last_turn:
            return EnvStep(done=True, reason="max_turns", info={"tool_calls_unanswered": len(calls)})
        before = ledger.counts()
        messages = []
        for call in calls:
            name, text, infra_error, seconds = await self._answer(call, ctx.state, ledger)
            if infra_error is not None:  # the tool's infrastructure failed: not the model's doing
                failure = f"tool {name!r} could not run: {infra_error}"
                return EnvStep(failure=failure, reason="error", info=_delta(before, ledger))
            messages.append(  # `seconds`: the call's own time, for the viewer (templates ignore it)
                {
                    "role": "tool",
                    "tool_call_id": call.get("id", ""),
                    "name": name,
                    "content": text,
                    "seconds": round(seconds, 4),
                }  # fmt: skip
            )
        return EnvStep(messages, info=_delta(before, ledger))

    async def _answer(
        self, call: Mapping[str, Any], state: dict[str, Any], ledger: ToolLedger
    ) -> tuple[str, str, str | None, float]:
        """(the tool's name, the tool message's text, the infrastructure failure or None, the seconds
        the call ran: 0 for a call that was not run)."""
        function = call.get("function") or {}
        name, raw = str(function.get("name") or ""), function.get("arguments")
        ledger.calls += 1
        budget, tools = self.budget(), {t.name: t for t in self.all_tools()}
        tool = tools.get(name)
        args, problem = check_arguments(raw, tool.parameters if tool else {})
        if tool is None:
            ledger.malformed += 1
            what = "is not valid JSON" if args is None and not name else f"names an unknown tool {name!r}"
            return name, f"error: the tool call {what}; the tools are: {', '.join(tools)}", None, 0.0
        if args is None:
            ledger.malformed += 1
            return name, f"error: {name}: {problem}", None, 0.0
        left_s, left_b = budget.seconds - ledger.seconds, budget.output_bytes - ledger.output_bytes
        used = _used_up(budget, ledger.calls, left_s, left_b)
        if used:
            ledger.refused += 1
            return (
                name,
                f"error: not run: this episode's budget of {used} is used up; answer without tools",
                None,
                0.0,
            )
        timeout, cap = min(budget.call_timeout_s, left_s), int(min(budget.call_output_bytes, left_b))
        try:
            if tool.prepare is not None:  # not the model's time (e.g. waiting for a free session)
                await tool.prepare(state)
        except ToolInfraError as exc:
            return name, "", str(exc), 0.0
        start = time.monotonic()
        try:
            limit = timeout + (GRACE_S if tool.own_timeout else 0.0)
            out = await asyncio.wait_for(tool.run(args, ToolCall(state, timeout, cap)), limit)
        except asyncio.TimeoutError:
            out = ToolOutput("", error=True, timed_out=True)
        except ToolInfraError as exc:
            out = ToolOutput("", infra_error=str(exc))
        except Exception as exc:  # noqa: BLE001 - the tool failed on the model's arguments
            out = ToolOutput(f"error: {type(exc).__name__}: {exc}", error=True)
        took = time.monotonic() - start
        ledger.seconds += took
        if out.infra_error is not None:
            return name, "", out.infra_error, took
        text, cut = clip_output(out.text, cap + (256 if out.truncated else 0))
        if out.timed_out:
            text += f"\n[tool call stopped: over its time limit of {timeout:g} s]"
        ledger.errors += out.error or out.timed_out
        ledger.timeouts += out.timed_out
        ledger.truncated += cut or out.truncated
        ledger.output_bytes += len(text.encode("utf-8", errors="replace"))
        return name, text, None, took

    async def end_episode(self, ctx: EpisodeContext) -> None:
        """Release every tool's per-episode resources (e.g. close the episode's Python session)."""
        ledger = ctx.state.get(LEDGER) or ToolLedger()
        self.stats.update({**ledger.counts(), "episodes": 1})
        for tool in self.all_tools():
            if tool.end_episode is not None:
                await tool.end_episode(ctx.state)

    def final_sample(self, ctx: EpisodeContext) -> Sample:
        """The final answer only: the last assistant message if it made no tool call, else ""."""
        last = next((m for m in reversed(ctx.messages) if m["role"] == "assistant"), {})
        return ctx.item.sample("" if last.get("tool_calls") else str(last.get("content") or ""))

    def finalize(self, ctx: EpisodeContext, result: RewardResult) -> RewardResult:
        """The episode's tool counts as reported components (the score is unchanged)."""
        ledger = ctx.state.get(LEDGER) or ToolLedger()
        return replace(result, components={**result.components, **ledger.counts()})


def _used_up(budget: ToolBudget, calls: int, left_s: float, left_b: int) -> str:
    """Which of the episode's budgets is used up ("" if none), in words."""
    if calls > budget.max_calls:
        return f"{budget.max_calls} tool calls"
    if left_s <= 0:
        return f"{budget.seconds:g} s of tool time"
    if left_b <= 0:
        return f"{budget.output_bytes} bytes of tool output"
    return ""


def _delta(before: Mapping[str, float], ledger: ToolLedger) -> dict[str, float]:
    """This turn's tool counts (the ledger's growth since `before`)."""
    return {k: round(v - before[k], 4) for k, v in ledger.counts().items()}
