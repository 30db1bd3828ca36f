"""Choose a backend by name: `get_sandbox("auto" | "bwrap" | "docker")`, and report what works here."""

from __future__ import annotations

import asyncio
import concurrent.futures
import dataclasses
import logging
import threading
from collections.abc import Callable
from typing import Any

from sandbox.backend import _one_line
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


# "auto": which backend ran a job here, per option set (probed once per process); see `get_sandbox`
_AUTO: dict[tuple, tuple[str, tuple[str, ...]]] = {}
_AUTO_LOCK = threading.Lock()


def get_sandbox(name: str = "auto", **options: Any) -> Sandbox:
    """Build the named backend, or for "auto" the first backend that runs a job here.

    Building a backend probes it with a real Python job (bwrap: a shell and a Python job in a warm
    worker; Docker: a Python job in a warm container), so a backend that is built can run jobs.
    "auto" tries bwrap, then docker, once per process and option set, and caches the answer: later
    calls build the chosen one directly. Which one was chosen and why the others were skipped is
    logged and appended to the sandbox's `notes` (shown by its `describe()`).

    Options are the fields of `BwrapConfig` / `DockerConfig`; with "auto" each backend takes the
    ones it knows. Raises `SandboxUnavailable` listing why each candidate failed; never falls back
    to running unsandboxed.
    """
    if name != "auto":
        return _make(name, **options)
    known = {f.name for b in BACKENDS for f in dataclasses.fields(_classes(b)[0])}
    unknown = set(options) - known
    if unknown:
        raise TypeError(f"unknown sandbox options: {sorted(unknown)}")
    key = tuple(sorted((k, repr(v)) for k, v in options.items()))
    with _AUTO_LOCK:  # one probe at a time: concurrent first calls must not race to start pools
        cached = _AUTO.get(key)
        if cached is not None:
            chosen, skipped = cached
            try:
                return _noted(_make(chosen, strict=False, **options), skipped, cached=True)
            except SandboxUnavailable as e:  # it worked before; say what changed, then probe afresh
                log.warning("sandbox: %s stopped working (%s); probing the backends again", chosen, e)
                del _AUTO[key]
        reasons = []
        for candidate in BACKENDS:
            try:
                sb = _make(candidate, strict=False, **options)
            except SandboxUnavailable as e:
                reasons.append(f"{candidate}: {e}")
                continue
            _AUTO[key] = (candidate, tuple(reasons))
            return _noted(sb, tuple(reasons), cached=False)
    raise SandboxUnavailable("no sandbox backend runs a job here: " + "; ".join(reasons))


def _noted(sb: Sandbox, skipped: tuple[str, ...], *, cached: bool) -> Sandbox:
    """Record on `sb` (and in the log) why "auto" chose it."""
    why = (
        f"auto: chose {sb.name}"
        + (" (cached)" if cached else "")
        + "".join(f"; skipped {r}" for r in skipped)
    )
    notes = getattr(sb, "notes", None)
    if isinstance(notes, list):
        notes.append(why)
    log.info("sandbox: %s", sb.describe() if hasattr(sb, "describe") else why)
    return sb


def run_sync(sandbox: Sandbox, job: Job) -> ExecResult:
    """Synchronous convenience for any backend, callable from inside or outside an event loop."""
    direct = getattr(sandbox, "run_sync", None)
    if direct is not None:
        return direct(job)
    with concurrent.futures.ThreadPoolExecutor(1) as ex:
        return ex.submit(asyncio.run, sandbox.run(job)).result()


def check(progress: Callable[[str], None] | None = None) -> dict[str, str]:
    """Build every backend with the pools' default configuration (so the slot count it reports is the
    one they use) and run a trivial job; map name -> 'ok: ...' or the reason, one line with the fix.
    `progress(name)` is called before each backend is probed (probing Docker can take seconds)."""
    out = {}
    for name in BACKENDS:
        if progress is not None:
            progress(name)
        try:
            sb = _make(name)
        except (SandboxUnavailable, ImportError) as e:
            out[name] = _one_line(f"unavailable: {e}")
            continue
        try:
            res = run_sync(sb, Job(command=("python3", "-c", "print(6*7)"), limits=Limits(wall_time_s=30)))
            ok = res.ok and res.stdout.strip() == b"42"
            desc = sb.describe() if hasattr(sb, "describe") else name
            out[name] = f"ok: {desc}" if ok else _one_line(f"broken: {res}")
        except Exception as e:  # report, do not crash the check
            out[name] = _one_line(f"broken: {type(e).__name__}: {e}")
        finally:
            close = getattr(sb, "close_sync", None)
            if close:
                close()
            else:
                asyncio.run(sb.close())
    return out
