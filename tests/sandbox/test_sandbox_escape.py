"""Escape & abuse suite for the bubblewrap backend (one-shot and warm pool).

Each case runs a hostile job, asserts containment with a harmless detector the test owns (a canary
file, a loopback listener, a host sleeper), then checks the sandbox still runs a correct job.
Payloads are bounded so that a containment failure could not hurt the host.
"""

from __future__ import annotations

import os
import socket
import subprocess
import time
from pathlib import Path

import pytest
from sandbox_helpers import (
    FOREIGN_ABI,
    KEYRING_ADD,
    KEYRING_READ,
    MEMORY_SYSCALLS,
    MEMORY_SYSCALLS_DENIED,
    PROC_SNOOPING,
    assert_healthy,
    pids_bound,
    proc_snooping_contained,
    py,
    sandbox_uid,
)

from sandbox import Job, LimitHit

PROJECT = Path(__file__).resolve().parents[2]


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


def test_identity_no_caps_no_new_privs_unprivileged_uid(sb):
    marker = "rlvr-identity-marker-5521"
    code = (
        "import os, time\n"
        "lines = open('/proc/self/status').read().splitlines()\n"
        "st = dict(l.split(':\\t', 1) for l in lines if ':\\t' in l)\n"
        "keys = ('CapEff', 'CapBnd', 'NoNewPrivs')\n"
        "print(os.getuid(), *(st[k].strip() for k in keys), flush=True)\n"
        "time.sleep(1.0)\n"
    )
    fut = sb.submit(Job(command=("python3", "main.py", marker), files={"main.py": code}))
    host_uids = set()
    while not fut.done() and not host_uids:  # seen from the host: which uid owns the job's process?
        for pid in _marker_procs(marker) + _marker_procs("rlvr/worker.py"):  # one-shot | warm pool
            try:
                status = Path(f"/proc/{pid}/status").read_text()
            except OSError:
                continue
            host_uids.add(int(status.split("Uid:")[1].split()[1]))
    res = fut.result()
    assert res.stdout == f"{sandbox_uid(sb)} 0000000000000000 0000000000000000 1\n".encode(), res
    assert host_uids and 0 not in host_uids, host_uids


def test_network_host_loopback_unreachable_and_only_lo(sb, listener):
    port = listener.getsockname()[1]
    code = (
        "import socket\n"
        "print(sorted(n for _, n in socket.if_nameindex()))\n"
        "s = socket.socket(); s.settimeout(2)\n"
        f"try:\n    s.connect(('127.0.0.1', {port})); print('CONNECTED')\n"
        "except OSError as e:\n    print('refused', type(e).__name__)\n"
    )
    res = sb.run_sync(py(code))
    assert res.stdout.decode().splitlines()[0] == "['lo']", res
    assert b"refused" in res.stdout and b"CONNECTED" not in res.stdout
    assert _accepted(listener) == 0
    assert_healthy(sb)


def test_bounded_fork_bomb_is_capped_by_pids(sb):
    code = (
        "import os, time\n"
        "n = 0\n"
        "for i in range(300):\n"
        "    try:\n        pid = os.fork()\n"
        "    except OSError:\n        break\n"
        "    if pid == 0:\n        time.sleep(30); os._exit(0)\n"
        "    n += 1\n"
        "print(n)\n"
    )
    res = sb.run_sync(py(code, processes=16, wall_time_s=20))
    assert res.exit_code == 0, res
    assert int(res.stdout) < pids_bound(sb, 16)  # pids.max (cgroup) or the NPROC backstop stopped it
    assert_healthy(sb)


def test_memory_bomb(sb):
    res = sb.run_sync(
        py("b = []\nfor i in range(64):\n    b.append(bytearray(16 << 20))\nprint('ALL')", memory_mb=128)
    )
    assert b"ALL" not in res.stdout and res.limit_hit is LimitHit.MEMORY, res
    assert_healthy(sb)


def test_cpu_spin_killed_at_wall_limit(sb):
    res = sb.run_sync(py("while True:\n    pass", wall_time_s=1.0, cpu_time_s=30))
    assert res.limit_hit is LimitHit.WALL_TIME and res.exit_code is None, res
    assert res.wall_time_s >= 1.0  # not before the limit
    assert_healthy(sb)


def test_cpu_limit(sb):
    res = sb.run_sync(py("while True:\n    pass", wall_time_s=20, cpu_time_s=1))
    assert res.limit_hit is LimitHit.CPU_TIME and res.signal in (9, 24), res
    assert_healthy(sb)


def test_output_flood_capped(sb):
    code = "import os\nb = b'x' * (1 << 20)\nfor i in range(2048):\n    os.write(1, b)\n"  # 2 GiB, bounded
    res = sb.run_sync(py(code, output_bytes=1 << 20, wall_time_s=20))
    assert res.limit_hit is LimitHit.OUTPUT and res.stdout_truncated, res.limit_hit
    assert len(res.stdout) == 1 << 20
    assert_healthy(sb)


def test_stderr_and_channel_floods_capped(sb):
    res = sb.run_sync(
        py(
            "import os\nfor i in range(2048):\n    os.write(3, b'y' * (1 << 20))",
            channel=True,
            output_bytes=4096,
            wall_time_s=20,
        )
    )
    assert res.limit_hit is LimitHit.OUTPUT and res.channel_truncated and len(res.channel) == 4096
    res = sb.run_sync(py("import sys\nwhile True:\n    sys.stderr.write('e' * 65536)", output_bytes=4096))
    assert res.limit_hit is LimitHit.OUTPUT and res.stderr_truncated and len(res.stderr) == 4096
    assert_healthy(sb)


def test_disk_fill_scratch_capped(sb):
    code = (
        "import os\nn = 0\n"
        "try:\n"
        "    for i in range(200):\n"
        "        with open(f'f{i}', 'wb') as f:\n            f.write(b'z' * (1 << 20))\n"
        "        n += 1\n"
        "except OSError as e:\n    print('stopped', n, e.errno)\n"
        "for p in ('/big', '/usr/big', '/dev/big', '/proc/big'):\n"
        "    try:\n        open(p, 'wb').write(b'x'); print('WROTE', p)\n"
        "    except OSError:\n        pass\n"
    )
    res = sb.run_sync(py(code, scratch_mb=16, file_size_mb=64))
    out = res.stdout.decode()
    assert "stopped" in out and "WROTE" not in out, res
    assert int(out.split()[1]) <= 16
    assert_healthy(sb)


def test_file_size_limit(sb):
    res = sb.run_sync(py("open('big', 'wb').write(b'z' * (8 << 20))", file_size_mb=1))
    assert res.limit_hit is LimitHit.FILE_SIZE, res


def test_host_files_invisible_and_unwritable(sb, tmp_path):
    canary = tmp_path / "canary.txt"
    canary.write_text("original")
    targets = [
        str(canary),
        "/etc/shadow",
        "/etc/sudoers",
        str(Path.home() / ".bashrc"),
        str(PROJECT / "pyproject.toml"),
        "/root",
        str(PROJECT),
    ]
    code = (
        "import os\n"
        f"for p in {targets!r}:\n"
        "    for op in ('r', 'w'):\n"
        "        try:\n"
        "            if os.path.isdir(p):\n                print('LISTED', p, os.listdir(p))\n"
        "            elif op == 'w':\n                open(p, op).write('pwned')\n"
        "            else:\n                print('READ', p, open(p).read()[:20])\n"
        "        except OSError:\n            pass\n"
        "dirs = ('/root', '/home', '/work', '/var')\n"
        "print('exists:', [p for p in dirs if os.path.exists(p)])\n"
    )
    res = sb.run_sync(py(code))
    out = res.stdout.decode()
    assert "READ" not in out and "LISTED" not in out, out
    assert out.strip().endswith("exists: []"), out
    assert canary.read_text() == "original"
    assert_healthy(sb)


def test_symlink_tricks(sb, tmp_path):
    canary = tmp_path / "canary.txt"
    canary.write_text("original")
    code = (
        "import os\n"
        f"targets = [{str(canary)!r}, '/proc/1/root/etc/shadow', '/proc/self/root/../../etc/shadow']\n"
        "for i, t in enumerate(targets + ['/proc/1/cwd/../etc/shadow', '/proc/1/root/root/.bashrc']):\n"
        "    os.symlink(t, f'l{i}')\n"
        "    try:\n        print('READ', open(f'l{i}').read()[:30])\n    except OSError:\n        pass\n"
        "    try:\n        open(f'l{i}', 'w').write('pwned')\n    except OSError:\n        pass\n"
        "os.symlink('/tmp', 'loop'); print(len(os.listdir('loop')) > 0)\n"
    )
    res = sb.run_sync(py(code))
    assert b"READ" not in res.stdout, res
    assert canary.read_text() == "original"
    assert_healthy(sb)


def test_jobs_cannot_see_each_other(sb):
    marker = "rlvr-writer-marker-4410"
    code = (
        "import os\nopen('secret-a', 'w').write('A')\n"
        f"os.execvp('sh', ['sh', '-c', 'sleep 60; :', {marker!r}])"
    )
    writer = py(code, wall_time_s=3)
    reader = py(
        "import os\nhits = []\n"
        "for root, dirs, files in os.walk('/'):\n"
        "    if root.startswith(('/proc', '/sys', '/usr')):\n        dirs[:] = []; continue\n"
        "    hits += [f for f in files if f == 'secret-a']\n"
        "print(hits, sorted(p for p in os.listdir('/proc') if p.isdigit()))\n"
    )
    fa = sb.submit(writer)
    deadline = time.monotonic() + 30
    while not _marker_procs(marker):  # the writer's file exists once its sleeper is visible
        assert not fa.done() and time.monotonic() < deadline, fa.result() if fa.done() else "writer never ran"
    rb = sb.submit(reader).result()
    assert fa.result().limit_hit is LimitHit.WALL_TIME and rb.ok, (fa.result(), rb)
    hits, pids = rb.stdout.decode().split("] ", 1)
    assert hits == "[", rb.stdout
    assert len(eval(pids)) <= 2  # only its own processes (job [+ worker])


def test_env_secrets_and_host_environ_unreadable(sb, monkeypatch):
    monkeypatch.setenv("RLVR_TEST_SECRET", "s3cr3t-value")
    code = (
        "import os, glob\nseen = str(dict(os.environ))\n"
        "for p in glob.glob('/proc/*/environ'):\n"
        "    try:\n        seen += open(p, 'rb').read().decode(errors='replace')\n"
        "    except OSError:\n        pass\n"
        "print('s3cr3t' in seen)\n"
    )
    res = sb.run_sync(py(code))
    assert res.stdout == b"False\n", res


def test_cannot_signal_host_processes(sb):
    as_root = os.geteuid() == 0  # the victim runs as the sandbox's own host uid
    victim = subprocess.Popen(
        ["sleep", "60"], **({"user": 65534, "group": 65534, "extra_groups": []} if as_root else {})
    )
    try:
        code = (
            "import os, signal\n"
            f"for pid in ({victim.pid}, {os.getpid()}):\n"
            "    try:\n        os.kill(pid, signal.SIGKILL); print('KILLED', pid)\n"
            "    except OSError as e:\n        print('denied', e.errno)\n"
        )
        res = sb.run_sync(py(code))
        assert b"KILLED" not in res.stdout, res
        assert victim.poll() is None
    finally:
        victim.kill()
        victim.wait()
    assert_healthy(sb)


def _marker_procs(marker: str) -> list[int]:
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            if marker.encode() in Path(f"/proc/{pid}/cmdline").read_bytes():
                found.append(int(pid))
        except OSError:
            pass
    return found


def test_no_background_process_survives(sb):
    marker = "rlvr-orphan-marker-7731"
    code = (
        "import os, subprocess\n"
        f"subprocess.Popen(['sh', '-c', 'sleep 30; : {marker}'], start_new_session=True)\n"
        "if os.fork() == 0:\n    os.setsid()\n"
        f"    os.execvp('sh', ['sh', '-c', 'sleep 31; : {marker}'])\n"
        "print('parent done')\n"
    )
    res = sb.run_sync(py(code))
    assert res.ok, res
    assert _marker_procs(marker) == []
    assert_healthy(sb)


def test_proc_snooping(sb):
    res = sb.run_sync(py(PROC_SNOOPING))
    assert proc_snooping_contained(res.stdout.decode()), res
    assert_healthy(sb)


def test_kernel_keyring_cannot_carry_data_between_jobs(sb):
    sb.run_sync(py(KEYRING_ADD))
    res = sb.run_sync(py(KEYRING_READ))
    assert res.stdout == b"False\n", res
    assert_healthy(sb)


def test_foreign_abi_syscalls_are_killed(sb):
    res = sb.run_sync(py(FOREIGN_ABI))
    assert b"SURVIVED" not in res.stdout, res
    assert_healthy(sb)


def test_no_syscall_reaches_another_process_memory(sb):
    """ptrace, process_vm_readv/writev and pidfd_getfd are denied by seccomp (EPERM) whatever the
    target's dumpable flag (13.3): here aimed at the job's own parent, harmlessly (read 1 byte)."""
    res = sb.run_sync(py(MEMORY_SYSCALLS))
    assert res.stdout == MEMORY_SYSCALLS_DENIED.encode(), res
    assert_healthy(sb)


def test_no_syscall_changes_another_process_limits_or_scheduling(sb):
    """prlimit (setting), setpriority, sched_setaffinity/scheduler and ioprio_set on another process
    of the sandbox are denied by seccomp (EPERM): a job could otherwise lower what a warm worker
    hands every later job. Aimed at a child the job forks itself; the same calls on itself work."""
    code = (
        "import ctypes, os, platform, resource\n"
        "ioprio_set = {'x86_64': 251, 'aarch64': 30}[platform.machine()]\n"
        "libc = ctypes.CDLL(None, use_errno=True)\n"
        "r, w = os.pipe()\n"
        "pid = os.fork()\n"
        "if pid == 0:\n    os.read(r, 1)\n    os._exit(0)\n"
        "cpu = {min(os.sched_getaffinity(0))}\n"
        "calls = [lambda p: resource.prlimit(p, resource.RLIMIT_NOFILE, (16, 16)),\n"
        "         lambda p: os.setpriority(os.PRIO_PROCESS, p, 19),\n"
        "         lambda p: os.sched_setaffinity(p, cpu),\n"
        "         lambda p: os.sched_setscheduler(p, os.SCHED_BATCH, os.sched_param(0)),\n"
        "         lambda p: os.sched_setparam(p, os.sched_param(0))]\n"
        "def attempt(call, p):\n"
        "    try:\n        call(p)\n        return 0\n    except OSError as e:\n        return e.errno\n"
        "others = [attempt(c, pid) for c in calls]\n"
        "kept = resource.prlimit(pid, resource.RLIMIT_NOFILE) == resource.getrlimit(resource.RLIMIT_NOFILE)\n"
        "print(others, [attempt(c, 0) for c in calls], kept)\n"
        "print(libc.syscall(ioprio_set, 1, pid, 0), ctypes.get_errno(), libc.syscall(ioprio_set, 1, 0, 0))\n"
        "os.write(w, b'x')\n"
        "os.waitpid(pid, 0)\n"
    )
    res = sb.run_sync(py(code))
    assert res.stdout == b"[1, 1, 1, 1, 1] [0, 0, 0, 0, 0] True\n-1 1 0\n", res
    assert_healthy(sb)
