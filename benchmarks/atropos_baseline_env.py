"""Baseline for benchmarks/process_bench.py: a plain atroposlib BaseEnv written the way upstream examples
are (ManagedServer chat completion per group, reward in `collect_trajectories`), run through
atroposlib's own `process` loop, which handles one group at a time.

It uses the same stock-vLLM token client as rlvr-envs (atroposlib's own VLLMServer needs the archived
custom /generate server), so the comparison isolates the processing loop. With `ATROPOS_BASELINE_PROMPTS`
naming a JSONL file of chat prompts (one message list per line, see `use_task_prompts`) it serves those,
so both sides of a benchmark sample the same prompts; otherwise short built-in questions.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from atroposlib.envs.base import BaseEnv, BaseEnvConfig, ScoredDataGroup
from atroposlib.envs.server_handling.server_baseline import APIServerConfig

from environments.atropos_runtime.servers import VLLMTokenServer

QUESTIONS = [f"What is {i} plus {i * 3}?" for i in range(64)]
PROMPTS_ENV = "ATROPOS_BASELINE_PROMPTS"


def use_task_prompts(env_cls: Any, directory: Path, n: int = 256) -> list[list[dict[str, str]]]:
    """Make the baseline (started after this, in a child process) serve the first `n` train prompts
    of an rlvr-envs environment class (default config, system prompt included); returns them."""
    config = env_cls.env_config_cls(tokenizer_name="unused")
    items, _ = env_cls.task_cls(config).items("train")
    path = directory / "prompts.jsonl"
    path.write_text("".join(json.dumps(list(item.prompt)) + "\n" for item in items[:n]))
    os.environ[PROMPTS_ENV] = str(path)
    return baseline_prompts()


def baseline_prompts() -> list[list[dict[str, str]]]:
    path = os.environ.get(PROMPTS_ENV)
    if path:
        return [json.loads(line) for line in Path(path).read_text().splitlines() if line.strip()]
    return [[{"role": "user", "content": q}] for q in QUESTIONS]


class AtroposBaselineEnv(BaseEnv):
    name = "atropos_baseline"
    server_cls = VLLMTokenServer

    @classmethod
    def config_init(cls):
        return BaseEnvConfig(wandb_name=cls.name, use_wandb=False), [APIServerConfig(api_key="x")]

    async def setup(self):
        self.i = 0
        self.prompts = baseline_prompts()

    async def get_next_item(self):
        self.i += 1
        return self.prompts[self.i % len(self.prompts)]

    async def evaluate(self, *args, **kwargs):
        return None

    async def collect_trajectories(self, item):
        messages = item
        async with self.server.managed_server(tokenizer=self.tokenizer) as managed:
            await managed.chat_completion(messages=messages, n=self.config.group_size,
                                          max_tokens=self.config.max_token_length, temperature=1.0)  # fmt: skip
            nodes = managed.get_state()["nodes"]
        group = ScoredDataGroup(tokens=[], masks=[], scores=[], inference_logprobs=[], messages=[])
        for k, node in enumerate(nodes):
            group["tokens"].append(node.tokens)
            group["masks"].append(node.masked_tokens)
            group["inference_logprobs"].append(node.logprobs)
            group["scores"].append(float(k % 2))
            group["messages"].append(messages)
        return group, []


if __name__ == "__main__":
    AtroposBaselineEnv.cli()
