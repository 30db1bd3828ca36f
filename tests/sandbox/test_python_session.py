"""The stateful Python tool (`sandbox.python_session`) on the bubblewrap warm pool: notebook
semantics, per-call limits, isolation between sessions and from the host, no process left behind,
and "the code failed" kept apart from "the sandbox failed" (`infra_error`).

One pool per module (3 workers). Escape probes shared with `test_sandbox_escape.py` (in
`sandbox_helpers.py`) run through a session as data (`PROBES`); detectors are harmless (a loopback listener, a canary file). A Docker variant
runs only the smoke test, and skips without a Docker engine.
"""

from __future__ import annotations

import asyncio
import gc
import os
import select
import shutil
import signal
import socket
import time

import pytest
import pytest_asyncio
import sandbox_helpers as probes
from test_sandbox_escape import _marker_procs

from sandbox import SandboxUnavailable, SessionLimits, python_sessions
from sandbox._session_wire import _children

pytestmark = pytest.mark.asyncio(loop_scope="module")
LIMITS = SessionLimits(timeout_s=10.0, cpu_s=10.0, output_bytes=4096, grace_s=1.0)


@pytest_asyncio.fixture(loop_scope="module", scope="module")
async def pool():
    if shutil.which("bwrap") is None:
        pytest.skip("bubblewrap not installed (scripts/ci_host_setup.sh installs it)")
    async with python_sessions("bwrap", max_sessions=3, limits=LIMITS) as p:
        yield p


@pytest.fixture
def listener():
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(8)
    srv.setblocking(False)
    yield srv
    srv.close()


def _accepted(srv) -> int:
    n = 0
    while True:
        try:
            conn, _ = srv.accept()
        except BlockingIOError:
            return n
        conn.close()
        n += 1


def _interpreter(session) -> tuple[int, str]:
    """(host pid, start time) of the session's interpreter: the worker's only child."""
    (worker,) = _children(session._worker.proc.pid)
    (pid,) = _children(worker)
    return pid, _start_time(pid)


def _start_time(pid: int) -> str | None:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[19]
    except OSError:
        return None


def _gone(proc: tuple[int, str]) -> bool:
    return _start_time(proc[0]) != proc[1]


def _wait_gone(proc: tuple[int, str], within_s: float = 10.0) -> bool:
    deadline = time.monotonic() + within_s
    while not _gone(proc):  # a kill in another thread (garbage collection): poll its effect
        if time.monotonic() > deadline:
            return False
        time.sleep(0.01)
    return True


async def test_state_persists_and_cells_show_their_last_expression(pool):
    async with pool.session() as s:
        assert (await s.run("x = 20")).output == ""
        r = await s.run("x += 1\nx * 2")
        assert r.ok and r.output == "42\n" and not r.truncated and r.seconds > 0
        r = await s.run("import sys\nprint('out')\nprint('err', file=sys.stderr)\nprint('out2')\n{'x': x}")
        assert r.output == "out\nerr\nout2\n{'x': 21}\n", r
        assert (await s.run("x;")).output == ""  # a trailing `;` hides the value, as in Jupyter
        assert (await s.run("None")).output == ""
        await s.run("def twice(v):\n    return 2 * v\nclass C:\n    pass")
        assert (await s.run("twice(x), type(C()).__name__")).output == "(42, 'C')\n"
        r = await s.run("import os; os.write(1, b'raw\\n'); os.getcwd()")
        assert r.output == "raw\n'/tmp'\n"
        assert (await s.run("input()")).error.endswith("EOFError: EOF when reading a line\n")


async def test_an_exception_is_a_traceback_and_the_session_lives_on(pool):
    async with pool.session() as s:
        await s.run("y = 5\ndef f():\n    return 1 / 0")
        r = await s.run("f()")
        assert not r.ok and r.infra_error is None and not r.reset and not r.timed_out
        assert r.error.startswith("Traceback (most recent call last):\n"), r.error
        assert '"<cell 2>", line 1, in <module>' in r.error and "return 1 / 0" in r.error
        assert r.error.endswith("ZeroDivisionError: division by zero\n")
        r = await s.run("def g(:")
        assert r.error.rstrip().endswith("SyntaxError: invalid syntax") and "<cell 3>" in r.error
        r = await s.run("import sys; sys.exit(3)")
        assert r.error.endswith("SystemExit: 3\n") and not r.reset
        assert r.text == r.output + r.error
        assert (await s.run("y")).output == "5\n"


async def test_two_sessions_see_neither_variables_nor_files_nor_processes(pool):
    async with pool.session() as a, pool.session() as b:
        await a.run("secret = 'a-only'\nopen('secret.txt', 'w').write(secret)")
        assert (await a.run("open('secret.txt').read()")).output == "'a-only'\n"
        r = await b.run(
            "import os\n'secret' in globals(), os.listdir('.'), len([p for p in os.listdir('/proc') if p.isdigit()])"
        )
        assert r.output == "(False, [], 2)\n", r  # only its worker and itself
        first = _interpreter(a)
    async with pool.session() as c:  # a's worker, or another: its scratch was wiped either way
        assert (await c.run("import os; os.listdir('.')")).output == "[]\n"
        assert _gone(first)


async def test_a_hanging_call_is_interrupted_at_its_limit_and_the_state_kept(pool):
    async with pool.session() as s:
        await s.run("kept = 7")
        t0 = time.monotonic()
        r = await s.run("while True:\n    pass", timeout_s=0.5)
        assert r.timed_out and not r.reset and r.infra_error is None, r
        assert "CallTimeout: the call exceeded its" in r.error and "<cell 2>" in r.error
        assert 0.5 <= time.monotonic() - t0 < 0.5 + LIMITS.grace_s
        r = await s.run("import time\ntime.sleep(60)", timeout_s=0.3)
        assert r.timed_out and "wall time limit (0.3 s)" in r.error, r
        r = await s.run("while True:\n    pass", cpu_s=0.3)
        assert r.timed_out and "CPU time limit (0.3 s)" in r.error, r
        assert (await s.run("kept")).output == "7\n"


async def test_a_call_that_will_not_stop_is_killed_and_the_session_reset(pool):
    async with pool.session() as s:
        await s.run("kept = 7")
        code = (
            "import signal\n"
            "signal.signal(signal.SIGALRM, signal.SIG_IGN)\n"
            "signal.signal(signal.SIGPROF, signal.SIG_IGN)\n"
            "print('started')\n"
            "while True:\n    pass"
        )
        before = _interpreter(s)
        t0 = time.monotonic()
        r = await s.run(code, timeout_s=0.5)
        took = time.monotonic() - t0
        assert r.timed_out and r.reset and r.infra_error is None, r
        assert "did not stop at its time limit" in r.error and "session was reset" in r.error
        assert 0.5 + LIMITS.grace_s <= took < 5, took
        assert _gone(before)
        r = await s.run("kept")
        assert r.error.endswith("NameError: name 'kept' is not defined\n") and not r.reset
        assert (await s.run("1 + 1")).output == "2\n"


async def test_a_flood_of_output_is_truncated_and_the_session_still_works(pool):
    async with pool.session() as s:
        await s.run("n = 3")
        r = await s.run("print('x' * 10_000_000)")
        assert r.truncated and r.error is None and not r.reset, r.output[-100:]
        assert r.output == "x" * 4096 + "\n[output truncated at 4096 bytes]\n"
        r = await s.run(
            "import os\nfor _ in range(160):\n    os.write(1, b'y' * 65536)"
        )  # 10 MiB, bypassing print
        assert r.truncated and r.output.startswith("y" * 4096 + "\n[output truncated") and not r.reset
        r = await s.run("print('z' * 100)", output_bytes=10)
        assert r.output == "zzzzzzzzzz\n[output truncated at 10 bytes]\n"
        r = await s.run("n + 1")
        assert r.output == "4\n" and not r.truncated


async def test_network_and_host_files_are_out_of_reach(pool, listener, tmp_path):
    canary = tmp_path / "canary.txt"
    canary.write_text("original")
    port = listener.getsockname()[1]
    code = (
        "import socket\n"
        "names = sorted(n for _, n in socket.if_nameindex())\n"
        "s = socket.socket(); s.settimeout(2)\n"
        f"try:\n    s.connect(('127.0.0.1', {port})); print('CONNECTED')\n"
        "except OSError as e:\n    print('refused', type(e).__name__)\n"
        f"for op in ('r', 'w'):\n    try:\n        print('OPENED', open({str(canary)!r}, op).write('pwned'))\n"
        "    except OSError as e:\n        print('denied', type(e).__name__)\n"
        "names"
    )
    async with pool.session() as s:
        r = await s.run(code)
    assert "CONNECTED" not in r.output and "OPENED" not in r.output and r.output.endswith("['lo']\n"), r
    assert r.output.count("denied") == 2
    assert _accepted(listener) == 0
    assert canary.read_text() == "original"


async def test_memory_limit(pool):
    async with pool.session(memory_mb=128) as s:
        await s.run("kept = 1")
        r = await s.run("b = bytearray(512 << 20)")
        assert r.error is not None and r.error.endswith("MemoryError\n") and not r.reset, r
        r = await s.run("b = bytearray(32 << 20); len(b) >> 20, kept")  # within the limit: fine
        assert r.output == "(32, 1)\n", r


async def test_processes_a_call_starts_do_not_outlive_it(pool):
    marker = "rlvr-session-orphan-6614"
    async with pool.session() as s:
        code = (
            "import subprocess\n"
            f"p = subprocess.Popen(['sh', '-c', 'sleep 30; : {marker}'], start_new_session=True)\n"
            "p.pid > 0"
        )
        r = await s.run(code)
        assert r.output == "True\n", r
        assert _marker_procs(marker) == []
        interpreter, _ = _interpreter(s)  # the worker's only child again, and it has none
        assert _children(interpreter) == []
        r = await s.run(
            "import os\nsorted(int(p) for p in os.listdir('/proc') if p.isdigit()) == [1, os.getpid()]"
        )
        assert r.output == "True\n"  # only the worker and the interpreter


async def test_a_session_waits_for_a_free_worker(pool):
    held = [await pool.open() for _ in range(3)]  # every worker of the pool
    waiting = asyncio.ensure_future(pool.open())
    done, _ = await asyncio.wait({waiting}, timeout=0.3)
    assert not done
    worker = held[0]._worker
    await held[0].close()
    s = await waiting
    assert s._worker is worker and (await s.run("'mine'")).output == "'mine'\n"
    for other in (s, *held[1:]):
        await other.close()


async def test_close_garbage_and_pool_close_leave_no_process(pool):
    s = await pool.open()
    proc = _interpreter(s)
    await s.close()
    assert _gone(proc)
    assert (await s.run("1")).infra_error == "the Python session is closed"

    s = await pool.open()
    proc = _interpreter(s)
    del s
    gc.collect()
    assert _wait_gone(proc)

    async with python_sessions("bwrap", max_sessions=2, limits=LIMITS) as other:
        a = await other.open()
        b = other.session()
        await b.run("1")  # `run` opens it
        procs = [_interpreter(a), _interpreter(b)]
        workers = [w.proc.pid for w in other.sandbox._workers]
    assert all(_gone(p) for p in procs)
    assert [pid for pid in workers if os.path.exists(f"/proc/{pid}")] == []
    assert (await a.run("1")).infra_error == "the Python session is closed"


async def test_the_code_cannot_make_its_result_an_infrastructure_failure(pool):
    garble = (
        "import os\n"
        "for fd in map(int, os.listdir('/proc/self/fd')):\n"
        "    if fd >= 10:\n"
        "        try:\n            os.write(fd, b'\\xff\\xff\\xff\\xffgarbage')\n"
        "        except OSError:\n            pass\n"
    )
    async with pool.session() as s:
        for code, says in [
            ("import os; os._exit(0)", "exited (code 0)"),
            ("import os, signal; os.kill(os.getpid(), signal.SIGKILL)", "killed by SIGKILL"),
            ("import ctypes; ctypes.string_at(0)", "killed by SIGSEGV"),
            (garble, "reply channel"),
        ]:
            r = await s.run(code)
            assert r.reset and r.infra_error is None and says in r.error, (code, r)
            assert (await s.run("'alive'")).output == "'alive'\n"


async def test_a_dead_sandbox_is_an_infrastructure_failure(pool):
    async with pool.session() as s:
        await s.run("x = 1")
        (worker,) = _children(s._worker.proc.pid)  # PID 1 of the sandbox: all in it die with it
        pidfd = os.pidfd_open(worker)
        os.kill(worker, signal.SIGKILL)
        assert select.select([pidfd], [], [], 10)[0]  # it has exited (and the interpreter with it)
        os.close(pidfd)
        r = await s.run("x")
        assert r.infra_error is not None and "worker died" in r.infra_error and r.reset, r
        assert (await s.run("2 + 2")).output == "4\n"  # a fresh worker


def _identity(out: str) -> bool:
    return out == f"{probes.sandbox_uid()} 0000000000000000 0000000000000000 1\n"


PROBES = {  # name: (code, what its output must be); the shared ones from sandbox_helpers.py
    "identity_no_caps_no_new_privs": (
        "import os\n"
        "lines = open('/proc/self/status').read().splitlines()\n"
        "st = dict(l.split(':\\t', 1) for l in lines if ':\\t' in l)\n"
        "print(os.getuid(), *(st[k].strip() for k in ('CapEff', 'CapBnd', 'NoNewPrivs')))",
        _identity,
    ),
    "host_dirs_invisible": (
        "import os\n[p for p in ('/root', '/home', '/work', '/var', '/etc/shadow') if os.path.exists(p)]",
        lambda out: out == "[]\n",
    ),
    "proc_snooping": (probes.PROC_SNOOPING, probes.proc_snooping_contained),
    "env_secrets": (
        "import os, glob\nseen = str(dict(os.environ))\n"
        "for p in glob.glob('/proc/*/environ'):\n"
        "    try:\n        seen += open(p, 'rb').read().decode(errors='replace')\n"
        "    except OSError:\n        pass\n"
        "'s3cr3t' in seen",
        lambda out: out == "False\n",
    ),
    "keyring": (probes.KEYRING_ADD, lambda out: True),  # the next probe (another session) must not find it
    "keyring_read": (probes.KEYRING_READ, lambda out: out == "False\n"),
    "ptrace_and_process_vm": (probes.MEMORY_SYSCALLS, lambda out: out == probes.MEMORY_SYSCALLS_DENIED),
    "signal_the_worker_and_host": (
        "import os, signal\nout = []\n"
        f"for pid in (1, {os.getpid()}):\n"
        "    try:\n        os.kill(pid, signal.SIGKILL); out.append(pid)\n"
        "    except OSError:\n        pass\n"
        "out",
        lambda out: out in ("[]\n", "[1]\n"),  # PID 1 ignores it; the host's pid is not in the sandbox
    ),
    "foreign_abi_syscall": (probes.FOREIGN_ABI, lambda out: "SURVIVED" not in out),
}


@pytest.mark.parametrize("name", list(PROBES))
async def test_escape_probes_through_a_session(pool, name, monkeypatch):
    monkeypatch.setenv("RLVR_TEST_SECRET", "s3cr3t-value")
    code, check = PROBES[name]
    async with pool.session() as s:
        r = await s.run(code)
        assert r.infra_error is None and check(r.output), (name, r)
        assert (await s.run("6 * 7")).output == "42\n"


async def test_docker_sessions_smoke():
    try:
        async with python_sessions("docker", max_sessions=1, limits=LIMITS) as docker_pool:
            async with docker_pool.session() as s:
                await s.run("x = 41")
                assert (await s.run("x + 1")).output == "42\n"
                r = await s.run("while True:\n    pass", timeout_s=0.5)
                assert r.timed_out and not r.reset
    except SandboxUnavailable as e:
        pytest.skip(f"docker backend unavailable: {e}")
