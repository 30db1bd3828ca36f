"""`<env>.py [COMMAND] --help`: the options with the defaults a run really uses, grouped, short.

atroposlib's help lists its classes' defaults (`group_size` 4, `use_wandb` True, a DeepHermes
tokenizer...) where `config_init` sets others, in ~380 lines of pydantic text. This help reads the
defaults from the env's own `config_init()`, puts the environment's own options first, then the
runtime's, then the atroposlib options that matter per mode; `--help-all` adds every other one.
"""

from __future__ import annotations

import os
import sys
from typing import Any

from pydantic import BaseModel

# atroposlib options worth a line in the short help, per group; the rest are shown by --help-all
ATROPOS_COMMON = ("group_size", "total_steps", "tokenizer_name", "ensure_scores_are_not_same", "use_wandb")
ATROPOS_BY_MODE = {
    "serve": (
        "rollout_server_url",
        "batch_size",
        "max_token_length",
        "inference_weight",
        "min_batch_allocation",
    ),
    "process": ("data_path_to_save_groups", "max_token_length"),
    "evaluate": ("data_dir_to_save_evals",),
}
SERVER_SHORT = ("base_url", "model_name", "server_type", "api_key", "timeout", "num_max_requests_at_once")
SECRET = {"api_key"}
# what an option does here, where atroposlib's own description says something else
DESCRIPTIONS = {
    "tokenizer_name": "tokenizer for prompts and sampled ids; when not given, the served model's "
    "(--openai.model_name); checked against the server at start",
    "max_token_length": "serve: the trainer's sequence limit (the trainer's own value wins); process / "
    "evaluate: when given, longer groups are dropped as too_long",
    "model_name": "the model to sample from; checked against the server's /models at start",
    "group_size": "samples per prompt (one group); serve needs 2 or more",
    "ensure_scores_are_not_same": "serve: groups whose scores are all equal (no learning signal) are "
    "dropped as identical_scores; process: only when given true",
    "total_steps": "serve: trainer steps (run-api's value when -1); process: groups to write",
}
EXAMPLES = {
    "serve": "{prog} serve --env.rollout_server_url http://127.0.0.1:8000 "
    "--openai.base_url http://127.0.0.1:9001/v1 --openai.model_name MODEL",
    "process": "{prog} process --env.total_steps 64 --env.data_path_to_save_groups out/groups.jsonl "
    "--openai.base_url http://127.0.0.1:9001/v1 --openai.model_name MODEL",
    "evaluate": "{prog} evaluate --env.data_dir_to_save_evals out/eval "
    "--openai.base_url http://127.0.0.1:9001/v1 --openai.model_name MODEL",
}
WHAT = {
    "serve": "RL training: sample groups and send them to atroposlib's run-api, where a trainer pulls batches",
    "process": "write scored groups (exact token ids) to a resumable JSONL, with an HTML viewer and a summary",
    "evaluate": "score the eval split once and write metrics.json + samples.jsonl",
}


def render_help(
    env_cls: Any, base_config_cls: type[BaseModel], mode: str | None, show_all: bool = False
) -> str:
    """The help text of `env_cls`'s script for `mode` (None: the overview of the commands)."""
    prog = os.path.basename(sys.argv[0])
    name = env_cls.name or env_cls.__name__
    if mode is None:
        lines = [
            f"usage: {prog} {{serve,process,evaluate}} [--env.* ...] [--openai.* ...] [--config FILE.yaml]",
            "",
        ]
        lines += [f"The {name} environment. Commands:"]
        lines += [f"  {m:<9} {WHAT[m]}" for m in WHAT]
        lines += ["", f"`{prog} COMMAND --help` lists each command's options with the defaults it uses."]
        return "\n".join(lines)
    env_config, servers = env_cls.config_init()
    server = servers[0] if isinstance(servers, list) and servers else servers
    env_fields = env_cls.env_config_cls.model_fields
    own = [f for f in env_fields if f not in base_config_cls.model_fields]
    runtime = [f for f in base_config_cls.model_fields if f not in _atropos_fields(base_config_cls)]
    atropos = [f for f in _atropos_fields(base_config_cls)]
    short_atropos = [f for f in (*ATROPOS_COMMON, *ATROPOS_BY_MODE[mode]) if f in atropos]
    lines = [
        f"usage: {prog} {mode} [--env.FIELD VALUE ...] [--openai.FIELD VALUE ...] [--config FILE.yaml]",
        "",
    ]
    lines += [f"{WHAT[mode]}.", "", "example:", "  " + EXAMPLES[mode].format(prog=prog), ""]
    if own:
        lines += _group(f"{name} options", "env", own, env_fields, env_config)
    lines += _group("runtime options", "env", runtime, env_fields, env_config)
    lines += _group(
        "atroposlib options" + ("" if show_all else " (the ones that matter here; --help-all for every one)"),
        "env",
        atropos if show_all else short_atropos,
        env_fields,
        env_config,
    )
    if server is not None:
        server_fields = type(server).model_fields
        keys = list(server_fields) if show_all else [f for f in SERVER_SHORT if f in server_fields]
        lines += _group("inference server (--openai.*)", "openai", keys, server_fields, server)
    lines += ["Values come from: command line > --config FILE.yaml > the defaults shown here."]
    return "\n".join(lines)


def _atropos_fields(base_config_cls: type[BaseModel]) -> list[str]:
    from atroposlib.envs.base import BaseEnvConfig

    return [f for f in base_config_cls.model_fields if f in BaseEnvConfig.model_fields]


def _group(title: str, prefix: str, keys: list[str], fields: dict[str, Any], values: Any) -> list[str]:
    out = [f"{title}:"]
    for key in keys:
        info = fields[key]
        value = getattr(values, key, info.default)
        shown = "(set)" if key in SECRET and value else repr(value)
        description = DESCRIPTIONS.get(key) or " ".join((info.description or "").split())
        if len(description) > 100 and key not in DESCRIPTIONS:
            description = description[:97].rstrip() + "..."
        out.append(f"  --{prefix}.{key} = {shown}" + (f"\n      {description}" if description else ""))
    return [*out, ""]
