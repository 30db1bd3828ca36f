"""Warm fork-server that runs INSIDE a sandbox (bwrap or Docker) as PID 1 of its pid namespace.

Stdlib only; started as `python3 -I _worker.py CTRL_FD|CTRL_SOCKET_PATH [module,...] [FILTER_HEX]`
(FILTER_HEX: a seccomp program, `sandbox.seccomp.program()`, that this process installs on itself
before it reports ready; Docker passes it, bwrap installs the same one itself). Protocol over
the control socket (AF_UNIX SOCK_SEQPACKET, only this process holds it):

  worker -> host  {"ready": true}   (or {"error": reason}, then it exits)
  host -> worker  b"job" + SCM_RIGHTS [spec memfd, stdin memfd, stdout w, stderr w, (channel w)]
  worker -> host  {"status": wait_status, "cpu": s, "maxrss_kb": n, "recycle": bool}

Per job: write the job's files into the empty scratch dir, fork a child that becomes the job (fresh
stdio objects, argv, env, cwd, rlimits, new session; fds 0-2 and optionally 3 only), wait for it,
then SIGKILL every other process in the namespace, reap, and wipe the scratch dir and /dev/shm.

Harness jobs (spec mode "harness", see `sandbox/harness.py`): the trusted test harness
(the package `rlvr_runner/`, mounted read-only next to this file and imported once at start) runs here, in PID 1:
it forks one child per test session (the only process that runs untrusted code; it closes every
inherited descriptor, including the control socket and the result channel, before the solution
runs) and writes its records to the job's channel descriptor. Same sweep and wipe afterwards.
If anything cannot be restored (files it cannot delete, SysV IPC objects left, its own rlimits or
scheduling changed) it asks to be recycled and exits. The host enforces wall time and output caps
by killing the whole sandbox.

Integrity: PID 1 ignores signals from inside the namespace that it has no handler for (so no
SIGINT handler is kept), and it is non-dumpable, so jobs (same uid, no capabilities) cannot
ptrace it or open its /proc/1/fd/* to reach the control socket. A job could still change what
every later job inherits from it (rlimits, nice value, CPU affinity, scheduling policy: allowed
between processes of one uid); the project's seccomp filter denies that (bwrap installs it; in a
Docker container this process adds it on top of Docker's default profile, which allows the calls:
`_add_filter`), and should it ever be missing, this process finds the change after the job and
asks to be recycled (`_inherited`).
"""

import _signal
import array
import atexit
import base64
import ctypes
import gc
import io
import json
import os
import resource
import runpy
import shutil
import signal
import socket
import stat
import sys
import traceback
import types

SCRATCH = "/tmp"
SHM = "/dev/shm"
CHANNEL_FD = 3
PR_SET_DUMPABLE = 4
PR_SET_SECCOMP = 22
PR_SET_NO_NEW_PRIVS = 38
SECCOMP_MODE_FILTER = 2
_LIBC = ctypes.CDLL(None, use_errno=True)  # prctl, malloc_trim, madvise


class _SockFprog(ctypes.Structure):  # struct sock_fprog
    _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]


def _add_filter(program):
    """Install the seccomp `program` (packed `struct sock_filter`s) on this process and everything
    it forks. Filters stack: a system call must pass this one and any the runtime installed before
    (Docker's default profile). Needs no privilege once no_new_privs is set (set here; Docker's
    `no-new-privileges` has set it already). Raises OSError if the kernel refuses."""
    buf = ctypes.create_string_buffer(program, len(program))
    prog = _SockFprog(len(program) // 8, ctypes.addressof(buf))
    if _LIBC.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_NO_NEW_PRIVS)")
    if _LIBC.prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, ctypes.byref(prog), 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_SECCOMP)")


def _send(sock, obj):
    sock.send(json.dumps(obj).encode())


def _send_result(sock, status, cpu, maxrss_kb, recycle):
    """The job's reply: JSON written by hand (`json.dumps` touches ~25 more pages of this process,
    each a page fault after the next fork)."""
    sock.send(
        b'{"status": %d, "cpu": %r, "maxrss_kb": %d, "recycle": %s}'
        % (status, float(cpu), maxrss_kb, b"true" if recycle else b"false")
    )


def _recv_job(sock):
    fds = array.array("i")
    msg, anc, _, _ = sock.recvmsg(64, socket.CMSG_SPACE(8 * fds.itemsize))
    if not msg:
        return None
    for level, kind, data in anc:
        if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
            fds.frombytes(data[: len(data) - (len(data) % fds.itemsize)])
    return list(fds)


def _read_fd(fd):
    chunks = []
    size = os.fstat(fd).st_size + 1  # a memfd: one read
    while True:
        b = os.read(fd, size)
        if not b:
            return b"".join(chunks)
        chunks.append(b)


def _write_files(files):
    """Write the job's files into the empty scratch dir; returns {absolute path: content}."""
    written = {}
    for rel, b64 in files:
        path = os.path.join(SCRATCH, rel)
        if "/" in rel:
            os.makedirs(os.path.dirname(path), exist_ok=True)
        data = base64.b64decode(b64)
        mode = 0o755 if data[:2] == b"#!" else 0o644
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, mode)
        try:
            os.write(fd, data)
        finally:
            os.close(fd)
        written[os.path.normpath(path)] = data
    return written


def _stdio(unbuffered):
    """What `python3 [-u]` makes of fds 0-2: (stdin, stdout, stderr) text streams."""
    stdin = io.TextIOWrapper(
        io.BufferedReader(io.FileIO(0, "r", closefd=False)), encoding="utf-8", errors="strict"
    )
    out = io.FileIO(1, "w", closefd=False)
    stdout = io.TextIOWrapper(
        out if unbuffered else io.BufferedWriter(out),
        encoding="utf-8",
        errors="strict",
        write_through=unbuffered,
    )
    err = io.FileIO(2, "w", closefd=False)
    stderr = io.TextIOWrapper(
        err if unbuffered else io.BufferedWriter(err),
        encoding="utf-8",
        errors="backslashreplace",
        line_buffering=True,
        write_through=unbuffered,
    )
    return stdin, stdout, stderr


_STDIO = {}  # (unbuffered, file types of the job's stdin/stdout/stderr) -> the streams such jobs get


def _job_stdio(files, unbuffered):
    """The job's stdio streams, built once for each kind of files and kept. A stream keeps only the
    numbers 0-2 (the child's own descriptors are put there) and what its set-up probes saw, which
    depends on the type of file alone (a memfd stdin at offset 0, pipes out). This process never uses
    them, and each job reads and writes its own copy-on-write copy. Building and freeing them per job
    took ~60 of this process's page faults per job (each page it writes after a fork faults)."""
    key = (unbuffered, *(stat.S_IFMT(os.fstat(fd).st_mode) for fd in files))
    streams = _STDIO.get(key)
    if streams is None:
        streams = _STDIO[key] = _prepared_stdio(files, unbuffered)
    return streams


def _prepared_stdio(files, unbuffered):
    """The job's stdio streams, built here before the fork: allocating them in the child costs ~100
    copy-on-write page faults (~0.5 ms). Their set-up probes (fstat, lseek) must see the job's own
    `files` (stdin, stdout, stderr), so fds 0-2 point at those meanwhile; ours are put back."""
    saved = [os.dup(fd) for fd in (0, 1, 2)]
    try:
        for target, fd in enumerate(files):
            os.dup2(fd, target)
        return _stdio(unbuffered)
    finally:
        for target, fd in enumerate(saved):
            os.dup2(fd, target)
            os.close(fd)


def _exit_code(exc):
    code = exc.code
    if code is None:
        return 0
    if isinstance(code, int):
        return code & 0xFF
    try:
        print(code, file=sys.stderr)
    except Exception:
        pass
    return 1


def _print_exc(exc, filename):
    tb = exc.__traceback__
    while tb is not None and tb.tb_frame.f_code.co_filename != filename:
        tb = tb.tb_next
    traceback.print_exception(type(exc), exc, tb or exc.__traceback__)


_OWN_LIMITS = {}  # our own rlimits (never changed after start), read once


def _prepare(spec, fds, written):
    """What the job's child needs that this process can build before the fork (the child then only
    copies the pages it writes, instead of allocating in shared pages): its stdio streams (None
    for exec), the rlimits it must lower (those equal to ours, inherited, are skipped: it cannot
    raise them), and for `python3 FILE` the file's path and, if we just wrote it, its source."""
    streams = _job_stdio(fds[1:4], spec["unbuffered"]) if spec["mode"] != "exec" else None
    limits = []
    for res, val in spec["rlimits"]:
        if res not in _OWN_LIMITS:
            _OWN_LIMITS[res] = resource.getrlimit(res)
        if _OWN_LIMITS[res] != (val, val):
            limits.append((res, (val, val)))
    filename = source = None
    if spec["mode"] == "file":  # what `os.path.abspath` gives in the child, whose cwd is SCRATCH
        filename = os.path.normpath(os.path.join(SCRATCH, spec["target"]))
        source = written.get(filename)
    return streams, limits, filename, source


def _run_job(spec, fds, written, ctrl):
    """Fork the job's child, wait for it, close the job's descriptors. Returns (pid, status, rusage)."""
    prepared = _prepare(spec, fds, written)
    pid = os.fork()
    if pid == 0:
        ctrl.close()
        _child(spec, fds, prepared)
    # Touch nothing until the job has exited: while it runs, every page this process writes is
    # copied (both sides then hold a copy); afterwards a write only re-enables the page. Orphans
    # (ours as PID 1) that exit meanwhile are reaped: a long job (a Python tool session) would
    # otherwise collect their zombies against its pids limit.
    while True:
        done, status, ru = os.wait4(-1, 0)
        if done == pid:
            break
    prepared = None
    for fd in fds:  # the pipes' EOF reaches the host once the job and this copy are gone
        os.close(fd)
    return pid, status, ru


def _child(spec, fds, prepared):
    """Become the job (`prepared`: from `_prepare`). Never returns."""
    code = 1
    streams, limits, filename, source = prepared
    try:
        os.setsid()
        stdin, out, err = fds[1], fds[2], fds[3]
        chan = fds[4] if len(fds) > 4 else None
        os.dup2(stdin, 0)
        os.dup2(out, 1)
        os.dup2(err, 2)
        if chan is not None:
            os.dup2(chan, CHANNEL_FD)
        os.closerange(CHANNEL_FD + 1 if chan is not None else CHANNEL_FD, 1 << 16)
        _signal.signal(_signal.SIGINT, _signal.default_int_handler)  # the C call: no enum wrapping
        for res, pair in limits:
            resource.setrlimit(res, pair)
        os.chdir(SCRATCH)  # the environment was set by the worker before the fork (`_set_env`)
        mode, target, args = spec["mode"], spec["target"], spec["args"]
        if mode == "exec":  # any other command: exec it in this fresh process
            try:
                os.execvpe(target, args, os.environ)
            except OSError as e:
                os.write(2, f"cannot exec {target}: {e.strerror}\n".encode())
                os._exit(127)
        sys.stdin, sys.stdout, sys.stderr = sys.__stdin__, sys.__stdout__, sys.__stderr__ = streams

        if mode == "file":
            sys.argv = [target, *args]
            if not spec["isolated"]:
                sys.path.insert(0, os.path.dirname(filename))
            main = types.ModuleType("__main__")
            main.__file__, main.__cached__ = filename, None
            sys.modules["__main__"] = main

            def run():  # what the interpreter does for `python3 FILE` (runpy.run_path is slower)
                code = source
                if code is None:  # not one of the job's files: read it here
                    fd = os.open(filename, os.O_RDONLY | os.O_CLOEXEC)  # no file object: fewer COW faults
                    try:
                        code = _read_fd(fd)
                    finally:
                        os.close(fd)
                exec(compile(code, filename, "exec"), main.__dict__)
        elif mode == "code":
            filename = "<string>"
            sys.argv = ["-c", *args]
            sys.path.insert(0, "")
            main = types.ModuleType("__main__")
            sys.modules["__main__"] = main

            def run():
                exec(compile(target, "<string>", "exec"), main.__dict__)
        else:
            sys.argv = ["-m", *args]
            sys.path.insert(0, os.getcwd())
            filename = None

            def run():
                runpy._run_module_as_main(target, alter_argv=True)

        try:
            run()
            code = 0
        except SystemExit as e:
            code = _exit_code(e)
        except BaseException as e:  # an uncaught exception in the job: traceback, exit 1
            if filename is None:
                filename = getattr(sys.modules.get("__main__"), "__file__", None)
            _print_exc(e, filename)
            code = 1
        try:
            threading = sys.modules.get("threading")  # not preloaded: importing it costs every fork
            if threading is not None:
                threading._shutdown()
            atexit._run_exitfuncs()
        except BaseException:
            pass
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except BaseException:
                code = code or 120
    finally:
        os._exit(code)


def _sweep():
    """Kill and reap every process in this namespace except us (we are its PID 1)."""
    assert os.getpid() == 1
    try:
        os.kill(-1, signal.SIGKILL)
    except ProcessLookupError:  # nobody left (most jobs): nothing to reap either
        return
    while True:
        try:
            os.waitpid(-1, 0)
        except ChildProcessError:
            return


def _wipe(root):
    """Empty `root` (a tmpfs private to this sandbox). True when it is empty afterwards."""
    assert os.getpid() == 1

    def fix(func, path, _exc):
        os.chmod(os.path.dirname(path), 0o700)
        if os.path.isdir(path) and not os.path.islink(path):
            os.chmod(path, 0o700)
        func(path)

    try:
        # bwrap: the tmpfs is ours (a job may have chmod-ed it); docker: root's 1777, left alone
        st = os.stat(root)
        if st.st_uid == os.getuid() and st.st_mode & 0o7777 != 0o755:
            os.chmod(root, 0o755)
        found = False
        for entry in os.scandir(root):
            found = True
            if entry.is_dir(follow_symlinks=False):
                os.chmod(entry.path, 0o700)
                shutil.rmtree(entry.path, onerror=fix)
            else:
                os.unlink(entry.path)
        return not found or not os.listdir(root)
    except OSError:
        return False


_RLIMITS = sorted(getattr(resource, name) for name in dir(resource) if name.startswith("RLIMIT_"))


def _inherited():
    """What a job's process inherits from this one that another process of our uid could change
    (`prlimit`, `setpriority`, `sched_setaffinity`, `sched_setscheduler` on our pid)."""
    return (
        [resource.getrlimit(r) for r in _RLIMITS],
        os.getpriority(os.PRIO_PROCESS, 0),
        os.sched_getaffinity(0),
        os.sched_getscheduler(0),
    )


_IPC_FILES = []  # descriptors of /proc/sysvipc/{shm,sem,msg}, opened once: re-read from offset 0


def _ipc_clean():
    """True when no SysV IPC object (shared memory, semaphore, message queue) is left. The files
    stay open (opening three /proc files per job costs ~5% of a trivial job's CPU)."""
    if not _IPC_FILES:
        for kind in ("shm", "sem", "msg"):
            try:
                _IPC_FILES.append(os.open(f"/proc/sysvipc/{kind}", os.O_RDONLY | os.O_CLOEXEC))
            except OSError:
                pass
    for fd in _IPC_FILES:
        if os.pread(fd, 1 << 16, 0).count(b"\n") > 1:  # more than the header line
            return False
    return True


def _load_runner():
    """The trusted harness (the package `rlvr_runner/`) mounted next to this file, imported once
    (None if it is not there)."""
    where = os.path.join(os.path.dirname(os.path.abspath(__file__)), "rlvr_runner")
    path = os.path.join(where, "__init__.py")
    if not os.path.exists(path):
        return None
    import importlib.util

    spec = importlib.util.spec_from_file_location("rlvr_runner", path, submodule_search_locations=[where])
    module = importlib.util.module_from_spec(spec)
    sys.modules["rlvr_runner"] = module
    spec.loader.exec_module(module)
    return module


_ENV = [None]  # the job environment os.environ holds now


def _set_env(env):
    """Give os.environ exactly `env` (the next job's, inherited by its children); no-op if it has it."""
    if env != _ENV[0]:
        os.environ.clear()
        os.environ.update(env)
        _ENV[0] = env


def _harness(runner, spec, fds):
    """Run a harness job here (PID 1); returns a wait status. fds: spec, stdin, stdout, stderr, channel."""
    if runner is None or len(fds) < 5:
        os.write(fds[3], b"worker: no harness or no result channel\n")
        return 2 << 8
    try:
        runner.run_spec(json.loads(spec["harness"]), fds[4], tuple(map(tuple, spec["rlimits"])))
    except BaseException:  # a harness failure (never the solution's: that runs in the children)
        try:
            os.write(fds[3], traceback.format_exc().encode()[-4000:])
        except OSError:
            pass
        return 1 << 8
    return 0


MADV_COLLAPSE = 25  # Linux >= 6.1: back a range with transparent huge pages now
HUGE = 2 << 20


_MALLINFO2 = "arena ordblks smblks hblks hblkhd usmblks fsmblks uordblks fordblks keepcost"


class _Mallinfo2(ctypes.Structure):  # glibc's struct mallinfo2: ten size_t
    _fields_ = [(name, ctypes.c_size_t) for name in _MALLINFO2.split()]


def _huge_heap(libc):
    """Best effort: back the aligned 2 MB stretches of our anonymous memory (the malloc heap
    mostly; obmalloc's 1 MB arenas rarely hold one) with transparent huge pages. A fork then
    copies one entry per 2 MB instead of 512, and this process re-enables a written huge page in
    one fault after its job exits. The job splits what it writes into 4 kB copies (its own, freed
    at exit); our huge pages stay whole. The heap is collapsed only below its free top chunk
    (`keepcost`): glibc shrinks the heap from there, and shrinking into a huge page splits it.
    malloc's own settings are left alone (the jobs inherit them). A kernel without MADV_COLLAPSE
    or a libc without mallinfo2 (glibc < 2.33): nothing changes."""
    if not hasattr(libc, "mallinfo2"):
        return
    libc.mallinfo2.restype = _Mallinfo2
    libc.sbrk.restype = ctypes.c_void_p
    libc.sbrk.argtypes = (ctypes.c_ssize_t,)
    libc.madvise.argtypes = (ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int)
    top = libc.sbrk(0) - libc.mallinfo2().keepcost  # where the free top chunk of the heap starts
    try:
        with open("/proc/self/maps") as f:
            maps = f.read().splitlines()
    except OSError:
        return
    for line in maps:
        fields = line.split()
        if fields[1] != "rw-p" or (len(fields) > 5 and fields[5] != "[heap]"):
            continue
        lo, hi = (int(x, 16) for x in fields[0].split("-"))
        if len(fields) > 5:  # the heap: only what lies below its top chunk
            hi = min(hi, top)
        lo = (lo + HUGE - 1) & ~(HUGE - 1)
        hi &= ~(HUGE - 1)
        if hi > lo:
            libc.madvise(lo, hi - lo, MADV_COLLAPSE)


_KEPT = []  # what a job replaces (stdio, argv, __main__): it must not be freed in every job's child


def _settle():
    """Make the image every job is forked from cheap to fork (after the imports, before the first job)."""
    # a job's child rebinds sys.stdin/stdout/stderr, argv and __main__: were these their only
    # references, the child would free them (and write to every page they touch) in each job
    _KEPT.extend((sys.stdin, sys.stdout, sys.stderr, sys.__stdin__, sys.__stdout__, sys.__stderr__))
    _KEPT.extend((sys.argv, sys.modules.get("__main__")))
    gc.collect()
    # hand the start-up garbage (compiling the runner, imports) back: every fork copies the page
    # table entries of what is resident (~12 MB -> ~9.6 MB, ~6% of a trivial job's CPU); glibc only
    if hasattr(_LIBC, "malloc_trim"):
        _LIBC.malloc_trim(0)
        _huge_heap(_LIBC)
    gc.freeze()  # keep the collector from touching (and copying) every pre-fork object in each job


def main(argv):
    if os.getpid() != 1:
        print("refusing to run: the worker must be PID 1 of its own pid namespace", file=sys.stderr)
        return 2
    _LIBC.prctl(PR_SET_DUMPABLE, 0, 0, 0, 0)
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    if argv[1].startswith("/"):  # Docker: connect to the host's one-shot listener bind-mounted here
        ctrl = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        ctrl.connect(argv[1])
    else:  # bwrap: inherited socketpair end
        ctrl = socket.socket(fileno=int(argv[1]))
    for name in filter(None, (argv[2] if len(argv) > 2 else "").split(",")):
        try:
            __import__(name)
        except ImportError:
            pass
    if len(argv) > 3 and argv[3]:
        try:
            _add_filter(bytes.fromhex(argv[3]))
        except (OSError, ValueError) as e:  # never run jobs without it; the host raises this reason
            _send(ctrl, {"error": f"cannot install the seccomp filter: {e}"})
            return 2
    runner = _load_runner()
    os.chdir(SCRATCH)  # harness children run where every job runs (Docker starts us in /, read-only)
    _settle()
    null = os.open("/dev/null", os.O_RDWR)
    os.dup2(null, 0)
    os.dup2(null, 1)
    os.close(null)
    inherited = _inherited()
    _send(ctrl, {"ready": True})
    while True:
        fds = _recv_job(ctrl)
        if fds is None:
            return 0
        try:
            spec = json.loads(_read_fd(fds[0]))
            os.lseek(fds[0], 0, os.SEEK_SET)
            written = _write_files(spec["files"])
            _set_env(spec["env"])
        except (OSError, ValueError) as e:
            for fd in fds:
                os.close(fd)
            _send(ctrl, {"error": f"{type(e).__name__}: {e}", "recycle": True})
            return 1
        if spec["mode"] == "harness":
            before = resource.getrusage(resource.RUSAGE_CHILDREN)
            status = _harness(runner, spec, fds)
            for fd in fds:
                os.close(fd)
            _sweep()
            if runner is not None:
                runner.reset()
            ru = resource.getrusage(resource.RUSAGE_CHILDREN)
            cpu = ru.ru_utime + ru.ru_stime - before.ru_utime - before.ru_stime
            recycle = status != 0  # the harness itself failed: start from a fresh worker
            maxrss = 0  # RUSAGE_CHILDREN keeps the maximum of every job so far: not this job's peak
        else:
            _, status, ru = _run_job(spec, fds, written, ctrl)
            _sweep()
            cpu, recycle, maxrss = ru.ru_utime + ru.ru_stime, False, ru.ru_maxrss
        clean = _ipc_clean() and _inherited() == inherited
        _send_result(ctrl, status, cpu, maxrss, recycle or not clean)
        # Off the host's critical path; the next job is read only after this. If the scratch cannot
        # be emptied we exit, and the host retries that next job on a fresh worker.
        if not (clean and _wipe(SCRATCH) and _wipe(SHM)):
            return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
