"""What the user set for an `--env.*` option, read before atroposlib's CLI builds the config.

Some settings depend on whether the user gave an option at all, not on its value: a default that
follows another option (the tokenizer follows `--openai.model_name`), a limit honoured only when
asked for (`max_token_length` in process and evaluate), switches read before the config exists
(`verbose`, `use_wandb`). "Given" means what atroposlib merges over the class defaults: the command
line, then the `env:` section of the `--config` YAML.
"""

from __future__ import annotations

import functools
import os
import sys
from typing import Any


def option_value(name: str) -> str | None:
    """The value the user gave `--env.<name>`: on the command line (`--env.x v` or `--env.x=v`),
    else in the `env:` section of the `--config` YAML (atroposlib's precedence: command line, then
    YAML, then defaults); None when neither sets it. A YAML value comes back as its text (`true`,
    `2048`)."""
    given = _command_line_value(f"--env.{name}")
    if given is not None:
        return given
    value = _yaml_env_section().get(name)
    if value is None:
        return None
    return str(value).lower() if isinstance(value, bool) else str(value)


def _command_line_value(option: str) -> str | None:
    """What the command line gives `option` (`--x v` or `--x=v`; "" when it ends the line), or None.
    Given twice, the last one counts, as in atroposlib's argparse-based CLI."""
    argv = sys.argv[1:]
    found = None
    for i, arg in enumerate(argv):
        flag, eq, value = arg.partition("=")
        if flag == option:
            found = value if eq else (argv[i + 1] if i + 1 < len(argv) else "")
    return found


def _yaml_env_section() -> dict[str, Any]:
    """The `env:` mapping of the YAML file `--config` names ({} without one, or when it cannot be
    read: atroposlib's own loading then says why)."""
    path = _command_line_value("--config")
    if not path:
        return {}
    try:
        st = os.stat(path)
    except OSError:  # atroposlib's own loading says why
        return {}
    return _env_section(path, st.st_mtime_ns, st.st_size)


@functools.lru_cache(maxsize=8)
def _env_section(path: str, _mtime_ns: int, _size: int) -> dict[str, Any]:
    """The `env:` mapping of the YAML file at `path`, parsed once per version of the file (start-up
    asks for several options)."""
    try:
        import yaml

        with open(path, encoding="utf-8") as f:
            loaded = yaml.safe_load(f)
    except Exception:  # noqa: BLE001 - unreadable or not YAML: atroposlib's own loading says why
        return {}
    section = loaded.get("env") if isinstance(loaded, dict) else None
    return section if isinstance(section, dict) else {}


def option_flag(name: str) -> bool:
    """True if the user set boolean `--env.<name>` to true (command line or `--config` YAML)."""
    return (option_value(name) or "").strip().lower() in ("1", "true", "yes")


def option_given(name: str) -> bool:
    """True if the user set `--env.<name>` (command line or `--config` YAML)."""
    return option_value(name) is not None
