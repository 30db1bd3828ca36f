"""Contract tests for the bubblewrap backend: Job in, ExecResult out, on both execution paths."""

from __future__ import annotations

import asyncio
import os

import pytest
from sandbox_helpers import SUM, assert_healthy, py

from sandbox import CHANNEL_FD, Job, LimitHit, Limits, get_sandbox
from sandbox.__main__ import main as check_main


def test_stdin_stdout_exit_code(sb):
    res = sb.run_sync(py(SUM, stdin=b"4 5"))
    assert (res.exit_code, res.signal, res.stdout, res.limit_hit) == (0, None, b"9\n", LimitHit.NONE)
    assert res.backend == sb.name and res.ok
    res = sb.run_sync(py("import sys; sys.stderr.write('boom'); sys.exit(3)"))
    assert (res.exit_code, res.stderr, res.ok) == (3, b"boom", False)


def test_uncaught_exception_is_exit_1_with_traceback(sb):
    res = sb.run_sync(py("def f():\n    raise ValueError('bad')\nf()\n"))
    assert res.exit_code == 1
    assert b"ValueError: bad" in res.stderr and b'File "/tmp/main.py", line 2' in res.stderr
    assert b"runpy" not in res.stderr  # same traceback as a fresh interpreter


def test_files_dirs_and_cwd(sb):
    job = Job(
        command=("python3", "main.py", "a1"),
        files={
            "main.py": "import sys,os\nprint(open('d/e/in.txt').read(), sys.argv[1:], os.getcwd())",
            "d/e/in.txt": b"payload",
        },
    )
    res = sb.run_sync(job)
    assert res.stdout == b"payload ['a1'] /tmp\n", res


def test_python_c_and_module_forms(sb):
    res = sb.run_sync(Job(command=("python3", "-c", "import sys; print(sys.argv)", "x")))
    assert res.stdout == b"['-c', 'x']\n"
    files = {"mod.py": "import sys; print(sys.argv[1:])"}
    res = sb.run_sync(Job(command=("python3", "-m", "mod", "y"), files=files))
    assert res.stdout == b"['y']\n", res


def test_non_python_command(sb):
    res = sb.run_sync(Job(command=("/bin/sh", "-c", "echo $((6*7)); cat"), stdin=b"in"))
    assert res.stdout == b"42\nin", res


def test_channel_fd_is_private_pipe(sb):
    code = f"import os\nos.write({CHANNEL_FD}, b'result-record')\nprint('stdout text')\n"
    res = sb.run_sync(py(code, channel=True))
    assert res.channel == b"result-record" and res.stdout == b"stdout text\n", res
    # without channel=True there is no fd 3
    res = sb.run_sync(py(f"import os\nos.write({CHANNEL_FD}, b'x')"))
    assert res.exit_code == 1 and b"Bad file descriptor" in res.stderr and res.channel == b""


def test_scrubbed_environment_plus_job_env(sb, monkeypatch):
    monkeypatch.setenv("RLVR_HOST_SECRET", "hunter2")
    job = Job(command=("python3", "-c", "import os; print(sorted(os.environ.items()))"), env={"MY": "v"})
    out = sb.run_sync(job).stdout.decode()
    assert "hunter2" not in out and "RLVR_HOST_SECRET" not in out
    assert "('MY', 'v')" in out and "('HOME', '/tmp')" in out


def test_bad_file_path_rejected(sb):
    with pytest.raises(ValueError):
        sb.run_sync(Job(command=("true",), files={"../escape": "x"}))
    assert_healthy(sb)


async def test_async_run_concurrent_jobs(sb):
    jobs = [py(SUM, stdin=f"{i} {i}".encode()) for i in range(6)]
    results = await asyncio.gather(*(sb.run(j) for j in jobs))
    assert [r.stdout for r in results] == [f"{2 * i}\n".encode() for i in range(6)]


def test_limits_are_per_job(sb):
    big = sb.run_sync(py("x = bytearray(200 << 20); print(len(x))", memory_mb=512))
    small = sb.run_sync(py("x = bytearray(200 << 20); print(len(x))", memory_mb=128))
    assert big.ok and small.limit_hit is LimitHit.MEMORY, (big, small)


def test_pools_default_to_one_slot_more_than_the_usable_cpus():
    """Slots scale with the machine (a fixed count would cap a large trainer node's scoring)."""
    from sandbox.bwrap import BwrapConfig
    from sandbox.docker import DockerConfig

    cpus = len(os.sched_getaffinity(0))
    assert BwrapConfig().slots == DockerConfig().slots == cpus + 1
    assert BwrapConfig(slots=1).slots == 1


def test_a_pool_without_the_seccomp_filter_says_so(monkeypatch):
    """An architecture with no filter program runs without it: `python -m sandbox check` must say so."""
    from sandbox import seccomp
    from sandbox.bwrap import BwrapConfig, BwrapSandbox

    box = BwrapSandbox(BwrapConfig(slots=1))
    try:
        assert "seccomp" not in box.describe()  # this machine's architecture has one
    finally:
        box.close_sync()
    monkeypatch.setattr(seccomp, "program", lambda: None)
    box = BwrapSandbox(BwrapConfig(slots=1))
    try:
        assert "no seccomp filter" in box.describe()
    finally:
        box.close_sync()


def test_get_sandbox_auto_says_which():
    box = get_sandbox("auto", slots=1)
    try:
        assert box.name == "bwrap"
        assert box.run_sync(Job(command=("python3", "-c", "print(1)"), limits=Limits())).stdout == b"1\n"
    finally:
        box.close_sync()
    with pytest.raises(ValueError):
        get_sandbox("nope")


def test_check_command_reports(capsys):
    rc = check_main(["check"])
    out = capsys.readouterr().out
    assert rc == 0 and "bwrap   ok" in out
    assert "docker" in out


def test_unavailable_backends_say_why_and_never_run_unsandboxed():
    from sandbox import SandboxUnavailable
    from sandbox.bwrap import BwrapConfig, BwrapSandbox
    from sandbox.docker import DockerConfig, DockerSandbox

    with pytest.raises(SandboxUnavailable, match="bubblewrap not found"):
        BwrapSandbox(BwrapConfig(bwrap="/nonexistent/bwrap"))
    with pytest.raises(SandboxUnavailable, match="no Docker engine answers"):
        DockerSandbox(DockerConfig(base_url="unix:///nonexistent/docker.sock"))
    with pytest.raises(SandboxUnavailable, match="bwrap: .*docker: "):
        get_sandbox("auto", bwrap="/nonexistent/bwrap", base_url="unix:///nonexistent/docker.sock")
