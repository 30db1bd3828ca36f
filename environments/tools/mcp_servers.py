"""MCP servers as tools of a `ToolTask` (`--env.mcp_servers '["python my_server.py"]'`).

Each command is started once per environment (stdio transport of the `mcp` client) and its tools
are listed and offered beside the environment's own, under their own names and input schemas. A
call goes through the MCP client with the call's time limit (`ToolCall.timeout_s`): a call over it
is answered with a timeout message (the episode goes on); a tool error (`is_error`) is shown to the
model as an error; a server that died or does not answer a request after a failed or timed-out call
is an infrastructure failure (the episode becomes unverified). The server's stderr goes to a temporary file whose last lines are
quoted when it fails.

MCP servers are shared by every episode of the run: a stateful MCP tool is not isolated per episode
(give each episode its own state through the environment's own tools instead).
"""

from __future__ import annotations

import asyncio
import contextlib
import shlex
import sys
import tempfile
from collections.abc import Sequence
from typing import Any

from environments.tools.core import Tool, ToolCall, ToolInfraError, ToolOutput

ALIVE_TIMEOUT_S = 5.0  # a server that does not answer a tool listing within this is gone
CONNECTION_CLOSED = -32000  # the JSON-RPC error code of the mcp client's "Connection closed"


class McpServer:
    """One stdio MCP server (its client is owned by one background task, as anyio requires)."""

    def __init__(self, command: Sequence[str]) -> None:
        if not command:
            raise ValueError("an empty MCP server command")
        self.command = list(command)
        self.tools: list[Tool] = []
        self._client: Any = None
        self._ready = asyncio.Event()
        self._stop = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._error: BaseException | None = None
        self._errlog = tempfile.TemporaryFile("w+", encoding="utf-8", errors="replace")  # noqa: SIM115

    async def start(self, timeout_s: float) -> None:
        """Start the server and list its tools (RuntimeError with its stderr if it cannot)."""
        self._task = asyncio.create_task(self._serve())
        try:
            await asyncio.wait_for(self._ready.wait(), timeout_s)
            if self._client is None:
                raise RuntimeError(f"MCP server {self.name} failed to start: {self.failure()}")
            listing = await asyncio.wait_for(self._client.list_tools(), timeout_s)
        except asyncio.TimeoutError:
            await self.aclose()
            raise RuntimeError(f"MCP server {self.name} did not start within {timeout_s:g} s") from None
        except BaseException:
            await self.aclose()
            raise
        self.tools = [
            Tool(
                t.name,
                t.description or "",
                dict(t.input_schema or {"type": "object"}),
                self._runner(t.name),
                own_timeout=True,
            )
            for t in listing.tools
        ]

    @property
    def name(self) -> str:
        return shlex.join(self.command)

    async def _serve(self) -> None:
        from mcp import Client
        from mcp.client.stdio import StdioServerParameters, stdio_client

        params = StdioServerParameters(command=self.command[0], args=self.command[1:])
        try:
            async with Client(stdio_client(params, errlog=self._errlog)) as client:
                self._client = client
                self._ready.set()
                await self._stop.wait()
        except BaseException as exc:  # noqa: BLE001 - reported by start() and by every later call
            self._error = exc
        finally:
            self._client = None
            self._ready.set()

    def failure(self) -> str:
        """Why the server is not usable: the client's error and the end of the server's stderr."""
        self._errlog.seek(0)
        tail = " | ".join(self._errlog.read().strip().splitlines()[-5:])
        what = f"{type(self._error).__name__}: {self._error}" if self._error else "the connection closed"
        return what + (f" (stderr: {tail[-500:]})" if tail else "")

    async def _alive(self) -> None:
        """ToolInfraError unless the server still answers a request (after a call failed or timed
        out: the model's doing only if the server is fine). MCP has no ping any more: a tool listing
        is asked; an error *response* is an answer too, a closed connection or silence is not."""
        from mcp.shared.exceptions import MCPError

        client = self._client
        try:
            if client is None:
                raise ConnectionError("no client")
            await asyncio.wait_for(client.list_tools(cache_mode="refresh"), ALIVE_TIMEOUT_S)
        except MCPError as exc:
            if exc.code != CONNECTION_CLOSED:
                return
            raise ToolInfraError(f"MCP server {self.name} is gone: {self.failure()}") from exc
        except Exception as exc:  # noqa: BLE001 - whatever the transport says, the server is gone
            raise ToolInfraError(f"MCP server {self.name} is not answering: {self.failure()}") from exc

    def _runner(self, name: str) -> Any:
        async def run(args: dict[str, Any], call: ToolCall) -> ToolOutput:
            client = self._client
            if client is None:
                raise ToolInfraError(f"MCP server {self.name} is not running: {self.failure()}")
            try:
                result = await asyncio.wait_for(
                    client.call_tool(name, args, read_timeout_seconds=call.timeout_s + 1), call.timeout_s
                )
            except asyncio.TimeoutError:
                await self._alive()
                return ToolOutput("", error=True, timed_out=True)
            except Exception as exc:  # noqa: BLE001 - a protocol error, or the server is gone
                await self._alive()
                return ToolOutput(f"error: {exc}", error=True)
            parts = [
                getattr(c, "text", None) or f"[{getattr(c, 'type', 'unknown')} content]"
                for c in result.content
            ]
            return ToolOutput("\n".join(parts), error=bool(result.is_error))

        return run

    async def aclose(self) -> None:
        self._stop.set()
        if self._task is not None:
            with contextlib.suppress(asyncio.TimeoutError, asyncio.CancelledError):
                await asyncio.wait_for(asyncio.shield(self._task), 10)
            if not self._task.done():
                self._task.cancel()
        self._errlog.close()


async def start_servers(commands: Sequence[str], timeout_s: float) -> list[McpServer]:
    """Start every command (a shell-quoted string; `python` means this interpreter), or none:
    one that fails stops those started and raises."""
    servers: list[McpServer] = []
    try:
        for command in commands:
            argv = shlex.split(command)
            if argv and argv[0] in ("python", "python3"):
                argv[0] = sys.executable
            server = McpServer(argv)
            await server.start(timeout_s)
            servers.append(server)
    except BaseException:
        for server in servers:
            await server.aclose()
        raise
    return servers
