"""Isolated execution of untrusted code: bubblewrap (default), Docker (warm pool), more by name."""

from sandbox.core import ExecResult, Job, LimitHit, Limits, Sandbox, SandboxUnavailable

__all__ = ["ExecResult", "Job", "LimitHit", "Limits", "Sandbox", "SandboxUnavailable"]
