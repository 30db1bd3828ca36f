"""Tool-calling episodes for our own environments (see `environments/tools/task.py`).

core.py         a tool: its schema from a typed function, argument checks, output caps, budgets
task.py         ToolTask / ToolConfig: a MultiTurnTask whose turns are tool calls, answered exactly
python.py       the `python(code)` tool: a sandboxed interpreter per episode
mcp_servers.py  the tools of stdio MCP servers
"""
