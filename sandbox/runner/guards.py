"""What a test child may not do, as data and checks the child's audit hook reads: the audit events
that are always a hack, paths into /proc (`_path_reason`), the harness's own files
(`_harness_file`), and the seccomp filter that keeps descriptors 0-2 and the result pipe in place
(`fd_filter`). Stdlib only."""

from __future__ import annotations

import os
import struct

from .wire import JOB_FILES, RESULT_FD

_HERE = (lambda: 0).__code__.co_filename  # how this package's code names its files (a .pyc's own name)
_STDLIB = os.path.dirname(os.__file__)
# stdlib modules that call sys._getframe for their own bookkeeping without handing frames out
_FRAME_OK = {
    os.path.join(_STDLIB, name)
    for name in (
        "collections/__init__.py",
        "enum.py",
        "typing.py",
        "warnings.py",
        "logging/__init__.py",
        "dataclasses.py",
        "functools.py",
        "abc.py",
        "string.py",
        "re/__init__.py",
        "re.py",
    )
}
_FRAME_ATTRS = {"tb_frame", "gi_frame", "cr_frame", "ag_frame", "f_back", "f_locals", "f_globals"}
_ALWAYS_HACK = {
    "gc.get_objects",
    "gc.get_referrers",
    "gc.get_referents",
    "sys._current_frames",
    "sys.settrace",
    "sys.setprofile",
    "sys.addaudithook",
    "code.__new__",
    "function.__new__",
}
# process creation: a forked or spawned process outlives its test and could signal or tamper
_SPAWN = {
    "os.system",
    "os.exec",
    "os.posix_spawn",
    "os.spawn",
    "os.fork",
    "os.forkpty",
    "subprocess.Popen",
    "pty.spawn",
}
# signalling: another process could be the harness; itself, a test ended before its verdict
_SIGNAL = {"os.kill", "os.killpg", "signal.pthread_kill"}
# calls that open or point at a path (checked against the harness's own files)
_LINKING = {"open", "os.symlink", "os.link"}
# attribute assignments that change what existing code does without rebinding a name
_SET_HACK = {"__code__", "__bases__", "__class__"}


# ----------------------------------------------------------------------------- descriptor guard

# per machine: (AUDIT_ARCH, close, dup2 (None: the architecture has only dup3), dup3, close_range)
_FD_CALLS = {
    "x86_64": (0xC000003E, 3, 33, 292, 436),
    "aarch64": (0xC00000B7, 57, None, 24, 436),
}
_BPF_LD_W_ABS, _BPF_JEQ_K, _BPF_JGT_K, _BPF_RET_K = 0x20, 0x15, 0x25, 0x06
_SECCOMP_ALLOW, _SECCOMP_KILL_PROCESS, _SECCOMP_ERRNO = 0x7FFF0000, 0x80000000, 0x00050000
_EPERM = 1


def fd_filter(machine: str, stdio: bool) -> bytes | None:
    """A seccomp program (packed `struct sock_filter`s) that keeps a child's descriptors 0-2 (and
    the result pipe) what the harness made them, whatever the code calls: `dup2`/`dup3` onto one of
    them kills the process (SIGSYS, judged a hack). Closing one of 0-2 kills a session child too;
    in a stdio child (where `open(0).read()` closes fd 0 when the file object goes) `close` of 0-2
    returns success without closing, and a `close_range` from 0-2 fails (EPERM: Python, like libc,
    then closes one by one), so nothing can ever be opened onto them. Nothing else can put another
    file there: every other call that makes a descriptor takes the lowest free number, and 0-2 are
    never free. None for an architecture not listed here."""
    if machine not in _FD_CALLS:
        return None
    arch, close, dup2, dup3, close_range = _FD_CALLS[machine]
    on_close = _SECCOMP_ERRNO if stdio else _SECCOMP_KILL_PROCESS  # ERRNO 0: "closed", still open
    on_range = (_SECCOMP_ERRNO | _EPERM) if stdio else _SECCOMP_KILL_PROCESS
    nr_of = [(dup2, "dup"), (dup3, "dup"), (close, "close"), (close_range, "range")]
    code: list = [(_BPF_LD_W_ABS, 0, 0, 4), (_BPF_JEQ_K, 0, "allow", arch), (_BPF_LD_W_ABS, 0, 0, 0)]
    code += [(_BPF_JEQ_K, label, 0, nr) for nr, label in nr_of if nr is not None]
    code += [(_BPF_RET_K, 0, 0, _SECCOMP_ALLOW)]
    labels = {"dup": len(code)}  # a dup's target is argument 1 (its low word: the kernel's int)
    code += [(_BPF_LD_W_ABS, 0, 0, 24), (_BPF_JEQ_K, "kill", 0, RESULT_FD), (_BPF_JGT_K, "allow", "kill", 2)]
    labels["close"] = len(code)
    code += [(_BPF_LD_W_ABS, 0, 0, 16), (_BPF_JGT_K, "allow", "on_close", 2)]
    labels["range"] = len(code)
    code += [(_BPF_LD_W_ABS, 0, 0, 16), (_BPF_JGT_K, "allow", "on_range", 2)]
    for label, value in (("allow", _SECCOMP_ALLOW), ("kill", _SECCOMP_KILL_PROCESS)):
        labels[label] = len(code)
        code.append((_BPF_RET_K, 0, 0, value))
    labels["on_close"], labels["on_range"] = len(code), len(code) + 1
    code += [(_BPF_RET_K, 0, 0, on_close), (_BPF_RET_K, 0, 0, on_range)]
    out = b""
    for pc, (op, jt, jf, k) in enumerate(code):
        jt, jf = (labels[j] - pc - 1 if isinstance(j, str) else j for j in (jt, jf))
        out += struct.pack("=HBBI", op, jt, jf, k)
    return out


_FD_GUARD: dict = {}  # stdio? -> (prctl, address of its sock_fprog) or None; built in the harness process


def _fd_guard(stdio: bool):
    """(prctl, address of the `sock_fprog`) that a child hands the kernel to install `fd_filter`, made
    once in the harness process (making ctypes objects in a child costs copied pages); None where
    this machine has no filter."""
    if stdio not in _FD_GUARD:
        program = fd_filter(os.uname().machine, stdio)
        if program is None:
            _FD_GUARD[stdio] = None
        else:
            import ctypes

            class _Fprog(ctypes.Structure):
                _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]

            prctl = ctypes.CDLL(None, use_errno=True).prctl
            prctl.argtypes = [ctypes.c_int, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong]
            prctl.restype = ctypes.c_int
            buf = ctypes.create_string_buffer(program, len(program))
            fprog = _Fprog(len(program) // 8, ctypes.addressof(buf))
            inherited = prctl(39, 0, 0, 0, 0) == 1  # PR_GET_NO_NEW_PRIVS: set by bwrap or the worker
            _FD_GUARD[stdio] = (prctl, ctypes.addressof(fprog), inherited, buf, fprog)  # buf, fprog: kept
    return _FD_GUARD[stdio]


def _install_fd_guard(guard) -> str | None:
    """In the child, before any solution code: install the filter; why it failed, or None."""
    if guard is None:
        return None
    prctl, address, inherited = guard[0], guard[1], guard[2]
    if not inherited and prctl(38, 1, 0, 0, 0) != 0:  # PR_SET_NO_NEW_PRIVS: lets anyone add a filter
        return f"prctl(PR_SET_NO_NEW_PRIVS) failed: errno {__import__('ctypes').get_errno()}"
    if prctl(22, 2, address, 0, 0) != 0:  # PR_SET_SECCOMP, SECCOMP_MODE_FILTER
        return f"cannot install the descriptor filter: errno {__import__('ctypes').get_errno()}"
    return None


# ----------------------------------------------------------------------------- harness files


def _listing(where: str) -> frozenset:
    try:
        return frozenset(os.listdir(where))
    except OSError:
        return frozenset()


_PACKAGE_DIR = os.path.dirname(os.path.abspath(__file__))
_MODULES = frozenset(name for name in _listing(_PACKAGE_DIR) if name.endswith(".py"))
# the directory holding this package: the job's own (one-shot: the spec, `run.py`, the package) or
# the worker's (a warm pool, which runs each job in an empty directory); its names as they are now,
# before any solution ran
_HARNESS_DIR = os.path.dirname(_PACKAGE_DIR)
_HARNESS_FILES = _listing(_HARNESS_DIR) | JOB_FILES
_JOB_DIR = [_HARNESS_DIR]  # the job's directory: `run_spec` sets it (a pool's scratch directory)


def _harness_file(path: object, cwd: str, _type=type, _str=str, _bytes=bytes) -> str | None:
    """Why `path` names one of the harness's files (the spec with the tests, the runner) in the
    harness's or the job's directory, or None: where a harness keeps the tests and expected outputs
    is where a solution would look for them (none are there; looking is what counts). Lexical: a
    link to one is checked when it is made."""
    kind = _type(path)
    if kind is _bytes:
        path = path.decode("utf-8", "surrogateescape")
    elif kind is not _str:
        return None
    full = os.path.normpath(path if path.startswith("/") else cwd + "/" + path)
    for base in (_HARNESS_DIR, _JOB_DIR[0]):
        if full.startswith(base + "/") and full[len(base) + 1 :].split("/", 1)[0] in _HARNESS_FILES:
            return f"harness file {path[:200]!r}"
    return None
    full = os.path.normpath(path if path.startswith("/") else cwd + "/" + path)
    where, name = full.rsplit("/", 1) if "/" in full else ("", full)
    if where == _HARNESS_DIR + "/__pycache__" or (where == _HARNESS_DIR and name in _HARNESS_FILES):
        return f"harness file {path[:200]!r}"
    return None


def _fd_ids(fds: tuple[int, ...]) -> tuple:
    """(device, inode) of each descriptor, None where it is closed."""
    out = []
    for fd in fds:
        try:
            st = os.fstat(fd)
            out.append((st.st_dev, st.st_ino))
        except OSError:
            out.append(None)
    return tuple(out)


def _path_reason(
    path: object, cwd: str, lstat, readlink, link_target: bool = False, _type=type, _str=str, _bytes=bytes
) -> str | None:
    """Why opening `path` (or creating a symlink to it: `link_target`) could reach /proc, or None.

    Only exact str/bytes are accepted (a path object's `__fspath__` could answer differently when
    the kernel asks); no path may climb (`..`: the cwd, or a directory on the way, may be swapped for
    a symlink between this check and the kernel's walk); the path is
    resolved like the kernel does (symlinks included, with the captured `lstat`/`readlink`), and it
    may not end in or pass through /proc, nor be `/` or `/dev` (directory descriptors from which a
    relative open reaches /proc; /dev/fd and /dev/std* are links into it)."""
    kind = _type(path)
    if kind is _bytes:
        path = path.decode("utf-8", "surrogateescape")
    elif kind is not _str:
        return f"path of type {kind.__name__}"
    parts = path.split("/")
    relative = not path.startswith("/")
    if ".." in parts:
        return f"climbing path {path[:200]!r}"
    if relative:
        parts = cwd.split("/") + parts
    todo = [p for p in parts if p and p != "."]
    todo.reverse()
    done: list[str] = []
    hops = 0
    while todo:
        part = todo.pop()
        if part == "..":
            if done:
                done.pop()
            continue
        done.append(part)
        if done[0] == "proc":
            return f"path into /proc {path[:200]!r}"
        try:
            st = lstat("/" + "/".join(done))
        except (OSError, ValueError):
            continue  # missing: the rest stays lexical
        if st.st_mode & 0o170000 == 0o120000:
            hops += 1
            if hops > 40:
                return f"symlink loop {path[:200]!r}"
            target = readlink("/" + "/".join(done))
            done.pop()
            if target.startswith("/"):
                done = []
            more = [p for p in target.split("/") if p and p != "."]
            more.reverse()
            todo.extend(more)
    if not done or done == ["dev"] or (link_target and done[0] == "dev"):
        return f"path {path[:200]!r} resolves to /{'/'.join(done)}"
    return None


# the file names this package's code carries (what `co_filename` says in its frames: the name a .pyc
# was compiled with, else the source path): a frame with one of them is the harness's
HARNESS_CODE_FILES = frozenset(
    f"{os.path.dirname(_HERE)}/{name}" if os.path.dirname(_HERE) else name for name in _MODULES
)
