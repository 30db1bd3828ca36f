"""What defines a `process` run, stored beside its output, so that a re-run resumes only that run.

`<output>.run.json` holds the settings that change what a group is (environment and its own options,
model, tokenizer, group size, sampling parameters, prompt and item selection). A re-run into the same
file with other settings would append groups of another experiment to it and keep the old ones: it
is refused in one line naming what differs, `--env.overwrite true` or another output path.
Settings that only change how fast or how long a run goes (`total_steps`, concurrency, timeouts,
status lines, where files go) may differ: more steps extend the same run.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

RUN_SUFFIX = ".run.json"
DROPPED_SUFFIX = ".dropped.jsonl"  # process: dropped groups and unverified samples (environments/atropos_runtime/output.py)
DEFINING_RUNTIME = ("group_size", "temperature", "top_p", "max_tokens", "system_prompt", "seed", "train_limit",
                    "tokenizer_name", "logprobs_mode")  # fmt: skip


def run_settings(env: Any, base_fields: set[str]) -> dict[str, Any]:
    """The settings that define `env`'s run: its own options (fields its config adds to
    `base_fields`), the served model and the runtime settings that shape a group."""
    config = env.config
    own = {k: getattr(config, k) for k in type(config).model_fields if k not in base_fields}
    settings = {
        "env": env.name,
        "model": model_name(env),
        **{k: getattr(config, k) for k in DEFINING_RUNTIME},
        **own,
    }
    return json.loads(json.dumps(settings, default=str))


def model_name(env: Any) -> str | None:
    """The model `env` samples from (its first inference server's `model_name`), if it has one."""
    servers = getattr(env.server, "servers", [])
    return getattr(getattr(servers[0], "config", None), "model_name", None) if servers else None


def check_output_path(path: str | Path) -> None:
    """One line when the output cannot be written there (a parent that is a file, a folder in its
    place), instead of an OSError from deep inside."""
    path = Path(path)
    if path.is_dir():
        raise SystemExit(f"output {path} is a folder; give a file path (e.g. {path / 'groups.jsonl'})")
    for parent in path.parents:
        if parent.exists() and not parent.is_dir():
            raise SystemExit(f"cannot write {path}: {parent} is a file, not a folder")


def claim_output(path: str | Path, settings: dict[str, Any], overwrite: bool) -> None:
    """Make `path` this run's output: start afresh with `overwrite`, resume when its stored settings
    are these, refuse in one line when they differ. Writes the settings beside it."""
    path = Path(path)
    check_output_path(path)
    stored_path = path.with_suffix(RUN_SUFFIX)
    if overwrite:  # the groups, the run's settings, and what it left out (a stale page would mix runs)
        for old in (path, stored_path, path.with_suffix(DROPPED_SUFFIX)):
            old.unlink(missing_ok=True)
    elif path.exists() and path.stat().st_size:
        try:
            stored = json.loads(stored_path.read_text())
        except (OSError, ValueError):
            stored = None
        if stored is None:
            raise SystemExit(
                f"{path} already holds groups of a run whose settings are unknown (no {stored_path.name}): "
                "pass --env.overwrite true to start afresh, or write to another --env.data_path_to_save_groups"
            )
        differ = sorted(k for k in set(stored) | set(settings) if stored.get(k) != settings.get(k))
        if differ:
            shown = "; ".join(f"{k}: {stored.get(k)!r} there, {settings.get(k)!r} now" for k in differ[:4])
            raise SystemExit(
                f"{path} holds another run ({shown}): pass --env.overwrite true to replace it, or write to "
                "another --env.data_path_to_save_groups"
            )
    path.parent.mkdir(parents=True, exist_ok=True)
    stored_path.write_text(json.dumps(settings, indent=2, sort_keys=True))
