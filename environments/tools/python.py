"""The `python(code)` tool: a stateful sandboxed interpreter per episode (`sandbox.python_sessions`).

    tool = PythonTool(backend="auto", max_sessions=8)
    await tool.start()                  # the warm pool (in the task's `start`)
    tool.tool                           # a `Tool` for `ToolTask.own_tools()`
    await tool.aclose()                 # in the task's `aclose`

An episode's first call opens its own session from the pool (waiting for a free one, up to
`open_timeout_s`, outside the call's time limit: `Tool.prepare`); later calls of the episode see its variables (a notebook); the session is closed
when the episode ends (`Tool.end_episode`), so another episode never sees its state. Each call runs
with the layer's limits (`ToolCall.timeout_s`, `output_bytes`): over time, the interpreter is
interrupted (state kept; the traceback says so); over the cap, the output is cut and says so. A
sandbox failure (no session can open, `infra_error`) raises / returns an infrastructure failure: the
episode is unverified, never scored as the model's mistake.
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

from environments.tools.core import Tool, ToolCall, ToolInfraError, ToolOutput, function_tool

SESSION = "python_session"  # ctx.state key of the episode's PythonSession


class PythonTool:
    """The pool and the `python` tool over it (see module docstring)."""

    def __init__(
        self,
        backend: str = "auto",
        max_sessions: int = 8,
        memory_mb: int = 512,
        open_timeout_s: float = 300.0,
    ) -> None:
        self.backend, self.max_sessions, self.memory_mb = backend, max_sessions, memory_mb
        self.open_timeout_s = open_timeout_s
        self.pool: Any = None
        self._stack: contextlib.AsyncExitStack | None = None
        self.tool: Tool = function_tool(
            self.python, end_episode=self.end_episode, own_timeout=True, prepare=self.open_session
        )

    async def start(self) -> None:
        """Start the warm pool (SandboxUnavailable / SandboxError if the sandbox cannot run here)."""
        if self.pool is not None:
            return
        from sandbox import SessionLimits, python_sessions

        stack = contextlib.AsyncExitStack()
        limits = SessionLimits(memory_mb=self.memory_mb)
        self.pool = await stack.enter_async_context(
            python_sessions(
                self.backend,
                max_sessions=self.max_sessions,
                limits=limits,
                open_timeout_s=self.open_timeout_s,
            )  # fmt: skip
        )
        self._stack = stack

    async def aclose(self) -> None:
        stack, self._stack, self.pool = self._stack, None, None
        if stack is not None:
            await stack.aclose()

    async def python(self, code: str, *, call: ToolCall) -> ToolOutput:
        """Run Python code in a persistent interpreter (variables, imports and files persist
        between calls of this conversation). Returns what the code prints, then the value of its
        last expression (as a notebook shows it), or the traceback.

        Args:
            code: The Python source to run.
        """
        await self.open_session(call.state)
        session = call.state[SESSION]
        result = await session.run(code, timeout_s=max(call.timeout_s, 0.01), output_bytes=call.output_bytes)
        if result.infra_error is not None:
            return ToolOutput("", infra_error=result.infra_error)
        text = result.text
        if result.reset:
            text += "\n[the interpreter was restarted: earlier variables are gone]"
        return ToolOutput(
            text if text.strip() else "(no output)",
            error=result.error is not None,
            timed_out=result.timed_out,
            truncated=result.truncated,
        )

    async def open_session(self, state: dict[str, Any]) -> None:
        """The episode's session, opened on its first call (waiting for a free one: not the
        model's time); ToolInfraError if none can open."""
        if state.get(SESSION) is not None:
            return
        if self.pool is None:
            raise ToolInfraError("the Python tool's sandbox is not started")
        from sandbox import SandboxError

        try:
            state[SESSION] = await self.pool.open()
        except (SandboxError, asyncio.TimeoutError) as exc:
            raise ToolInfraError(f"no Python session could open: {exc}") from exc

    async def end_episode(self, state: dict[str, Any]) -> None:
        session = state.pop(SESSION, None)
        if session is not None:
            await session.close()
