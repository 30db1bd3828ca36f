"""Choose a backend by name: `get_sandbox("auto" | "bwrap" | "docker")`, and report what works here."""

from __future__ import annotations

import asyncio
import concurrent.futures
import dataclasses
import logging
from typing import Any

from sandbox.core import ExecResult, Job, Limits, Sandbox, SandboxUnavailable

log = logging.getLogger(__name__)
BACKENDS = ("bwrap", "docker")


def _classes(name: str):
    if name == "bwrap":
        from sandbox.bwrap import BwrapConfig, BwrapSandbox

        return BwrapConfig, BwrapSandbox
    if name == "docker":
        from sandbox.docker import DockerConfig, DockerSandbox

        return DockerConfig, DockerSandbox
    raise ValueError(f"unknown sandbox backend {name!r}; expected 'auto' or one of {BACKENDS}")


def _make(name: str, *, strict: bool = True, **options: Any) -> Sandbox:
    """Build a backend; with strict=False, options its config does not know are ignored ("auto")."""
    config_cls, sandbox_cls = _classes(name)
    if not strict:
        known = {f.name for f in dataclasses.fields(config_cls)}
        options = {k: v for k, v in options.items() if k in known}
    return sandbox_cls(config_cls(**options))


def get_sandbox(name: str = "auto", **options: Any) -> Sandbox:
    """Build the named backend, or for "auto" the first that works here (bwrap, then docker).

    Options are the fields of `BwrapConfig` / `DockerConfig`; with "auto" each backend takes the
    ones it knows. Raises `SandboxUnavailable` listing why each candidate failed; never falls back
    to running unsandboxed. The chosen backend's `name` says which one you got (also logged).
    """
    if name != "auto":
        return _make(name, **options)
    known = {f.name for b in BACKENDS for f in dataclasses.fields(_classes(b)[0])}
    unknown = set(options) - known
    if unknown:
        raise TypeError(f"unknown sandbox options: {sorted(unknown)}")
    reasons = []
    for candidate in BACKENDS:
        try:
            sb = _make(candidate, strict=False, **options)
        except SandboxUnavailable as e:
            reasons.append(f"{candidate}: {e}")
            continue
        log.info("sandbox: using %s", sb.describe() if hasattr(sb, "describe") else sb.name)
        return sb
    raise SandboxUnavailable("no sandbox backend works here: " + "; ".join(reasons))


def run_sync(sandbox: Sandbox, job: Job) -> ExecResult:
    """Synchronous convenience for any backend, callable from inside or outside an event loop."""
    direct = getattr(sandbox, "run_sync", None)
    if direct is not None:
        return direct(job)
    with concurrent.futures.ThreadPoolExecutor(1) as ex:
        return ex.submit(asyncio.run, sandbox.run(job)).result()


def check() -> dict[str, str]:
    """Try every backend with a trivial job; map name -> 'ok: ...' or the reason it is unavailable."""
    out = {}
    for name in BACKENDS:
        try:
            sb = _make(name, slots=1)
        except (SandboxUnavailable, ImportError) as e:
            out[name] = f"unavailable: {e}"
            continue
        try:
            res = run_sync(sb, Job(command=("python3", "-c", "print(6*7)"), limits=Limits(wall_time_s=30)))
            ok = res.ok and res.stdout.strip() == b"42"
            desc = sb.describe() if hasattr(sb, "describe") else name
            out[name] = f"ok: {desc}" if ok else f"broken: {res}"
        except Exception as e:  # report, do not crash the check
            out[name] = f"broken: {type(e).__name__}: {e}"
        finally:
            close = getattr(sb, "close_sync", None)
            if close:
                close()
            else:
                asyncio.run(sb.close())
    return out
