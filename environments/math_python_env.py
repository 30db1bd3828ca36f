r"""Math word problems with a Python tool: the model may call `python(code)` (a stateful sandboxed
interpreter, one per episode) before it answers in `\boxed{}`.

Data, prompt and verification are math_env's (`--env.dataset`, `rubrics.math.MathRubric`); the
episode is a tool conversation (`environments/atropos_runtime/tools.py`): the tool is offered
through the model's chat template (`--env.tool_parser`, default hermes), each call is answered
with what the code printed, and the episode ends with a turn that makes no call. The reward is the
final answer's only; tool calls, malformed calls and tool errors are reported (reward components
`tool_calls`, `tool_errors`, ... and per-turn metrics), never rewarded. The interpreter is a
`sandbox.PythonSession` (`--env.python_backend`, `--env.python_sessions` at once, each closed when
its episode ends); a sandbox failure makes the episode unverified, not wrong. `--env.mcp_servers`
adds the tools of stdio MCP servers. A ChatML model whose template has no tools (SmolLM2) gets
them from `--env.chat_template chatml-tools`; `--env.tool_examples N` puts N worked tool calls
before each problem, for a small model that does not call tools unprompted (`rlvr demo --env
math-python` runs both on the local real model).

`evaluate` runs the eval items twice, with the tool and without it (`--env.eval_without_tools
false`: with it only), and prints both accuracies; `--env.tools false` is math_env's single-turn
task in this env's episode form (the model answers in one turn).

    python environments/math_python_env.py process --env.total_steps 8 --openai.base_url http://127.0.0.1:9001/v1

As a Verifiers environment (`load_environment(**config)`, hub package `rlvr-math-python`): a classic
multi-turn tool env (`environments/vf_bridge/classic_tool_env.py`) with the same rows, prompt, tool,
budgets and reward; the server parses the calls (vLLM `--enable-auto-tool-choice --tool-call-parser
hermes`); each rollout's interpreter is its own, closed when the rollout stops; a sandbox failure is
reward NaN (unverified). No v1 Taskset: the v1 front (`environments/vf_bridge/v1_front.py`) sends
`env_step`'s replies as plain turns (`interaction.turn`) and v1 offers a model only the tools of its
`Task.toolsets()`, MCP servers that v1 launches per rollout and its harness calls itself, so our
tool's answers (budgets, ledger, unverified on a sandbox failure) and its per-rollout sandbox session
cannot ride it without a project MCP server for v1's runtime.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from typing import Any

from pydantic import Field

from environments.atropos_runtime.base import RubricEnv
from environments.atropos_runtime.modes import print_summary, run_evaluate
from environments.math_env import MathEnvConfig, MathTask
from environments.task import Item
from environments.tools.core import Tool
from environments.tools.python import PythonTool
from environments.tools.task import ToolConfig, ToolTask

TOOL_SYSTEM_PROMPT = (
    "Solve the math problem. You may run Python code with the `python` tool (a persistent "
    "interpreter: variables stay defined between calls; print what you want to see). When you are "
    "done, give the final answer on its own at the end, inside \\boxed{}, e.g. \\boxed{42}. Put "
    "exactly one answer in the box."
)


EXAMPLE_SUMS = ((3, 4), (5, 8), (2, 7))


def tool_examples(count: int) -> list[dict[str, Any]]:
    """`count` worked examples of using the python tool, as prompt turns in the OpenAI message form
    (the chat template renders the calls and results as the model would write and see them)."""
    turns: list[dict[str, Any]] = []
    for n, (a, b) in enumerate(EXAMPLE_SUMS[:count], 1):
        call = {"id": f"example_{n}", "type": "function",
                "function": {"name": "python", "arguments": json.dumps({"code": f"print({a} + {b})"})}}  # fmt: skip
        turns += [
            {"role": "user", "content": f"Calculate {a} + {b}."},
            {"role": "assistant", "content": None, "tool_calls": [call]},
            {"role": "tool", "tool_call_id": call["id"], "name": "python", "content": str(a + b)},
            {"role": "assistant", "content": f"\\boxed{{{a + b}}}"},
        ]
    return turns


class MathPythonEnvConfig(MathEnvConfig, ToolConfig):
    max_turns: int = Field(default=6, description="Assistant turns per episode (tool calls and the answer)")
    max_episode_tokens: int | None = Field(default=None, description="Token budget of one episode")
    python_backend: str = Field(default="auto", description="Sandbox of the Python tool: auto, bwrap, docker")
    python_sessions: int = Field(
        default=16,
        description="Python sessions at once (an episode holds one from its first call to its end; "
        "others wait for one, outside their tool time)",
    )
    python_memory_mb: int = Field(default=512, description="Memory of one Python session")
    eval_without_tools: bool = Field(default=True, description="evaluate: also run without the tool")
    tool_examples: int = Field(
        default=0,
        ge=0,
        le=len(EXAMPLE_SUMS),
        description="Worked examples before each problem (prompt turns: a sum, a python call that prints "
        "it, the tool's answer, the boxed result), for small models that do not call tools unprompted",
    )


class MathPythonTask(ToolTask, MathTask):
    config: MathPythonEnvConfig

    def __init__(self, config: MathPythonEnvConfig) -> None:
        super().__init__(config)
        self.python = PythonTool(config.python_backend, config.python_sessions, config.python_memory_mb)

    def own_tools(self) -> list[Tool]:
        return [self.python.tool]

    def item(self, row: Mapping[str, Any], index: int) -> Item:
        item = super().item(row, index)
        if not self.enabled():
            return item
        system, question = item.prompt[:1], item.prompt[1:]  # math_env's prompt: system, then the problem
        if not self.config.system_prompt:
            system = [{"role": "system", "content": TOOL_SYSTEM_PROMPT}]
        prompt = [*system, *tool_examples(self.config.tool_examples), *question]
        return Item(item.uid, prompt, item.answer, item.info)

    async def start(self, tokenizer: Any | None) -> None:
        await super().start(tokenizer)
        if self.enabled():
            try:
                await self.python.start()
            except BaseException:
                await super().aclose()  # the MCP servers started above
                raise

    async def aclose(self) -> None:
        try:
            await super().aclose()
        finally:
            await self.python.aclose()


class MathPythonEnv(RubricEnv):
    name = "math_python"
    env_config_cls = MathPythonEnvConfig
    task_cls = MathPythonTask

    async def evaluate(self, *args: Any, **kwargs: Any) -> dict[str, Any]:
        """Accuracy with the tool and without it (each run's metrics.json / samples.jsonl in its
        own folder, `tools/` and `no_tools/`, under `--env.data_dir_to_save_evals`)."""
        task: MathPythonTask = self.task  # type: ignore[assignment]
        if not (task.enabled() and self.config.eval_without_tools):
            return await run_evaluate(self)
        base, out, table = self.config.data_dir_to_save_evals, {}, {}
        try:
            for label, on in (("tools", True), ("no_tools", False)):
                self.config.tools = on
                self.eval_items = self._load("eval", self.config.eval_limit)  # the prompt says if tools exist
                if base:
                    self.config.data_dir_to_save_evals = os.path.join(base, label)
                before = dict(task.stats)
                metrics = await run_evaluate(self)
                out.update({k.replace("eval/", f"eval/{label}/", 1): v for k, v in metrics.items()})
                episodes = max(1, task.stats["episodes"] - before.get("episodes", 0))
                calls = (task.stats["tool_calls"] - before.get("tool_calls", 0)) / episodes
                errors = (task.stats["tool_errors"] - before.get("tool_errors", 0)) / episodes
                out[f"eval/{label}/tool_calls_mean"], out[f"eval/{label}/tool_errors_mean"] = calls, errors
                table[f"accuracy {label}"] = metrics.get("eval/accuracy")
                table[f"tool calls / episode {label}"] = round(calls, 3)
        finally:
            self.config.tools, self.config.data_dir_to_save_evals = True, base
            self.eval_items = self._load("eval", self.config.eval_limit)
        print_summary(f"{self.name} evaluate", table)
        return out


def load_environment(**kwargs: Any) -> Any:
    """The same episodes as a classic Verifiers tool environment (see module docstring); kwargs are
    `MathPythonEnvConfig` fields (`dataset`, `python_backend`, `max_tool_calls`, ...)."""
    from environments.vf_bridge.classic_tool_env import build_tool_env

    task = MathPythonTask(MathPythonEnvConfig(**kwargs))
    return build_tool_env(task, task.python)


__all__ = ["MathPythonEnv", "MathPythonEnvConfig", "MathPythonTask", "load_environment"]
V1_NOT_OFFERED = "its python tool cannot ride the v1 front (see the module docstring)"

if __name__ == "__main__":
    MathPythonEnv.cli()
