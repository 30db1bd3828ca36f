"""One forked test child (`_child`): runs the solution and its tests, reports each over its private
pipe, and leaves with `os._exit`. See the package docstring for what it may not do. Stdlib only."""

from __future__ import annotations

import _signal
import builtins
import json
import os
import resource
import struct
import sys
import time
from types import ModuleType as _ModuleType

from .guards import (
    _ALWAYS_HACK,
    _FRAME_ATTRS,
    _FRAME_OK,
    _LINKING,
    _SET_HACK,
    _SIGNAL,
    _SPAWN,
    HARNESS_CODE_FILES,
    _fd_ids,
    _harness_file,
    _install_fd_guard,
    _path_reason,
)
from .snapshot import _PRISTINE
from .wire import RESULT_FD, NotBuiltin, check_builtin, encode

_BUILTIN_NAMES = frozenset(name for name in vars(builtins) if not name.startswith("__"))


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
    _harness, _runner = _harness_file, HARNESS_CODE_FILES
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
            if _type(name) is _str and (name in _runner or name in _FRAME_OK or name.startswith("<frozen")):
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
            if caller not in _runner and caller not in _FRAME_OK:
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
    if stdio:  # from here on the solution runs, and may reach this frame: no "I" or "R" is ours
        send("R", first)
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
