"""Warm-pool specifics: worker integrity, no state between jobs, recycling, replacement, back-pressure."""

from __future__ import annotations

import ast
import asyncio
import resource
import shutil

import pytest
from sandbox_helpers import SUM, assert_healthy, py

from sandbox import LimitHit
from sandbox.bwrap import BwrapConfig, BwrapSandbox
from sandbox.core import Job
from sandbox.pool import python_plan


@pytest.fixture(scope="module")
def pool():
    if shutil.which("bwrap") is None:
        pytest.skip("bubblewrap not installed")
    box = BwrapSandbox(BwrapConfig(slots=1, warm_pool=True))
    yield box
    box.close_sync()


def test_python_commands_route_to_pool():
    assert python_plan(("python3", "main.py", "a"), "/usr/bin/python3")["mode"] == "file"
    assert python_plan(("python3", "-u", "-c", "x"), "/usr/bin/python3")["unbuffered"] is True
    assert python_plan(("python3", "-m", "m"), "/usr/bin/python3")["mode"] == "module"
    assert python_plan(("python3", "-X", "dev", "m.py"), "/usr/bin/python3") is None  # unknown flag: one-shot
    assert python_plan(("sh", "-c", "x"), "/usr/bin/python3") is None


def test_jobs_run_in_the_warm_worker(pool):
    starts = pool.stats["worker_starts"]
    for _ in range(3):
        assert_healthy(pool)
    assert pool.stats["worker_starts"] == max(starts, 1)
    assert pool.stats["pool_jobs"] >= 3


def test_worker_survives_kill_and_ptrace_attempts(pool):
    assert_healthy(pool)
    starts = pool.stats["worker_starts"]
    code = (
        "import os, signal, glob\n"
        "print(os.getppid())\n"
        "for sig in (signal.SIGKILL, signal.SIGTERM, signal.SIGINT):\n"
        "    os.kill(1, sig)\n"
        "opened = []\n"
        "for fd in glob.glob('/proc/1/fd/*'):\n"
        "    try:\n        os.close(os.open(fd, os.O_RDWR)); opened.append(fd)\n"
        "    except OSError:\n        pass\n"
        "for p in ('/proc/1/mem', '/proc/1/environ'):\n"
        "    try:\n        open(p, 'rb').read(1); opened.append(p)\n    except OSError:\n        pass\n"
        "print(opened)\n"
    )
    res = pool.run_sync(py(code))
    assert res.stdout == b"1\n[]\n", res  # parent is the worker, unreachable
    assert_healthy(pool)
    assert pool.stats["worker_starts"] == starts  # the same worker kept serving


# What a job's process inherits from the warm worker that a same-uid process could change in it
# (16: every Linux rlimit).
INHERITED = (
    "import os, resource\n"
    "limits = [resource.getrlimit(r) for r in range(16)]\n"
    "print(limits, os.getpriority(os.PRIO_PROCESS, 0), sorted(os.sched_getaffinity(0)),\n"
    "      os.sched_getscheduler(0))\n"
)
SABOTAGE = {  # each alone (lowering every limit at once would only kill the worker: CPU 0); `pid`:
    # the worker, then PID 1
    "rlimit_nofile": "resource.prlimit(pid, resource.RLIMIT_NOFILE, (16, 16))",
    "rlimit_as": "resource.prlimit(pid, resource.RLIMIT_AS, (40 << 20, 40 << 20))",
    "rlimit_stack": "resource.prlimit(pid, resource.RLIMIT_STACK, (1 << 16, 1 << 16))",
    "nice": "os.setpriority(os.PRIO_PROCESS, pid, 19)",
    "nice_of_uid": "os.setpriority(os.PRIO_USER, 0, 19)",
    "affinity": "os.sched_setaffinity(pid, {min(os.sched_getaffinity(0))})",
    "policy": "os.sched_setscheduler(pid, os.SCHED_IDLE, os.sched_param(0))",
}


@pytest.mark.parametrize("attack", sorted(SABOTAGE))
def test_a_job_cannot_change_what_the_next_job_inherits(pool, attack):
    """Limits, nice value, CPU affinity and scheduling policy of the worker (its parent, or PID 1, or
    every process of the uid) are out of a job's reach: the next job on the worker starts as before."""
    before = pool.run_sync(py(INHERITED))
    assert before.ok, before
    code = (
        "import os, resource\nfor pid in {os.getppid(), 1}:\n    try:\n        "
        + SABOTAGE[attack]
        + "\n    except OSError:\n        pass\n"
    )
    res = pool.run_sync(py(code))
    assert res.ok, res
    after = pool.run_sync(py(INHERITED))
    assert after.stdout == before.stdout, (before, after)
    assert_healthy(pool)


def test_file_jobs_run_as_python_would(pool):
    """`python3 FILE`: the worker hands over the source of a file it wrote; any other path is read."""
    show = "import sys; print(__file__, sys.argv)\n"
    res = pool.run_sync(Job(command=("python3", "./pkg/../pkg/m.py", "a"), files={"pkg/m.py": show}))
    assert res.stdout == b"/tmp/pkg/m.py ['./pkg/../pkg/m.py', 'a']\n", res
    res = pool.run_sync(Job(command=("python3", "/usr/lib/python3.11/__phello__/spam.py")))
    assert (res.exit_code, res.stdout) == (0, b"Hello world!\n"), res
    res = pool.run_sync(Job(command=("python3", "missing.py"), files={"other.py": show}))
    assert res.exit_code == 1 and b"FileNotFoundError" in res.stderr, res


def test_every_rlimit_holds_in_the_job(pool):
    """Limits the worker already has are not set again in the job: the job still has exactly them."""
    job = py(
        "import resource\n"
        "print([resource.getrlimit(r) for r in (resource.RLIMIT_CPU, resource.RLIMIT_AS,"
        " resource.RLIMIT_FSIZE, resource.RLIMIT_CORE, resource.RLIMIT_MSGQUEUE, resource.RLIMIT_NOFILE)])\n"
    )
    want = dict(pool.job_rlimits(job.limits))
    res = pool.run_sync(job)
    got = ast.literal_eval(res.stdout.decode())
    order = ("CPU", "AS", "FSIZE", "CORE", "MSGQUEUE", "NOFILE")
    assert got == [(want[getattr(resource, f"RLIMIT_{n}")],) * 2 for n in order], (got, want)


def test_no_state_leaks_between_jobs(pool):
    first = py(
        "import json, os, sys\n"
        "open('/tmp/leak', 'w').write('x'); open('/dev/shm/leak', 'w').write('x')\n"
        "os.mkdir('/tmp/locked'); open('/tmp/locked/f', 'w').write('x'); os.chmod('/tmp/locked', 0)\n"
        "json.dumps = lambda *a, **k: 'PATCHED'\n"
        "sys.modules['secret_state'] = 'left behind'\n"
    )
    assert pool.run_sync(first).ok
    second = py(
        "import json, os, sys\n"
        "print(sorted(os.listdir('/tmp')), os.listdir('/dev/shm'), json.dumps(1),\n"
        "      'secret_state' in sys.modules)\n"
    )
    res = pool.run_sync(second)
    assert res.stdout == b"['main.py'] [] 1 False\n", res


def test_stdio_is_fresh_in_every_job(pool):
    """The worker keeps one set of stdio streams per kind of job (built once, never used by itself):
    every job still starts with empty buffers at offset 0, buffered or `-u` as its command says."""
    left = Job(
        command=(
            "python3",
            "-c",
            "import os, sys; sys.stdin.read(2); sys.stdout.write('left-over'); os._exit(0)",
        ),
        stdin=b"abcdef",
    )
    show = "import os, sys; print(sys.stdin.tell(), repr(sys.stdin.read()), sys.stdout.write_through)\n"
    unbuffered = Job(
        command=("python3", "-u", "-c", show + "sys.stdout.write('kept'); os._exit(0)"), stdin=b"xyz\n"
    )
    buffered = Job(command=("python3", "-c", show + "sys.stdout.write('lost'); os._exit(0)"), stdin=b"abc")
    for _ in range(2):
        res = pool.run_sync(left)
        assert (res.exit_code, res.stdout) == (0, b""), res  # unflushed output dies with the job
        res = pool.run_sync(unbuffered)
        assert res.stdout == b"0 'xyz\\n' True\nkept", res
        res = pool.run_sync(buffered)
        assert (res.exit_code, res.stdout) == (0, b""), res  # print and write were both still buffered
        res = pool.run_sync(py(show.replace("import os, ", "import ")))
        assert res.stdout == b"0 '' False\n", res


# one SysV IPC object of each kind (IPC_PRIVATE, IPC_CREAT | 0600): the worker keeps the
# /proc/sysvipc files open between jobs and must still see what the last job left
_SYSV_MAKE = {
    "shm": "ctypes.CDLL(None).shmget(0, 4096, 0o1600)",
    "sem": "ctypes.CDLL(None).semget(0, 1, 0o1600)",
    "msg": "ctypes.CDLL(None).msgget(0, 0o1600)",
}


@pytest.mark.parametrize("kind", sorted(_SYSV_MAKE))
def test_sysv_ipc_left_behind_recycles_worker(pool, kind):
    assert_healthy(pool)
    assert_healthy(pool)  # more than one job on this worker: its /proc/sysvipc files are open
    recycles = pool.stats["worker_recycles"]
    res = pool.run_sync(py(f"import ctypes\nprint({_SYSV_MAKE[kind]} >= 0)\n"))
    assert res.stdout == b"True\n", res
    assert pool.stats["worker_recycles"] == recycles + 1
    res = pool.run_sync(py(f"print(len(open('/proc/sysvipc/{kind}').read().splitlines()))"))
    assert res.stdout == b"1\n", res  # header only: the object did not reach the next job
    assert_healthy(pool)
    assert pool.stats["worker_recycles"] == recycles + 1  # a clean job after it recycles nothing


def test_limit_hit_recycles_and_next_job_is_correct(pool):
    recycles = pool.stats["worker_recycles"]
    res = pool.run_sync(py("while True:\n    pass", wall_time_s=0.5))
    assert res.limit_hit is LimitHit.WALL_TIME
    assert pool.stats["worker_recycles"] == recycles + 1
    assert_healthy(pool)


def test_dead_worker_is_replaced(pool):
    assert_healthy(pool)
    worker = pool._workers[0]
    starts = pool.stats["worker_starts"]
    worker.proc.kill()  # the worker dies between jobs (host-side accident)
    worker.proc.wait()
    assert_healthy(pool)
    assert pool.stats["worker_starts"] == starts + 1


async def test_bounded_concurrency_and_backpressure():
    if shutil.which("bwrap") is None:
        pytest.skip("bubblewrap not installed")
    import asyncio

    box = BwrapSandbox(BwrapConfig(slots=2, warm_pool=True))
    try:
        jobs = [
            Job(command=("python3", "main.py"), files={"main.py": SUM}, stdin=f"{i} 1".encode())
            for i in range(12)
        ]
        results = await asyncio.gather(*(box.run(j) for j in jobs))
        assert [r.stdout for r in results] == [f"{i + 1}\n".encode() for i in range(12)]
        assert len(box._workers) == 2 and box.stats["worker_starts"] == 2  # never more than `slots`
    finally:
        await box.close()


@pytest.mark.parametrize("warm_pool", [False, True])
def test_close_leaves_no_cgroup_behind(warm_pool):
    """close() removes every cgroup directory it made, on v1 (two hierarchies) and v2 (13.7)."""
    box = BwrapSandbox(BwrapConfig(slots=2, warm_pool=warm_pool))
    if box.cgroups is None:
        box.close_sync()
        pytest.skip("no cgroups on this host")
    asyncio.run(box.warm_up())  # every slot thread starts its own worker
    assert box.stats["worker_starts"] == (2 if warm_pool else 0)
    assert box.run_sync(py("print(1)")).stdout == b"1\n"
    bases = list(box.cgroups.bases.values())
    assert bases and all(b.is_dir() for b in bases)
    box.close_sync()
    assert [b for b in bases if b.exists()] == []
