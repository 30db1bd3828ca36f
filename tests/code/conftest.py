"""Fixtures for the code rubric tests.

`code_sandbox` is the project's default sandbox (`get_sandbox("auto")`) when a backend is available
on this host. Otherwise it falls back to `HostProcessSandbox`: a real subprocess per job with the
result channel on fd 3, wall-time kill and output caps, but NO isolation. It exists only so the
harness and rubric logic (which do not depend on isolation) are tested on hosts without bubblewrap;
Its use is explicit opt-in: `RLVR_ALLOW_UNSANDBOXED_TESTS=1` (with a warning); by default no sandbox is an error.
"""

from __future__ import annotations

import asyncio
import os
import signal
import tempfile
import time
import warnings
from pathlib import Path

import pytest

from sandbox.core import CHANNEL_FD, ExecResult, Job, LimitHit


class HostProcessSandbox:
    """Unisolated test double of the Sandbox protocol (see module docstring)."""

    name = "host-process"

    def __init__(self) -> None:
        self.jobs = 0

    async def run(self, job: Job) -> ExecResult:
        self.jobs += 1
        with tempfile.TemporaryDirectory(dir=os.environ.get("TMPDIR")) as scratch:
            for rel, content in job.files.items():
                path = Path(scratch, rel)
                path.parent.mkdir(parents=True, exist_ok=True)
                path.write_bytes(content.encode() if isinstance(content, str) else content)
            read_fd, write_fd = os.pipe() if job.channel else (None, None)

            def child_setup() -> None:
                os.setsid()
                if write_fd is not None:
                    os.dup2(write_fd, CHANNEL_FD)

            env = {"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8", **job.env}
            start = time.monotonic()
            proc = await asyncio.create_subprocess_exec(
                *job.command,
                cwd=scratch,
                env=env,
                stdin=asyncio.subprocess.PIPE,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.PIPE,
                pass_fds=(CHANNEL_FD,) if job.channel else (),
                preexec_fn=child_setup,
            )
            if write_fd is not None:
                os.close(write_fd)
            cap = job.limits.output_bytes
            channel_task = asyncio.create_task(asyncio.to_thread(_drain, read_fd, cap)) if read_fd else None
            limit = LimitHit.NONE
            try:
                out, err = await asyncio.wait_for(proc.communicate(job.stdin), job.limits.wall_time_s)
            except asyncio.TimeoutError:
                limit = LimitHit.WALL_TIME
                os.killpg(proc.pid, signal.SIGKILL)
                out, err = await proc.communicate()
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except OSError:
                pass
            channel, truncated = (await channel_task) if channel_task else (b"", False)
            code = proc.returncode
            return ExecResult(
                exit_code=code if code is not None and code >= 0 else None,
                signal=-code if code is not None and code < 0 else None,
                stdout=out[:cap],
                stderr=err[:cap],
                wall_time_s=time.monotonic() - start,
                limit_hit=limit,
                backend=self.name,
                channel=channel,
                channel_truncated=truncated,
            )

    async def close(self) -> None:
        pass


def _drain(fd: int, cap: int) -> tuple[bytes, bool]:
    data = bytearray()
    try:
        while chunk := os.read(fd, 1 << 16):
            data += chunk
    finally:
        os.close(fd)
    return bytes(data[:cap]), len(data) > cap


@pytest.fixture(scope="session")
def code_sandbox():
    try:
        from sandbox import get_sandbox  # provided by the sandbox backends

        sandbox = get_sandbox("auto")
    except Exception:  # noqa: BLE001 - ImportError or SandboxUnavailable
        if os.environ.get("RLVR_ALLOW_UNSANDBOXED_TESTS") != "1":
            raise
        warnings.warn("RLVR_ALLOW_UNSANDBOXED_TESTS=1: code tests run WITHOUT isolation", stacklevel=1)
        sandbox = HostProcessSandbox()
    yield sandbox
    asyncio.run(sandbox.close())


@pytest.fixture(scope="session")
def one_shot():
    """The bwrap backend without its warm pool: every harness job is a fresh `python3 run.py`."""
    from sandbox.bwrap import BwrapConfig, BwrapSandbox
    from sandbox.core import SandboxUnavailable

    try:
        box = BwrapSandbox(BwrapConfig(slots=2, warm_pool=False))
    except SandboxUnavailable as exc:
        pytest.skip(f"bubblewrap unavailable: {exc}")
    yield box
    box.close_sync()


class CountingSandbox:
    """Delegates to a real sandbox and counts the jobs it was asked to run."""

    def __init__(self, inner) -> None:
        self.inner = inner
        self.name = inner.name
        self.jobs = 0

    async def run(self, job: Job) -> ExecResult:
        self.jobs += 1
        return await self.inner.run(job)

    async def close(self) -> None:
        pass


@pytest.fixture
def counting(code_sandbox) -> CountingSandbox:
    return CountingSandbox(code_sandbox)
