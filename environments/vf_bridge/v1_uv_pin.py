"""Keep verifiers 0.3.x's v1 harness programs on `openai<3`.

A v1 harness program (the `null` chat loop, `bash`, ...) is a PEP 723 uv script that verifiers 0.3.x
resolves on its own (`uv sync --script <path> --no-config`), apart from the venv running it. 0.3.x
lists `openai` without an upper bound there, so a fresh resolution takes openai 3.x, whose client
(built on httpx2) breaks the program: every rollout fails with `AttributeError:
'AsyncHttpxClientWrapper' object has no attribute '_state'`. `openai<3` in the user's venv does not
reach that environment, and uv's `UV_CONSTRAINT` / `UV_OVERRIDE` / `uv.toml` are ignored by
`uv sync --script --no-config`; a `[tool.uv] constraint-dependencies` table inside the script is not.

`pin_harness_openai()` wraps 0.3.x's `Runtime.prepare_uv_script` (every runtime prepares harness
programs through it) so that each script depending on `openai` gets that table with `openai<3`
(`constrain_script`). The script's content hash, and with it uv's environment, changes with it, so a
cached unpinned environment is never reused. verifiers 0.4 pins `openai<3` itself: left alone.
"""

from __future__ import annotations

import functools
import re
from typing import Any

OPENAI_PIN = "openai<3"
_BLOCK = re.compile(r"^# /// script[ \t]*\n(?P<body>(?:#(?: .*)?\n)*?)# ///[ \t]*$", re.MULTILINE)
_OPENAI_DEP = re.compile(r"""["']openai(?:\[[^\]]*\])?\s*(?P<spec>[^"';]*)["']""")


def constrain_script(script: str | bytes) -> str | bytes:
    """`script` with `[tool.uv] constraint-dependencies = ["openai<3"]` added to its PEP 723 block when
    that block depends on `openai` without an upper bound and has no `[tool.uv]` table yet (a table
    cannot be declared twice); otherwise `script` unchanged. Same type out as in."""
    text = script.decode() if isinstance(script, bytes) else script
    block = _BLOCK.search(text)
    if block is None or "[tool.uv]" in block.group("body"):
        return script
    deps = [m.group("spec") for m in _OPENAI_DEP.finditer(block.group("body"))]
    if not deps or any("<" in spec or "==" in spec for spec in deps):
        return script
    table = f'#\n# [tool.uv]\n# constraint-dependencies = ["{OPENAI_PIN}"]\n'
    pinned = text[: block.end("body")] + table + text[block.end("body") :]
    return pinned.encode() if isinstance(script, bytes) else pinned


def needs_pin(version: str | None) -> bool:
    """Whether this verifiers' harness programs need the pin (0.3.x; 0.4 pins openai itself)."""
    return bool(version) and re.match(r"0\.3(\.|$)", str(version)) is not None


def pin_harness_openai(version: str | None) -> bool:
    """Wrap `verifiers.v1.runtimes.base.Runtime.prepare_uv_script` once (idempotent) on verifiers
    0.3.x; True where the wrapper is in place after the call, False elsewhere (nothing changed)."""
    if not needs_pin(version):
        return False
    from verifiers.v1.runtimes.base import Runtime

    original = Runtime.prepare_uv_script
    if getattr(original, "rlvr_openai_pin", False):
        return True

    @functools.wraps(original)
    async def prepare_uv_script(self: Any, script: str | bytes, *args: Any, **kwargs: Any) -> list[str]:
        return await original(self, constrain_script(script), *args, **kwargs)

    prepare_uv_script.rlvr_openai_pin = True  # type: ignore[attr-defined]
    Runtime.prepare_uv_script = prepare_uv_script  # type: ignore[method-assign]
    return True
