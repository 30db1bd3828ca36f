"""Baseline for benchmarks/process_bench.py: a plain atroposlib BaseEnv written the way upstream examples
are (ManagedServer chat completion per group, reward in `collect_trajectories`), run through
atroposlib's own `process` loop, which handles one group at a time.

It uses the same stock-vLLM token client as rlvr-envs (atroposlib's own VLLMServer needs the archived
custom /generate server), so the comparison isolates the processing loop. With `ATROPOS_BASELINE_PROMPTS`
naming a JSONL file of chat prompts (one message list per line, see `use_task_prompts`) it serves those,
so both sides of a benchmark sample the same prompts; otherwise short built-in questions.

`ATROPOS_BASELINE_CLIENT=atroposlib` makes it atroposlib's own client as well: its `VLLMServer`, which
posts each call to the archived custom server's `/generate` (a new aiohttp session per request); the
server must serve `/generate` (`benchmarks/instant_server.py` does).

`ATROPOS_BASELINE_TURNS` (default 1) > 1 makes each rollout a multi-turn episode the way ManagedServer
tracks one: the group's first turn is one call with `n=group_size`, then each rollout goes on by itself
(one `n=1` call per turn, "Not quite. Answer again." after every answer) and ManagedServer extends its
node. `ATROPOS_BASELINE_RUBRIC=math` scores each rollout's last answer against the item's gold with
math-verify inline (`parse` / `verify`, as atroposlib's gsm8k example does); default: `k % 2`.
"""

from __future__ import annotations

import asyncio
import json
import os
from pathlib import Path
from typing import Any

from atroposlib.envs.base import BaseEnv, BaseEnvConfig, ScoredDataGroup
from atroposlib.envs.server_handling.server_baseline import APIServerConfig
from atroposlib.envs.server_handling.vllm_server import VLLMServer

from environments.atropos_runtime.servers import VLLMTokenServer

QUESTIONS = [f"What is {i} plus {i * 3}?" for i in range(64)]
PROMPTS_ENV = "ATROPOS_BASELINE_PROMPTS"
TURNS = int(os.environ.get("ATROPOS_BASELINE_TURNS", "1"))
RUBRIC = os.environ.get("ATROPOS_BASELINE_RUBRIC", "trivial")
OWN_CLIENT = os.environ.get("ATROPOS_BASELINE_CLIENT") == "atroposlib"


def use_task_prompts(env_cls: Any, directory: Path, n: int = 256) -> list[list[dict[str, str]]]:
    """Make the baseline (started after this, in a child process) serve the first `n` train prompts
    of an rlvr-envs environment class (default config, system prompt included); returns them."""
    config = env_cls.env_config_cls(tokenizer_name="unused")
    items, _ = env_cls.task_cls(config).items("train")
    path = directory / "prompts.jsonl"
    path.write_text("".join(json.dumps(list(item.prompt)) + "\n" for item in items[:n]))
    path.with_suffix(".answers.json").write_text(json.dumps([str(item.answer) for item in items[:n]]))
    os.environ[PROMPTS_ENV] = str(path)
    return baseline_prompts()


def baseline_prompts() -> list[list[dict[str, str]]]:
    path = os.environ.get(PROMPTS_ENV)
    if path:
        return [json.loads(line) for line in Path(path).read_text().splitlines() if line.strip()]
    return [[{"role": "user", "content": q}] for q in QUESTIONS]


def baseline_answers() -> list[str]:
    """The golds of `baseline_prompts()` (written by `use_task_prompts`; else the built-in sums)."""
    path = os.environ.get(PROMPTS_ENV)
    if path and Path(path).with_suffix(".answers.json").exists():
        return json.loads(Path(path).with_suffix(".answers.json").read_text())
    return [str(i + i * 3) for i in range(len(QUESTIONS))]


def math_reward(completion: str, gold: str) -> float:
    from math_verify import parse, verify

    return float(verify(parse(gold), parse(completion)))


class AtroposBaselineEnv(BaseEnv):
    name = "atropos_baseline"
    server_cls = VLLMServer if OWN_CLIENT else VLLMTokenServer

    @classmethod
    def config_init(cls):
        server = (
            APIServerConfig(api_key="x", server_type="vllm") if OWN_CLIENT else APIServerConfig(api_key="x")
        )
        return BaseEnvConfig(wandb_name=cls.name, use_wandb=False), [server]

    async def setup(self):
        self.i = 0
        self.prompts = baseline_prompts()
        self.answers = baseline_answers()

    async def get_next_item(self):
        self.i += 1
        k = self.i % len(self.prompts)
        return self.prompts[k], self.answers[k]

    async def evaluate(self, *args, **kwargs):
        return None

    async def collect_trajectories(self, item):
        messages, gold = item
        params = {"max_tokens": self.config.max_token_length, "temperature": 1.0}
        async with self.server.managed_server(tokenizer=self.tokenizer) as managed:
            first = await managed.chat_completion(messages=messages, n=self.config.group_size, **params)
            chats = [[*messages, {"role": "assistant", "content": c.message.content}] for c in first.choices]

            async def go_on(chat):
                for turn in range(1, TURNS):
                    chat.append({"role": "user", "content": f"Not quite (attempt {turn}). Answer again."})
                    reply = await managed.chat_completion(messages=chat, n=1, **params)
                    chat.append({"role": "assistant", "content": reply.choices[0].message.content})

            await asyncio.gather(*(go_on(chat) for chat in chats))
            nodes = managed.get_state()["nodes"]
        group = ScoredDataGroup(tokens=[], masks=[], scores=[], inference_logprobs=[], messages=[])
        for k, (node, chat) in enumerate(zip(nodes, chats, strict=True)):
            group["tokens"].append(node.tokens)
            group["masks"].append(node.masked_tokens)
            group["inference_logprobs"].append(node.logprobs)
            reward = math_reward(chat[-1]["content"], gold) if RUBRIC == "math" else float(k % 2)
            group["scores"].append(reward)
            group["messages"].append(chat)
        return group, []


if __name__ == "__main__":
    AtroposBaselineEnv.cli()
