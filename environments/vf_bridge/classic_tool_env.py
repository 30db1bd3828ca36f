"""`load_environment()` for a `ToolTask` (`environments/tools/task.py`, e.g. math_python): a classic
Verifiers (0.1.9.post2 .. 0.3.x) multi-turn env (`classic_multiturn.py`) that offers the task's tools
and answers each call with the task's own `env_step`, so a call gets exactly what it gets under
Atropos: the same argument checks, budgets, error / timeout / truncation messages, and the episode's
tool counts as reported reward components (never scored).

* The tools are offered as OpenAI definitions (`oai_tools` on 0.1.9, `tool_defs` on 0.2+) and the
  serving stack parses the calls (vLLM: `--enable-auto-tool-choice --tool-call-parser hermes`); the
  task's own parser and template check (`ToolTask.start`, Atropos only) are not used, and
  `mcp_servers` is refused (their servers are started by `ToolTask.start`).
* Shared tool resources (`SharedTools`, e.g. the Python tool's warm sandbox pool) start on the first
  rollout, inside the running event loop, and close when the `generate()` / `evaluate()` that ran
  them returns. Rollouts run outside `generate` (e.g. `run_group`) leave them open until a later
  `generate` closes them, or a rollout in another event loop replaces them, or the process exits.
* Per-episode resources (the rollout's Python session) are released when the rollout stops
  (`task.end_episode`, the multi-turn front's `@vf.cleanup`): another rollout never sees its state.
* A tool whose infrastructure failed, or shared resources that cannot start, make the rollout
  unverified (`vf.InfraError`, reward NaN, the reason in `state["rlvr_failure"]`), never wrong.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
from typing import Any, Protocol

from environments.tools.task import ToolTask
from environments.vf_bridge import compat as vf_compat
from environments.vf_bridge.classic_multiturn import build_multiturn_env

log = logging.getLogger("rlvr")
CLOSE_TIMEOUT_S = 60.0  # closing the shared resources (e.g. a sandbox pool) at the end of `generate`


class SharedTools(Protocol):
    """What every rollout's tools share: started in the running event loop, closed in the same one."""

    async def start(self) -> None: ...

    async def aclose(self) -> None: ...


def build_tool_env(task: ToolTask, shared: SharedTools | None = None, **env_kwargs: Any) -> Any:
    """A Verifiers `MultiTurnEnv` offering `task`'s tools (none when its config says `tools: false`),
    its calls answered by `task.env_step`, `shared` held from the first rollout to the end of the
    `generate()` that ran it (see module docstring)."""
    vf = vf_compat.require("classic")  # a clear ImportError on verifiers 0.4 (v1 only) or none
    if task.enabled() and getattr(task.config, "mcp_servers", None):
        raise ValueError(
            "mcp_servers are not offered by the classic Verifiers front (its tools are the task's own); "
            "run MCP tools under Atropos (`serve` / `process` / `evaluate`)"
        )
    tools = task.tools(None) or []
    mixins: tuple[type, ...] = ()
    if tools:
        if "tool_defs" in inspect.signature(vf.Environment.__init__).parameters:  # 0.2+
            env_kwargs["tool_defs"] = [dict(t["function"]) for t in tools]
        else:  # 0.1.9
            env_kwargs["oai_tools"] = tools
        if shared is not None:
            mixins = (_shared_tools_mixin(vf, shared),)
    return build_multiturn_env(task, mixins, **env_kwargs)


def _shared_tools_mixin(vf: Any, shared: SharedTools) -> type:
    """A mixin (before `vf.MultiTurnEnv`) that starts `shared` on a rollout's `setup_state` and closes
    it when the outermost `generate()` returns."""

    class SharedToolsMixin:
        _rlvr_loop: asyncio.AbstractEventLoop | None = None  # where `shared` runs (None: not started)
        _rlvr_lock: tuple[asyncio.AbstractEventLoop, asyncio.Lock] | None = None
        _rlvr_generating = 0  # `generate()` calls in progress

        async def generate(self, *args: Any, **kwargs: Any) -> Any:
            self._rlvr_generating += 1
            try:
                return await super().generate(*args, **kwargs)  # type: ignore[misc]
            finally:
                self._rlvr_generating -= 1
                if not self._rlvr_generating:
                    await self._rlvr_close()

        async def setup_state(self, state: Any) -> Any:
            try:
                await self._rlvr_start()
            except Exception as exc:  # noqa: BLE001 - the tools' infrastructure, never the model's
                state["rlvr_failure"] = f"the tools could not start: {type(exc).__name__}: {exc}"
                raise vf.InfraError(state["rlvr_failure"]) from exc
            return await super().setup_state(state)  # type: ignore[misc]

        async def _rlvr_start(self) -> None:
            loop = asyncio.get_running_loop()
            if self._rlvr_lock is None or self._rlvr_lock[0] is not loop:
                self._rlvr_lock = (loop, asyncio.Lock())
            async with self._rlvr_lock[1]:
                if self._rlvr_loop is loop:
                    return
                await self._rlvr_close()  # left open by a loop that has ended
                await shared.start()
                self._rlvr_loop = loop

        async def _rlvr_close(self) -> None:
            if self._rlvr_loop is None:
                return
            self._rlvr_loop = None
            try:
                await asyncio.wait_for(shared.aclose(), CLOSE_TIMEOUT_S)
            except Exception as exc:  # noqa: BLE001 - the results stand; the sandboxes die with the process
                log.warning("closing the tools' shared resources failed: %s: %s", type(exc).__name__, exc)

    return SharedToolsMixin
