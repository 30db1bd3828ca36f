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
from sandbox.python_session import (
    PythonSession,
    PythonSessionPool,
    SessionLimits,
    ToolCallResult,
    python_sessions,
)
from sandbox.registry import get_sandbox, run_sync

__all__ = [
    "CHANNEL_FD",
    "ExecResult",
    "Job",
    "LimitHit",
    "Limits",
    "PythonSession",
    "PythonSessionPool",
    "Sandbox",
    "SandboxError",
    "SandboxUnavailable",
    "SessionLimits",
    "ToolCallResult",
    "get_sandbox",
    "python_sessions",
    "run_sync",
]
