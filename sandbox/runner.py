"""The trusted test harness that runs INSIDE the sandbox (stdlib only, one file, Python >= 3.9).

Two ways in: `python3 run.py` as its own job (`main()`), or `run_spec()` called by a warm pool's
worker that has this module pre-imported (`sandbox.harness`): same children, same records.

Usage (inside a job): `python3 runner.py` in a directory holding `spec.json`; the job must have the
result channel (`Job.channel=True`, file descriptor 3). Nothing on stdout/stderr is ever trusted.
`sandbox.harness` ships it as `rlvr_runner.py` plus an unchecked-hash .pyc and a 4-line `run.py` that
imports it and calls `main()`, so the sandbox's interpreter does not recompile it for every job.

Spec (JSON): `{"version": 1, "setup": str, "code": str, "entry_point": str|null, "tests": [...],
"time_limit_s": float, "wall_factor": float, "memory_mb": int, "stop_on_error": bool}`. A test is
one of
  * `{"kind": "stdio", "input": str, "max_output": int}`: the solution runs as `__main__` with that
    stdin; its stdout goes back to the host, which compares it (expected outputs never enter here);
  * `{"kind": "call", "calls": [expr, ...], "args": [...]|null}`: each expression (e.g. `f(1, 2)`) is
    evaluated in the solution's namespace (`__rlvr_args__` holds the decoded `args`); the values go
    back as exact-builtin-type JSON and the host checks them (expected values never enter here);
  * `{"kind": "assert", "code": str}`: in-process test code (HumanEval `check`). Best effort: the
    verdict is a per-test nonce-framed record written by the child only after the code returned.

Children. A stdio test gets its own child (the solution runs as `__main__` with that stdin). All
consecutive call/assert tests share one "session" child: setup + solution once, then the tests in
order, one message each; after a timeout or crash the next test gets a fresh child. Each child
closes the channel (and every other descriptor), moves to its own process group, sets rlimits
(address space; CPU as a backstop), installs a seccomp filter that keeps descriptors 0-2 and the
result pipe in place whatever the code calls (`fd_filter`; a `dup2` onto them is SIGSYS → hack),
installs an audit hook (signals to any process, process creation, opening the harness's own files
such as the spec → hack in every format; frame/heap/ctypes access, tracing, code replacement, paths
into /proc → hack in sessions; sessions also verify an identity
snapshot of every loaded module, see `_Snapshot` and `_child`) and talks to the harness over a private pipe in frames
`len(4) nonce(16) tag(1) index(4) cpu(8) body`. The harness validates the frames and enforces the
time limit as CPU time: it reads the child's CPU from /proc every 50 ms and kills it once the
current test has used more than `time_limit_s` (also checked from the frame and rusage), with a
wall deadline of `time_limit_s * wall_factor + 0.5` as a safety net (moved by the time the child
waited for a CPU: a busy machine does not turn a check into a timeout) and RLIMIT_CPU as a backstop.
It writes one framed record per test to the channel: `len(4) + JSON`. Record types: `hello`,
`result`, `done`. Every test runs, except after a `hack` or `internal` record and, with
`stop_on_error`, after the first record whose outcome is not `ok`: a wrong answer is `ok` here (the
host judges stdio and call tests), so it never stops the run.

Result outcomes: `ok` (ran to completion; stdio/call verdicts are decided on the host), `error`
(exception, non-zero exit, fatal signal), `timeout`, `memory`, `output` (stdout over its cap),
`invalid` (returned a non-builtin value), `hack` (detector hit), `internal` (harness failure).
"""

from __future__ import annotations

import _signal
import builtins
import gc
import importlib  # noqa: F401 - importing it renames _frozen_importlib's names: never after a snapshot
import io
import json
import os
import resource
import selectors
import signal
import struct
import sys
import time
from itertools import islice
from operator import is_ as _is
from types import MethodType as _MethodType
from types import ModuleType as _ModuleType

CHANNEL_FD = 3
RESULT_FD = 9  # the child's end of its private pipe to the harness
NONCE_BYTES = 16
MAX_CHILD_MESSAGE = 8 << 20
BUDGET_RESERVE_S = 3.0  # of the job's wall budget, kept to report the records (see `run_spec`)
CPU_POLL_S = 0.05  # how often a running child's CPU time is checked against the limit
_TICKS = os.sysconf("SC_CLK_TCK")
_BUILTIN_NAMES = frozenset(name for name in vars(builtins) if not name.startswith("__"))
_object_getattr = object.__getattribute__
_IMMUTABLE_TYPE = 1 << 8  # Py_TPFLAGS_IMMUTABLETYPE: static built-in types, no attribute can change
_UNREAPED: list[int] = []  # killed children whose exit status no verdict needs
MAX_DEPTH = 200
BIG_INT = 1 << 12000  # ints at least this large travel as hex (JSON readers cap decimal digits)
_RUNNER_FILE = (lambda: 0).__code__.co_filename
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
_PRELOAD = (
    "math",
    "cmath",
    "re",
    "collections",
    "itertools",
    "functools",
    "heapq",
    "bisect",
    "string",
    "typing",
    "random",
    "copy",
    "operator",
)


def _dict_stamps():
    """`stamp(d)`: a reader whose `.value` is CPython's modification stamp of dict `d` (PEP 509
    `ma_version_tag`: every insert, rebind or delete gives the dict a new value from a global counter,
    so an unchanged value means an unmodified dict), read without touching anything the dict holds.
    None where this interpreter's layout is not the one verified here (every check then compares).

    Readers are made only in the harness process: making one is an audited ctypes event, which a
    session child's hook counts as a hack; reading one is not."""
    if sys.implementation.name != "cpython" or not (3, 9) <= sys.version_info[:2] <= (3, 13):
        return None
    if hasattr(sys, "gettotalrefcount") or sys.maxsize != (1 << 63) - 1:
        return None  # a debug build (bigger object header) or not 64-bit
    try:
        import ctypes
    except ImportError:
        return None
    used_at, stamp_at = 16, 24  # PyDictObject: ob_refcnt, ob_type, ma_used, ma_version_tag

    def stamp(d: dict):
        return ctypes.c_uint64.from_address(id(d) + stamp_at)

    try:  # verify the layout: ma_used tracks len(), the stamp moves on every kind of change
        d: dict = {}
        used, reader = ctypes.c_ssize_t.from_address(id(d) + used_at), stamp(d)
        seen = [reader.value]
        for change in (
            lambda: d.__setitem__("a", 1),
            lambda: d.__setitem__("a", 2),
            lambda: d.update(b=3),
            lambda: d.pop("a"),
            lambda: d.__delitem__("b"),
            lambda: d.setdefault("c", 4),
            lambda: d.clear(),
        ):
            change()
            if used.value != len(d) or reader.value in seen:
                return None
            seen.append(reader.value)
        if ctypes.c_ssize_t.from_address(id(sys.modules) + used_at).value != len(sys.modules):
            return None
    except Exception:  # noqa: BLE001 - anything unexpected: no fast path
        return None
    return stamp


def _class_dict(klass: type) -> dict | None:
    """The dict behind `klass.__dict__` (a mappingproxy), or None. Harness process only."""
    proxy = klass.__dict__
    inner = gc.get_referents(proxy)
    return inner[0] if len(inner) == 1 and type(inner[0]) is dict and len(inner[0]) == len(proxy) else None


_STAMP = _dict_stamps()


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


# what a one-shot harness job ships next to the spec (`sandbox.harness.harness_job`); a warm pool
# runs the job in an empty directory, with the harness files elsewhere (`_HARNESS_DIR`)
JOB_FILES = frozenset({"spec.json", "run.py", "rlvr_runner.py", "rlvr_runner", "__pycache__"})


def _harness_names() -> tuple[str, frozenset]:
    """The directory this harness was loaded from, and the names in it now (before any solution
    ran): the job's files in a one-shot job, the worker's files in a warm pool."""
    where = os.path.dirname(os.path.abspath(__file__))
    try:
        return where, frozenset(os.listdir(where)) | JOB_FILES
    except OSError:
        return where, JOB_FILES


_HARNESS_DIR, _HARNESS_FILES = _harness_names()
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


# ----------------------------------------------------------------------------- value encoding


class NotBuiltin(Exception):
    """A value whose type is not an exact builtin type."""

    def __init__(self, value: object) -> None:
        kind = type(value)
        super().__init__(kind.__name__)
        self.type_name = f"{kind.__module__}.{kind.__qualname__}"
        self.rigged = _is_rigged(kind)


def _is_rigged(kind: type) -> bool:
    """True for user classes that redefine comparison/hash or subclass a builtin value type."""
    if kind.__module__ in ("builtins",) or kind.__module__.startswith("numpy"):
        return False
    if any(issubclass(kind, b) for b in (int, float, str, list, tuple, dict, set, frozenset, bytes, complex)):
        return True
    return any(name in vars(k) for k in kind.__mro__[:-1] for name in ("__eq__", "__ne__", "__hash__"))


def encode(value: object, depth: int = 0) -> object:
    """Exact-builtin-type JSON: list/str/bool/None/finite float/small int as themselves, others tagged."""
    if depth > MAX_DEPTH:
        raise ValueError("value nested too deeply")
    kind = type(value)
    if value is None or kind is bool or kind is str:
        return value
    if kind is int:
        return value if -BIG_INT < value < BIG_INT else {"int": hex(value)}
    if kind is float:
        return value if value - value == 0.0 else {"float": repr(value)}
    if kind is list:
        return [encode(v, depth + 1) for v in value]
    if kind is tuple:
        return {"tuple": [encode(v, depth + 1) for v in value]}
    if kind is dict:
        return {"dict": [[encode(k, depth + 1), encode(v, depth + 1)] for k, v in value.items()]}
    if kind is set or kind is frozenset:
        return {kind.__name__: [encode(v, depth + 1) for v in value]}
    if kind is complex:
        return {"complex": [repr(value.real), repr(value.imag)]}
    if kind is bytes:
        return {"bytes": value.hex()}
    raise NotBuiltin(value)


def check_builtin(value: object, depth: int = 0) -> None:
    """Raise NotBuiltin unless `value` is built only from exact builtin types."""
    kind = type(value)
    if depth > MAX_DEPTH:
        raise ValueError("value nested too deeply")
    if value is None or kind in (bool, int, float, str, complex, bytes, range):
        return
    if kind in (list, tuple, set, frozenset):
        for v in value:
            check_builtin(v, depth + 1)
        return
    if kind is dict:
        for k, v in value.items():
            check_builtin(k, depth + 1)
            check_builtin(v, depth + 1)
        return
    raise NotBuiltin(value)


# ----------------------------------------------------------------------------- framing


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def take_messages(buf: bytearray, nonce: bytes) -> list[tuple[str, int, float, bytes]] | None:
    """Remove complete child frames `len(4) nonce(16) tag(1) index(4) cpu(8) body` from `buf`.

    Returns (tag, index, cpu seconds of that test, body) per frame, or None if a frame is malformed
    or not signed by `nonce`.
    """
    out = []
    while len(buf) >= 4:
        (size,) = struct.unpack(">I", buf[:4])
        if size < NONCE_BYTES + 13 or size > MAX_CHILD_MESSAGE + 64:
            return None
        if len(buf) < 4 + size:
            break
        frame = bytes(buf[4 : 4 + size])
        del buf[: 4 + size]
        if frame[:NONCE_BYTES] != nonce:
            return None
        index, cpu = struct.unpack(">id", frame[NONCE_BYTES + 1 : NONCE_BYTES + 13])
        out.append((chr(frame[NONCE_BYTES]), index, cpu, frame[NONCE_BYTES + 13 :]))
    return out


# ----------------------------------------------------------------------------- the child


class _Snapshot:
    """Identity snapshot of what a session can reach: the namespace of each module, of the classes
    it holds (mutable ones: built-in static types cannot change), and of the instances behind its
    bound methods (`random.randint` is `random._inst.randint`), plus which module object each
    `sys.modules` name maps to. Each is kept as a shallow copy, compared by identity.

    Built in the harness process (which never runs untrusted code; `update`) and, in each session
    child, brought up to date before the solution runs (`refresh`) for the modules that session
    can reach (`reach`). Checking (`changed`) compares by identity, and on a difference looks at
    keys of exact type str only, so it never calls anything a solution defined. Any rebinding,
    removal or new name is a change, except what the interpreter itself adds: a loaded submodule's
    attribute on its package, `__warningregistry__`, `__slotnames__` (copyreg), and an instance's
    own data attributes that shadow nothing of its class (`random.gauss` state).

    Fast path (`_STAMP`, CPython): each namespace copied in the harness process, and `sys.modules`,
    keeps its dict's modification stamp from when its copy was last known to match; a namespace
    whose stamp has not moved is unmodified and is not walked. Walking one in a session child costs a
    copy-on-write page fault per page its keys and values live on (their reference counts are
    written), most of a session's set-up; reading a stamp touches no object. Changing a dict without
    moving its stamp takes a raw memory write (ctypes, which the hook stops, or an interpreter bug,
    which could as well rewrite the copies)."""

    def __init__(self) -> None:
        # module -> ([space, copy, label, stamp reader or None, stamp], [owned])
        self.groups: dict[str, tuple[list, list]] = {}
        self.modules: dict[str, object] = {}
        self.active: tuple[str, ...] = ()  # the modules `changed` checks
        self._reach: dict[tuple, tuple[str, ...]] = {}
        self._seen: set[int] = set()
        self._loaded_dict = sys.modules
        self._loaded = _STAMP(sys.modules) if _STAMP else None  # sys.modules' stamp reader
        self._loaded_at = None  # its stamp when `update` last walked it (or `register` added to it)
        self._registered: list[str] = []  # names `register` added since that walk
        self._modules_at = None  # its stamp when `self.modules` was last known to match (`accept`)

    @staticmethod
    def _same(space, copy, _len=len, _all=all, _map=map, _is=_is) -> bool:
        """Same keys and values, by identity and in order (builtins bound here: patching them does
        nothing; no `id()`, which is an audited event: the hook would run for every object)."""
        return (
            _len(space) == _len(copy)
            and _all(_map(_is, space, copy))
            and _all(_map(_is, space.values(), copy.values()))
        )

    def update(self, stamps: bool = True) -> None:
        """Add the modules loaded since the last call (and what they hold), in load order. Only the
        names are walked to find them: walking the items would write the reference count of every
        module object (in a session child, a copied page each); not even those when the stamp of
        `sys.modules` has not moved. `stamps=False` (a session child): no stamp readers are made."""
        seen, loaded, known = self._seen, sys.modules, self.modules
        watched = self._loaded is not None and loaded is self._loaded_dict
        if watched and self._loaded_at is not None and self._loaded.value == self._loaded_at:
            new = [name for name in self._registered if name not in known]  # no other change
        else:
            new = [name for name in loaded if name not in known]
        self._registered = []
        stamp = _STAMP if stamps else None
        for name in new:
            module = loaded[name]
            self.modules[name] = module
            spaces: list = []
            owned: list = []
            self.groups[name] = (spaces, owned)
            if type(module) is not _ModuleType:
                continue
            reader = stamp(module.__dict__) if stamp else None
            spaces.append(
                [
                    module.__dict__,
                    dict(module.__dict__),
                    name,
                    reader,
                    reader.value if reader is not None else None,
                ]
            )
            for value in list(module.__dict__.values()):
                if isinstance(value, type):
                    if value.__flags__ & _IMMUTABLE_TYPE or id(value) in seen:
                        continue
                    seen.add(id(value))
                    inner = _class_dict(value) if stamp else None
                    reader = stamp(inner) if inner is not None else None
                    spaces.append(
                        [
                            value.__dict__,
                            dict(value.__dict__),
                            None,
                            reader,
                            reader.value if reader is not None else None,
                        ]
                    )
                elif type(value) is _MethodType:
                    owner = value.__self__
                    space = getattr(owner, "__dict__", None)
                    if type(space) is dict and id(space) not in seen:
                        seen.add(id(space))
                        owned.append([owner, type(owner), space, dict(space)])
        if watched:
            self._loaded_at = self._loaded.value

    def reach(self, roots: tuple[str, ...], depth: int = 2) -> tuple[str, ...]:
        """`roots` and the modules their namespaces refer to (modules, or the `__module__` of what
        they hold), `depth` steps out; cached per roots (call in the harness process)."""
        if roots not in self._reach:
            names = {r for r in roots if r in sys.modules}
            frontier = list(names)
            for _ in range(depth):
                found = []
                for name in frontier:
                    module = sys.modules.get(name)
                    if type(module) is not _ModuleType:
                        continue
                    for value in list(module.__dict__.values()):
                        other = (
                            value.__name__
                            if type(value) is _ModuleType
                            else getattr(value, "__module__", None)
                        )
                        if type(other) is str and other not in names and other in sys.modules:
                            names.add(other)
                            found.append(other)
                frontier = found
            self._reach[roots] = tuple(sorted(names))
        return self._reach[roots]

    def register(self, module: _ModuleType) -> None:
        """`sys.modules[module.__name__] = module` by the harness: the next `update` then need not
        walk `sys.modules` to find it, if nothing else changed it since the last walk."""
        exact = self._loaded is not None and sys.modules is self._loaded_dict
        exact = exact and self._loaded_at is not None and self._loaded.value == self._loaded_at
        sys.modules[module.__name__] = module
        if exact:
            self._registered.append(module.__name__)
            self._loaded_at = self._loaded.value

    def assign(self, module: _ModuleType, values: dict) -> None:
        """Set attributes of `module` (the harness, in a child, before the solution) and, if its copy
        was current, bring the copy up to date without walking the namespace."""
        group = self.groups.get(module.__name__)
        entry = group[0][0] if group and group[0] and group[0][0][0] is module.__dict__ else None
        current = entry is not None and entry[3] is not None and entry[3].value == entry[4]
        for key, value in values.items():
            setattr(module, key, value)
        if current:
            entry[1].update(values)
            entry[4] = entry[3].value

    def refresh(self, names: tuple[str, ...]) -> None:
        """Accept the current state of `names` (and modules loaded since `update`) as pristine: the
        child, before any untrusted code runs. From now on `changed` checks those."""
        count = len(self.modules)
        self.update(stamps=False)
        added = len(self.modules) - count  # `modules` keeps load order: the newest are last
        names = (*names, *reversed(list(islice(reversed(self.modules), added))))
        for name in names:
            group = self.groups.get(name)
            if group is None:
                continue
            if sys.modules.get(name) is not self.modules[name]:
                self.modules[name] = sys.modules.get(name)
            for entry in group[0]:
                reader = entry[3]
                if reader is not None and reader.value == entry[4]:
                    continue  # not modified since its copy was made
                if not self._same(entry[0], entry[1]):
                    entry[1] = dict(entry[0])
                if reader is not None:
                    entry[4] = reader.value
            for entry in group[1]:
                entry[1], entry[3] = type(entry[0]), dict(entry[2])
        self.active = names
        self.accept_modules()

    def accept_modules(self) -> None:
        """Note that `sys.modules` matches `self.modules` for the active names now (the harness
        calls it again after adding a module of its own): `changed` skips the lookups while the stamp
        of `sys.modules` stays put."""
        if self._loaded is not None and sys.modules is self._loaded_dict:
            self._modules_at = self._loaded.value

    def changed(self, only=None, _type=type, _str=str, _module=_ModuleType, _vars=vars) -> str | None:
        """What was rebound, added or removed since `refresh` in the active modules (or in `only`,
        a subset of them), or None."""
        same, groups, modules = self._same, self.groups, sys.modules
        loaded = self._loaded
        lookups = not (
            loaded is not None and modules is self._loaded_dict and loaded.value == self._modules_at
        )
        for module_name in self.active if only is None else only:
            if lookups and modules.get(module_name) is not self.modules[module_name]:
                return f"replaced module {module_name:.80}"
            spaces, owned = groups[module_name]
            for entry in spaces:
                space, copy, name, reader, stamp = entry
                if reader is not None and reader.value == stamp:
                    continue  # not modified since it last matched its copy
                if same(space, copy):
                    continue
                for key, value in space.items():
                    if _type(key) is not _str:
                        return f"non-string name in {name or 'a class'}"
                    if key in copy:
                        if copy[key] is not value and key != "__warningregistry__":
                            return f"rebound {name or 'a class'}.{key}"[:200]
                    elif not (
                        key in ("__warningregistry__", "__slotnames__")
                        or (name and _type(value) is _module and value.__name__ == name + "." + key)
                    ):
                        return f"added {name or 'a class'}.{key}"[:200]
                for key in copy:
                    if key not in space:
                        return f"removed {name or 'a class'}.{key}"[:200]
                entry[1] = dict(space)  # only what the interpreter adds: accepted
                if reader is not None:
                    entry[4] = reader.value
            for owner, kind, space, copy in owned:  # classes come first, verified: no user code runs
                if _type(owner) is not kind or _object_getattr(owner, "__dict__") is not space:
                    return f"replaced the namespace of a {kind.__name__:.80}"
                if same(space, copy):
                    continue
                for key in space:
                    if _type(key) is not _str:
                        return f"non-string name in a {kind.__name__:.80}"
                    for klass in kind.__mro__:
                        if key in _vars(klass) and copy.get(key, space) is not space[key]:
                            return f"shadowed {kind.__name__}.{key} on an instance"[:200]
        return None


_PRISTINE: list[_Snapshot] = []  # the harness process's snapshot, reused by every session child
_ROOTS = ("builtins", "sys", __name__)  # what an assert session reaches: the harness, its modules...
_CALL_ROOTS = (*_ROOTS, "json", "json.encoder")  # ...a call session: the harness and its encoder


def _pristine(spec: dict, chunk: list) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """In the harness process, before a session's fork: import what its trusted test code and
    setup import (so the test gets the pristine module, not one the solution loaded and patched),
    bring the snapshot up to date, and return the modules that session can reach and the ones
    its test code uses directly (checked after every call of the entry point)."""
    if not _PRISTINE:
        _PRISTINE.append(_Snapshot())
    codes = [t["code"] for _, t in chunk if t["kind"] == "assert"]
    names = _test_imports([*codes, spec.get("setup") or ""] if codes else [])
    snapshot = _PRISTINE[0]
    known = len(snapshot.modules)
    snapshot.update()
    # call tests are judged on the host: only what the harness itself runs on in the child matters
    reach = snapshot.reach((*_ROOTS, *names)) if codes else snapshot.reach(_CALL_ROOTS, depth=0)
    if len(snapshot.modules) != known:
        gc.freeze()  # the copies live as long as this process: no collection in a child walks them
    return reach, tuple(n for n in (*_ROOTS, *names) if n in reach)


_IMPORTS = None  # compiled lazily: `import a, b.c` / `from a import b` lines of trusted code


def _test_imports(codes: list[str]) -> tuple[str, ...]:
    """Import the modules `codes` import (trusted test or setup code); their names."""
    import re

    global _IMPORTS
    if _IMPORTS is None:
        _IMPORTS = re.compile(r"^[ \t]*(?:from[ \t]+([\w.]+)[ \t]+import|import[ \t]+([\w., \t]+))", re.M)
    found = []
    for code in codes:
        for match in _IMPORTS.finditer(code):
            names = [match.group(1)] if match.group(1) else match.group(2).split(",")
            for name in names:
                name = name.split()[0] if name.split() else ""
                if name and not name.startswith(".") and name not in found:
                    try:
                        __import__(name)
                        found.append(name)
                    except Exception:  # noqa: BLE001 - the test itself will report it
                        pass
    return tuple(found)


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


def _child(
    spec: dict,
    chunk: list,
    nonce: bytes,
    res_w: int,
    files: tuple[int, int, int],
    streams: tuple,
    rlimits: tuple = (),
    reach: tuple[tuple[str, ...], tuple[str, ...]] = ((), ()),
    guard: tuple | None = None,
) -> None:
    """Run `chunk` ([(index, test)]) in this forked process and leave with os._exit; never returns.

    stdio: one test; the solution itself is the test. Otherwise a session: setup + solution once,
    then a `R` (ready) message, then one message per test in order. `files`: what fds 0-2 become;
    `streams`: their text streams, built by the parent (`_child_stdio`). `rlimits` ([(resource,
    value)]) are the sandbox job's own limits, set first when the harness runs in a pool's worker.

    Sessions share the interpreter with the solution, so the solution may not change what the
    harness or an in-process check relies on (HACK, whether or not it changed the outcome): the
    modules, classes and bound-method owners `reach` names (the harness's, builtins, sys, what the
    setup and test code import, and what those refer to; `_Snapshot`, checked after loading, after
    each call of the entry point in assert tests, after each assert test, after the last call test
    and before every open), the descriptors 0-2 and the result pipe; no process creation (in any
    format), no path into /proc.
    Checks see the setup's names and the real builtins, never the solution's shadowing globals.
    In every format: no signal to any process (itself included), no open of the harness's own files
    (`_harness_file`), and `guard` (`_fd_guard`: a seccomp filter, installed before the solution
    runs) keeps descriptors 0-2 and the result pipe in place whatever the code calls.
    """
    _write, _exit, _pack, _type, _getframe = os.write, os._exit, struct.pack, type, sys._getframe
    _str, _reason, _lstat, _readlink, _getcwd = str, _path_reason, os.lstat, os.readlink, os.getcwd
    _harness = _harness_file
    _cpu = time.process_time
    started = [_cpu()]  # CPU clock at the start of the current test (reported with every message)
    stdio = chunk[0][1]["kind"] == "stdio"
    for target, fd in enumerate(files):
        os.dup2(fd, target)
    if res_w != RESULT_FD:
        os.dup2(res_w, RESULT_FD)
    os.closerange(3, RESULT_FD)
    os.closerange(RESULT_FD + 1, 1 << 16)

    def send(tag: str, index: int, body: bytes = b"") -> None:
        frame = nonce + tag.encode() + _pack(">id", index, _cpu() - started[0]) + body
        data = _pack(">I", len(frame)) + frame
        while data:
            data = data[_write(RESULT_FD, data) :]

    first = chunk[0][0]
    try:
        os.setpgid(0, 0)
        _signal.signal(_signal.SIGINT, _signal.default_int_handler)  # the C call: no enum wrapping
        for which, value in rlimits:
            _limit(which, value)
        if stdio:
            sys.stdin, sys.stdout, sys.stderr = streams
            sys.__stdin__, sys.__stdout__, sys.__stderr__ = streams
        else:  # keeps the snapshot's copy of `sys` current (no walk of it in `refresh`)
            names = ("stdin", "stdout", "stderr")
            values = {name: stream for name, stream in zip(names, streams)}  # noqa: B905 - Python 3.9
            values.update({f"__{name}__": stream for name, stream in zip(names, streams)})  # noqa: B905
            _PRISTINE[0].assign(sys, values)
        _limit(resource.RLIMIT_CPU, len(chunk) * (int(spec["time_limit_s"]) + 1) + 1, slack=2)  # backstop
        _limit(resource.RLIMIT_CORE, 0)
        if spec.get("memory_mb"):
            _limit(resource.RLIMIT_AS, int(spec["memory_mb"]) << 20)
        if hasattr(sys, "set_int_max_str_digits"):
            sys.set_int_max_str_digits(0)
        passes = {index: nonce + b"P" + _pack(">i", index) for index, _ in chunk}
        fds = (0, 1, 2, RESULT_FD)
        fds_before = _fd_ids(fds)
        failed = _install_fd_guard(guard)
        if failed is not None:
            send("I", first, failed.encode())
            _exit(0)
    except BaseException as exc:  # noqa: BLE001 - harness failure, not the solution's
        send("I", first, repr(exc).encode())
        _exit(0)

    current = [first]
    snapshot = None if stdio else _PRISTINE[0]

    armed = [False]  # the snapshot is current: from the solution on

    direct: list[str] = []  # the modules checked after each call of the entry point

    def tampered(light: bool = False) -> str | None:
        if not armed[0]:
            return None
        reason = snapshot.changed(direct if light else None)
        if reason is None and _fd_ids(fds) != fds_before:
            reason = "replaced a standard or result descriptor"
        return reason

    def hook(event: str, args: tuple) -> None:
        if current[0] is None:
            return
        reason = None
        if event in _SIGNAL:  # any process, itself included: ending a test early is a hack too
            reason = f"{event}{args}"[:200]
        elif event in _SPAWN:  # a shell could signal the harness (or anything else) behind our back
            reason = event
        elif event in _LINKING and _type(args[0]) is not int:  # where the tests would be
            index, current[0] = current[0], None
            try:
                cwd = _getcwd()
                if event == "os.symlink":  # the target, relative to the link's directory
                    link = args[1] if _type(args[1]) is _str else ""
                    cwd = (link if link.startswith("/") else cwd + "/" + link).rsplit("/", 1)[0] or "/"
                why = _harness(args[0], cwd)
            finally:
                current[0] = index
            if why is not None:
                reason = f"{event}: {why}"
        if reason is not None or stdio:
            pass  # stdio: the solution has the process to itself (the kernel keeps it from the harness)
        elif event in _ALWAYS_HACK or event.startswith("ctypes."):
            reason = event
        elif event == "open" or event == "os.chdir" or event == "os.symlink":
            if _type(args[0]) is int:
                return  # an open descriptor (fdopen, fchdir): its path was checked when opened
            index, current[0] = current[0], None
            try:
                cwd = _getcwd()
                if event == "os.symlink":  # (target, link, dir_fd): where would the link point?
                    link = args[1] if _type(args[1]) is _str else ""
                    base = (link if link.startswith("/") else cwd + "/" + link).rsplit("/", 1)[0]
                    why = "symlink relative to a descriptor" if args[2] != -1 else None
                    why = why or _reason(args[0], base or "/", _lstat, _readlink, link_target=True)
                else:
                    why = _reason(args[0], cwd, _lstat, _readlink)
                why = why or tampered()  # a patched module must not steer what is opened
            finally:
                current[0] = index
            if why is not None:
                reason = f"{event}: {why}"
        elif event == "compile":  # code posing as the harness or a trusted stdlib file passes the frame check
            name = args[1]
            if _type(name) is _str and (
                name == _RUNNER_FILE or name in _FRAME_OK or name.startswith("<frozen")
            ):
                reason = f"compile as {name}"
        elif event == "marshal.loads":  # a code object with any filename; only the import system may
            index, current[0] = current[0], None
            try:
                caller = _getframe(1).f_code.co_filename
            finally:
                current[0] = index
            if not caller.startswith("<frozen importlib"):
                reason = f"marshal.loads from {caller}"
        elif event == "import" and args[0] in ("ctypes", "_ctypes"):
            reason = "import ctypes"
        elif event == "sys._getframe" or (event == "object.__getattr__" and args[1] in _FRAME_ATTRS):
            index, current[0] = current[0], None
            try:
                caller = _getframe(1).f_code.co_filename
            finally:
                current[0] = index
            if caller != _RUNNER_FILE and caller not in _FRAME_OK:
                reason = f"{event} {args[1] if event != 'sys._getframe' else ''} from {caller}"
        elif event == "object.__setattr__" and args[1] in _SET_HACK:
            reason = f"set {args[1]} of a {_type(args[0]).__name__}"
        if reason is not None:
            send("H", current[0], reason.encode()[:500])
            _exit(0)

    sys.addaudithook(hook)
    ns: dict = {}
    setup_names: dict = {}
    try:
        if not stdio:  # the setup gets a module of its own: the solution's globals never steer it
            setup_module = _ModuleType("rlvr_setup")
            snapshot.register(setup_module)
            setup_module.__dict__["__builtins__"] = builtins
            exec(compile(spec.get("setup") or "", "<setup>", "exec"), setup_module.__dict__)
            setup_names = {k: v for k, v in vars(setup_module).items() if not k.startswith("__")}
            snapshot.refresh(reach[0])  # the state every check of this session must see again
            direct[:] = (*reach[1], setup_module.__name__)
            armed[0] = True
        module = _ModuleType("__main__" if stdio else "solution")  # dataclasses, pickle look it up
        sys.modules[module.__name__] = module
        if snapshot is not None:
            snapshot.accept_modules()  # the solution's own module is no change
        ns = module.__dict__
        ns["__builtins__"] = builtins
        if stdio:
            exec(compile(spec.get("setup") or "", "<setup>", "exec"), ns)
        ns.update(setup_names)
    except BaseException as exc:  # noqa: BLE001
        send("I", first, f"setup failed: {type(exc).__name__}: {exc}".encode()[:2000])
        _exit(0)
    try:
        exec(compile(spec["code"], "<solution>", "exec"), ns)
        _join_threads()
    except SystemExit as exc:
        if not stdio:
            send("H", first, b"SystemExit while loading the solution")
            _exit(0)
        try:
            sys.stdout.flush()
        except BaseException:  # noqa: BLE001
            pass
        if exc.code is None or exc.code == 0:
            _exit(0)
        info = {"type": "SystemExit", "message": f"exit code {exc.code!r}"[:200]}
        send("E", first, json.dumps(info).encode())
        _exit(0)
    except MemoryError:
        send("M", first)
        _exit(0)
    except BaseException as exc:  # noqa: BLE001
        send("E", first, _describe(exc))
        _exit(0)
    if stdio:
        try:
            sys.stdout.flush()
        except MemoryError:
            send("M", first)
        _exit(0)
    why = tampered()
    if why is not None:
        send("H", first, f"while loading: {why}".encode()[:500])
        _exit(0)
    send("R", first)
    entry = spec.get("entry_point")
    # what a test sees: the solution's names minus any that shadow a builtin (a check's `len`,
    # `tuple`, `sorted` are the real ones); assert tests also get the setup's own names back
    visible = {k: v for k, v in ns.items() if k not in _BUILTIN_NAMES or k == entry}
    last = chunk[-1][0]
    for index, test in chunk:
        current[0], started[0] = index, _cpu()
        try:
            if test["kind"] == "call":
                scope = dict(visible)
                scope["__rlvr_args__"] = test.get("args")
                values = [eval(compile(call, "<test>", "eval"), scope) for call in test["calls"]]
                why = tampered() if index == last else None  # a call's verdict is the host's
                if why is not None:
                    send("H", index, why.encode()[:500])
                    _exit(0)
                try:
                    body = json.dumps(encode(values), separators=(",", ":")).encode()
                except NotBuiltin as nb:
                    send("N", index, json.dumps({"type": nb.type_name, "rigged": nb.rigged}).encode())
                    continue
                send("V", index, body)
                continue
            scope = dict(visible)
            scope.update({k: v for k, v in setup_names.items() if k != entry})
            scope["__builtins__"] = builtins
            if entry:
                scope[entry] = _guard(ns[entry], send, _exit, index, tampered) if entry in ns else None
            exec(compile(test["code"], "<test>", "exec"), scope)
            _join_threads()
            why = tampered()
            if why is not None:
                send("H", index, why.encode()[:500])
                _exit(0)
            frame = passes[index] + _pack(">d", _cpu() - started[0])
            data = _pack(">I", len(frame)) + frame
            while data:
                data = data[_write(RESULT_FD, data) :]
        except SystemExit:
            send("H", index, b"SystemExit before the test finished")
            _exit(0)
        except MemoryError:
            send("M", index)
        except BaseException as exc:  # noqa: BLE001
            why = tampered()
            if why is not None:
                send("H", index, why.encode()[:500])
                _exit(0)
            send("E", index, _describe(exc))
    _exit(0)


def _join_threads() -> None:
    """Wait for the solution's non-daemon threads, as interpreter shutdown would."""
    threading = sys.modules.get("threading")
    if threading is None:
        return
    for thread in threading.enumerate():
        if thread is not threading.main_thread() and not thread.daemon:
            thread.join()


def _guard(fn, send, exit_, index, tampered):
    """Wrap the entry point for in-process asserts: only exact-builtin values may come back, and
    nothing the check relies on may have changed when a call returns (or raises)."""

    def candidate(*args, **kwargs):
        try:
            value = fn(*args, **kwargs)
        finally:
            why = tampered(light=True)
            if why is not None:
                send("H", index, why.encode()[:500])
                exit_(0)
        try:
            check_builtin(value)
        except NotBuiltin as nb:
            if nb.rigged:
                send("H", index, f"returned rigged type {nb.type_name}".encode()[:300])
                exit_(0)
            raise TypeError(f"returned {nb.type_name}; only builtin types are accepted") from None
        return value

    return candidate


def _describe(exc: BaseException) -> bytes:
    """Exception type, message and the deepest solution/test line, as JSON bytes."""
    try:
        message = str(exc)
    except BaseException:  # noqa: BLE001
        message = "<unprintable>"
    line, where = None, None
    tb = exc.__traceback__
    while tb is not None:
        name = tb.tb_frame.f_code.co_filename
        if name in ("<solution>", "<test>", "<setup>"):
            line, where = tb.tb_lineno, name.strip("<>")
        tb = tb.tb_next
    info = {"type": type(exc).__name__, "message": message[:2000], "line": line, "where": where}
    return json.dumps(info).encode()


def _limit(which: int, value: int, slack: int = 0) -> None:
    """Set soft = value and hard = value + slack (both within the inherited hard limit)."""
    soft, hard = resource.getrlimit(which)
    top = value + slack if hard == resource.RLIM_INFINITY else min(value + slack, hard)
    try:
        resource.setrlimit(which, (min(value, top), top))
    except (ValueError, OSError):
        pass


def proc_cpu(pid: int) -> float | None:
    """CPU seconds (user + system, all threads) a live child has used so far, from /proc."""
    try:
        fd = os.open(f"/proc/{pid}/stat", os.O_RDONLY)  # read after every test: no file object
        try:
            data = os.read(fd, 4096)
        finally:
            os.close(fd)
        fields = data[data.rindex(b")") + 2 :].split()
        return (int(fields[11]) + int(fields[12])) / _TICKS
    except (OSError, ValueError, IndexError):
        return None


def proc_run_delay(pid: int) -> float:
    """Seconds a live child has spent runnable but waiting for a CPU (the second field of
    /proc/PID/schedstat); 0.0 where the kernel does not say. Read only when a wall deadline passes."""
    try:
        fd = os.open(f"/proc/{pid}/schedstat", os.O_RDONLY)
        try:
            data = os.read(fd, 256)
        finally:
            os.close(fd)
        return int(data.split()[1]) / 1e9
    except (OSError, ValueError, IndexError):
        return 0.0


# ----------------------------------------------------------------------------- the harness


def _input_fd(text: str) -> int:
    data = text.encode()
    try:
        fd = os.memfd_create("stdin", 0)
    except (AttributeError, OSError):
        import tempfile

        fd = os.dup(tempfile.TemporaryFile(dir=".").fileno())
    _write_all(fd, data)
    os.lseek(fd, 0, os.SEEK_SET)
    return fd


_STDIO: dict = {}  # file types of a child's stdin/stdout/stderr -> the streams such children get


def _child_stdio(files: tuple[int, int, int]) -> tuple:
    """The child's stdio streams, built once for each kind of files and kept. A stream keeps only
    the numbers 0-2 (the child puts its own descriptors there) and what its set-up probes saw,
    which depends on the type of file alone (memfd or /dev/null in, pipe or /dev/null out). The
    harness never uses them, and each child reads and writes its own copy-on-write copy. Building
    and freeing them per session cost the harness ~60 page faults (each page it writes after a fork
    faults)."""
    key = tuple(os.fstat(fd).st_mode & 0o170000 for fd in files)  # S_IFMT
    streams = _STDIO.get(key)
    if streams is None:
        streams = _STDIO[key] = _prepared_stdio(files)
    return streams


def _prepared_stdio(files: tuple[int, int, int]) -> tuple:
    """The child's sys.stdin/stdout/stderr, built here before the fork (allocating them in the child
    costs ~100 copy-on-write page faults). Their set-up probes (fstat, lseek) must see the child's own
    `files`, so fds 0-2 point at those meanwhile; ours are put back before returning."""
    saved = [os.dup(fd) for fd in (0, 1, 2)]
    try:
        for target, fd in enumerate(files):
            os.dup2(fd, target)
        return (
            io.TextIOWrapper(
                io.BufferedReader(io.FileIO(0, "r", closefd=False)), encoding="utf-8", errors="replace"
            ),
            io.TextIOWrapper(
                io.BufferedWriter(io.FileIO(1, "w", closefd=False), 1 << 16),
                encoding="utf-8",
                errors="replace",
                write_through=False,
            ),
            io.TextIOWrapper(io.FileIO(2, "w", closefd=False), encoding="utf-8", errors="replace"),
        )
    finally:
        for target, fd in enumerate(saved):
            os.dup2(fd, target)
            os.close(fd)


def supervise(spec: dict, chunk: list, rlimits: tuple = ()) -> list[dict]:
    """Fork a child for `chunk` ([(index, test)]), judge what it reports; >= 1 record, in order."""
    _reap()
    nonce = os.urandom(NONCE_BYTES)
    stdio = chunk[0][1]["kind"] == "stdio"
    reach = ((), ()) if stdio else _pristine(spec, chunk)  # built here, updated in the child
    res_r, res_w = os.pipe()
    if stdio:
        out_r, out_w = os.pipe()
        out_cap = int(chunk[0][1].get("max_output") or (1 << 20))
        in_fd = _input_fd(chunk[0][1].get("input", ""))
    else:
        out_r, out_w, out_cap = None, os.open(os.devnull, os.O_WRONLY), 0
        in_fd = os.open(os.devnull, os.O_RDONLY)
    err_w = os.open(os.devnull, os.O_WRONLY)
    files = (in_fd, out_w, err_w)
    streams = _child_stdio(files)
    guard = _fd_guard(stdio)
    started = time.monotonic()
    pid = os.fork()
    if pid == 0:
        try:
            _child(spec, chunk, nonce, res_w, files, streams, rlimits, reach, guard)
        finally:
            os._exit(70)
    streams = None
    for fd in (res_w, *files):
        os.close(fd)
    try:
        os.setpgid(pid, pid)
    except OSError:
        pass
    limit = float(spec["time_limit_s"])
    wall = limit * float(spec.get("wall_factor", 3.0)) + 0.5
    res_cap = int(spec.get("max_value_bytes") or MAX_CHILD_MESSAGE) + 4096
    out, buf, pending, records = bytearray(), bytearray(), [], []
    status = usage = verdict = None
    ready, pos, mark, cpu_mark, polled = stdio, 0, started, 0.0, started
    deadline = started + wall
    extended = 0.0  # run-queue wait already added to a deadline (`proc_run_delay`)
    ends_at = spec.get("_ends_at", float("inf"))  # the job's wall budget, less a reserve (`run_spec`)
    sel = selectors.DefaultSelector()
    streams = {res_r: buf} if out_r is None else {res_r: buf, out_r: out}
    for fd in streams:
        sel.register(fd, selectors.EVENT_READ)
    try:
        pidfd = os.pidfd_open(pid)
        sel.register(pidfd, selectors.EVENT_READ)
    except (AttributeError, OSError):
        pidfd = None
    while pos < len(chunk) and verdict is None:
        if status is None:
            reaped, status_now, usage_now = os.wait4(pid, os.WNOHANG)
            if reaped:
                status, usage = status_now, usage_now
        if status is not None and not streams:
            break
        now = time.monotonic()
        if now >= deadline:
            # the wall deadline is a safety net for a child that sleeps or blocks; time it spent
            # runnable but waiting for a CPU (a busy machine) is the queue's, not the check's
            # up to the job's wall budget: beyond it the check is unverified ("starved"), not failed
            queued = proc_run_delay(pid) if status is None else 0.0
            if queued > extended and now < ends_at:
                step = min(queued - extended, ends_at - deadline)
                deadline, extended = deadline + step, extended + step
                continue
            verdict = "starved" if queued > extended else "timeout"
            break
        wait = min(deadline - now, CPU_POLL_S) if pidfd is not None else min(0.005, deadline - now)
        events = sel.select(min(wait, 0.5) if status is not None else wait)
        if not events and status is not None:
            break
        # CPU time is the limit (the wall deadline is only a safety net), read from /proc at most
        # every CPU_POLL_S: a read per wake-up (each message) costs more than the frames' own CPU
        if status is None and (not events or time.monotonic() - polled >= CPU_POLL_S):
            polled = time.monotonic()
            used = proc_cpu(pid)
            if used is not None and used - cpu_mark > limit:
                verdict = "timeout"
                break
        for key, _ in events:
            if key.fd == pidfd:
                sel.unregister(pidfd)
                os.close(pidfd)
                pidfd = None
                continue
            target = streams[key.fd]
            data = os.read(key.fd, 1 << 16)
            if not data:
                sel.unregister(key.fd)
                os.close(key.fd)  # a warm worker runs many tests: nothing may stay open
                del streams[key.fd]
                continue
            target += data
            if len(target) > (out_cap if key.fd == out_r else res_cap):
                verdict = "output"
        messages = take_messages(buf, nonce)
        if messages is None:
            verdict = "forged"
            break
        for tag, index, cpu, body in messages:
            now = time.monotonic()
            if stdio or (not ready and tag != "R"):
                pending.append((tag, body))  # judged when the child is gone
                continue
            if tag == "R" and not ready and index == chunk[0][0]:
                ready, mark, deadline = True, now, now + wall
                cpu_mark = proc_cpu(pid) or cpu_mark
                continue
            if pos >= len(chunk):
                break  # every test is judged: whatever follows the last one is ignored
            if index != chunk[pos][0]:
                verdict = "forged"
                break
            record = _message_record(chunk[pos], tag, body, now - mark, cpu, limit)
            records.append(record)
            pos, mark, deadline = pos + 1, now, now + wall
            cpu_mark += cpu  # the test's own CPU, from its frame: no /proc read per test
            if record["outcome"] in ("hack", "internal"):
                verdict = "stop"
                break
    try:
        os.killpg(pid, signal.SIGKILL)
    except OSError:
        pass
    for fd in list(streams) + ([pidfd] if pidfd is not None else []):
        os.close(fd)
    sel.close()
    if pos >= len(chunk) or verdict == "stop":
        if status is None:
            _UNREAPED.append(pid)  # every test is judged: reap later instead of waiting for the teardown
        return records
    if status is None:
        _, status, usage = os.wait4(pid, 0)
    index, test = chunk[pos]
    record = {"type": "result", "index": index, "time_s": round(time.monotonic() - mark, 4)}
    if verdict == "forged":
        return records + [{**record, "outcome": "hack", "hack": "malformed or forged result message"}]
    cpu = usage.ru_utime + usage.ru_stime - cpu_mark if usage is not None else None
    if verdict == "starved" and not (cpu is not None and cpu > limit):
        error = (
            f"machine too busy: the check waited {extended:.1f} s for a CPU and the job ran out of wall time"
        )
        return records + [{**record, "outcome": "internal", "error": error}]
    record = _exit_record(record, stdio, verdict, status, cpu, limit, bytes(out), pending)
    if ready or record["outcome"] == "hack":
        return records + [record]
    # the solution failed before any test could run: the same outcome holds for every test here
    return records + [{**record, "index": i} for i, _ in chunk]


def _message_record(
    item: tuple, tag: str, body: bytes, elapsed: float, cpu: float = 0.0, limit: float = 0.0
) -> dict:
    """A session child's message about one test → result record (CPU over `limit` is a timeout)."""
    index, test = item
    record = {"type": "result", "index": index, "time_s": round(elapsed, 4), "cpu_s": round(cpu, 4)}
    if tag == "H":
        return {**record, "outcome": "hack", "hack": body.decode(errors="replace")}
    if limit and cpu > limit:
        return {**record, "outcome": "timeout"}
    if tag == "I":
        return {**record, "outcome": "internal", "error": body.decode(errors="replace")[:2000]}
    if tag == "M":
        return {**record, "outcome": "memory"}
    if tag == "E":
        return {**record, "outcome": "error", "error": _json_or_text(body)}
    if tag == "N":
        return {**record, "outcome": "invalid", "returned": _json_or_text(body)}
    if tag == "V" and test["kind"] == "call":
        return {**record, "outcome": "ok", "values": body.decode()}
    if tag == "P" and test["kind"] == "assert":
        return {**record, "outcome": "ok"}
    return {**record, "outcome": "hack", "hack": f"unexpected message {tag!r}"}


def _reap() -> None:
    for pid in list(_UNREAPED):
        try:
            done, _ = os.waitpid(pid, os.WNOHANG)
        except ChildProcessError:
            done = pid
        if done:
            _UNREAPED.remove(pid)


def _exit_record(
    record: dict,
    stdio: bool,
    verdict: str | None,
    status: int,
    cpu: float | None,
    limit: float,
    out: bytes,
    pending: list[tuple[str, bytes]],
) -> dict:
    """The outcome of the test a child was on when it ended (stdio: its only test)."""
    tags = [tag for tag, _ in pending]
    if "H" in tags:
        return {**record, "outcome": "hack", "hack": pending[tags.index("H")][1].decode(errors="replace")}
    if len(pending) > 1:
        return {**record, "outcome": "hack", "hack": "more than one result message"}
    if verdict == "output":
        return {**record, "outcome": "output", "stdout_bytes": len(out)}
    sig = os.WTERMSIG(status) if os.WIFSIGNALED(status) else None
    if verdict == "timeout" or sig == signal.SIGXCPU or (cpu is not None and cpu > limit):
        return {**record, "outcome": "timeout"}
    if pending:
        tag, body = pending[0]
        if tag in "IME":
            return _message_record((record["index"], {"kind": "stdio"}), tag, body, record["time_s"])
        return {**record, "outcome": "hack", "hack": f"unexpected message {tag!r}"}
    if sig is not None:
        if sig == signal.SIGKILL:
            return {**record, "outcome": "memory", "signal": sig}
        if sig == signal.SIGSYS:  # `fd_filter` (or the sandbox's filter: a foreign system call ABI)
            return {**record, "outcome": "hack", "hack": "forbidden system call: replacing descriptor 0-2 "
                    "or the result pipe (or a foreign system call ABI)"}  # fmt: skip
        return {
            **record,
            "outcome": "error",
            "signal": sig,
            "error": {"type": "Signal", "message": f"killed by {signal.Signals(sig).name}"},
        }
    code = os.WEXITSTATUS(status)
    if stdio:
        if code == 0:
            return {**record, "outcome": "ok", "stdout": out.decode("utf-8", errors="replace")}
        return {**record, "outcome": "error", "error": {"type": "Exit", "message": f"exit code {code}"}}
    return {**record, "outcome": "hack", "hack": f"exited (code {code}) before the test finished"}


def _json_or_text(body: bytes) -> object:
    try:
        return json.loads(body)
    except ValueError:
        return body.decode(errors="replace")[:2000]


def _non_dumpable() -> None:
    """PR_SET_DUMPABLE 0: the children (same uid, no capabilities) can then neither ptrace this
    process nor open its /proc/<pid>/mem or fd/* (a warm pool's worker does the same)."""
    import ctypes

    if ctypes.CDLL(None, use_errno=True).prctl(4, 0, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_DUMPABLE, 0) failed")


def main() -> int:
    _non_dumpable()
    for fd in (0, 1, 2):  # keep 0-2 taken so that no pipe of ours lands there
        try:
            os.fstat(fd)
        except OSError:
            os.open(os.devnull, os.O_RDWR)
    try:
        os.fstat(CHANNEL_FD)
    except OSError:
        sys.stderr.write("runner: no result channel on fd 3\n")
        return 2
    with open("spec.json", encoding="utf-8") as handle:
        spec = json.load(handle)
    os.unlink("spec.json")
    if sum(t["kind"] == "stdio" for t in spec["tests"]) > 1:  # many children: import common modules once
        for name in _PRELOAD:
            try:
                __import__(name)
            except ImportError:
                pass
    run_spec(spec)
    _reap()  # whatever is still dying is reaped by the sandbox's init
    return 0


def run_spec(spec: dict, channel_fd: int = CHANNEL_FD, rlimits: tuple = ()) -> None:
    """Run every test of `spec`, writing the records (`hello`, one `result` per test run, `done`) to
    `channel_fd`, one write per child (a session's records travel together; only a complete record
    stream ending in `done` counts, so nothing is lost by not streaming them one by one). A warm
    pool's worker calls this directly (see `sandbox.harness`); it reaps and kills whatever is left
    afterwards and then calls `reset()`."""
    tests = list(enumerate(spec["tests"]))
    out = bytearray()
    # a check's wall deadline moves by the time it waited for a CPU, but stops short of the job's
    # wall budget (the host kills the job then): a reserve is left to report what ran
    budget = float(spec.get("wall_budget_s") or "inf")
    spec["_ends_at"] = time.monotonic() + budget - min(BUDGET_RESERVE_S, budget / 4)
    _JOB_DIR[0] = os.getcwd()

    def emit(record: dict) -> None:
        data = json.dumps(record, separators=(",", ":")).encode()
        out.extend(struct.pack(">I", len(data)) + data)

    emit({"type": "hello", "version": 1, "tests": len(tests)})
    count, pos = 0, 0
    while pos < len(tests):
        if tests[pos][1]["kind"] == "stdio":
            chunk = tests[pos : pos + 1]
        else:  # a session: consecutive call/assert tests share one child
            end = pos
            while end < len(tests) and tests[end][1]["kind"] != "stdio":
                end += 1
            chunk = tests[pos:end]
        stop = False
        for record in supervise(spec, chunk, rlimits):
            emit(record)
            count += 1
            outcome = record["outcome"]
            # stdio/call verdicts are the host's: only what failed here can stop the run early
            if outcome in ("hack", "internal") or (spec.get("stop_on_error") and outcome != "ok"):
                stop = True
                break
        _write_all(channel_fd, bytes(out))
        out.clear()
        if stop:
            break
        pos = count
    emit({"type": "done", "count": count})
    _write_all(channel_fd, bytes(out))


def reset() -> None:
    """Forget the killed-but-unreaped children (their pids are gone once the caller has reaped all)."""
    _UNREAPED.clear()


if __name__ == "__main__":
    sys.exit(main())
