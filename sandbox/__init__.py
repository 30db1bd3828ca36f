"""Isolated execution of untrusted code: bubblewrap (default), Docker (warm pool), more by name."""

from sandbox.core import (
    CHANNEL_FD,
    ExecResult,
    Job,
    LimitHit,
    Limits,
    Sandbox,
    SandboxError,
    SandboxUnavailable,
)
from sandbox.registry import get_sandbox, run_sync

__all__ = [
    "CHANNEL_FD",
    "ExecResult",
    "Job",
    "LimitHit",
    "Limits",
    "Sandbox",
    "SandboxError",
    "SandboxUnavailable",
    "get_sandbox",
    "run_sync",
]
