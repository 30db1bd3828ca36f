"""The interpreter loop of a Python tool session (`sandbox.python_session`). Runs INSIDE a sandbox.

Stdlib only, Python >= 3.9. A warm pool's worker runs this source as a `python3 -c` job (the
session's interpreter is the job's process); a bare baseline runs it as `python3 -I -c SRC [IN OUT]`.
Descriptors on entry: IN (default 0) the host's requests, 1 and 2 one pipe the host reads as the
call's output, OUT (default 3) the replies. IN and OUT move to high numbers and 0 becomes /dev/null,
so `input()` in user code reads EOF and never the next request.

Frames both ways: a 4-byte big-endian length, then JSON.
  interpreter -> host  {"ready": true, "python": "3.11.2"}                      once, at start
  host -> interpreter  {"id": n, "code": str, "wall_s": float, "cpu_s": float, "out": bytes}
  interpreter -> host  {"id": n, "error": str | null, "timeout": null | "cpu" | "wall", "cpu_s": float}

A call runs like a notebook cell: the code is parsed as a module; if its last statement is an
expression (and the cell does not end in `;`) its value's repr is printed after the code ran, unless
it is None. Globals persist in one `__main__` module between calls. Everything the call writes to
sys.stdout, sys.stderr or descriptors 1/2 goes to the output pipe, in order; what `print` and the
repr write is cut after `out` + 1 bytes (the host cuts at `out` and says so), so a print flood costs
no pipe traffic. An exception (SystemExit included) is `error`, formatted as the REPL prints it
(frames of this loop left out). Timers: ITIMER_REAL (wall) and ITIMER_PROF (CPU of the whole
process) raise `CallTimeout` in the main thread; the state is kept. Code that blocks the signal or
catches the exception is stopped by the host instead (it kills this process). After every call
each other process of the sandbox (what the call started) is killed; threads live on.

Nothing here is trusted by the host: user code runs in this process and could change any of it.
"""

import ast
import builtins
import fcntl
import io
import json
import linecache
import os
import signal
import struct
import sys
import time
import traceback
import types

_write, _read, _kill, _waitpid = os.write, os.read, os.kill, os.waitpid


class CallTimeout(BaseException):
    """Raised in the main thread when a call exceeds its wall or CPU time limit."""


CallTimeout.__module__ = "builtins"  # tracebacks show `CallTimeout: ...`


class _Sink(io.RawIOBase):
    """The raw stream under sys.stdout and sys.stderr: writes to descriptor 1 until the call's
    budget is spent, then drops (and counts) the rest."""

    def __init__(self):
        super().__init__()
        self.left = 0
        self.dropped = 0

    def writable(self):
        return True

    def write(self, data):
        n = len(data)
        room = self.left
        if room > 0:
            view = memoryview(data)[:room]
            self.left = room - len(view)
            while view:
                try:
                    view = view[_write(1, view) :]
                except InterruptedError:
                    continue
        if n > room:
            self.dropped += n - max(room, 0)
        return n


def _streams(sink):
    """(buffer, stdout, stderr): both text streams write through to one buffer, so their output
    keeps its order; the buffer is flushed at the end of every call."""
    buffer = io.BufferedWriter(sink, 1 << 16)
    out = io.TextIOWrapper(buffer, encoding="utf-8", errors="backslashreplace", write_through=True)
    err = io.TextIOWrapper(buffer, encoding="utf-8", errors="backslashreplace", write_through=True)
    return buffer, out, err


def _send(fd, obj):
    data = json.dumps(obj).encode()
    data = struct.pack(">I", len(data)) + data
    while data:
        data = data[_write(fd, data) :]


def _recv(fd):
    """The next request, or None at EOF."""
    head = b""
    while len(head) < 4:
        chunk = _read(fd, 4 - len(head))
        if not chunk:
            return None
        head += chunk
    (size,) = struct.unpack(">I", head)
    body = bytearray()
    while len(body) < size:
        chunk = _read(fd, min(size - len(body), 1 << 20))
        if not chunk:
            return None
        body += chunk
    return json.loads(bytes(body))


def _cell(code, name, ns, out):
    """Run `code` like a notebook cell in `ns`; print the last expression's repr to `out`."""
    lines = code.splitlines(True)
    linecache.cache[name] = (len(code), None, lines, name)  # tracebacks show the cell's lines
    tree = ast.parse(code, name, "exec")
    last = None
    if tree.body and isinstance(tree.body[-1], ast.Expr) and not code.rstrip().endswith(";"):
        last = ast.Expression(tree.body.pop().value)
    exec(compile(tree, name, "exec"), ns)
    if last is not None:
        value = eval(compile(last, name, "eval"), ns)
        if value is not None:
            out.write(repr(value) + "\n")


def _format(exc, hidden=None):
    """The traceback as Python's REPL prints it: from the first frame of a cell on, without the
    timer's handler (`hidden`, a code object) where the timeout was raised."""
    tb = exc.__traceback__
    while tb is not None and not tb.tb_frame.f_code.co_filename.startswith("<cell "):
        tb = tb.tb_next
    node = tb
    while node is not None and node.tb_next is not None:
        if node.tb_next.tb_frame.f_code is hidden:
            node.tb_next = None
        node = node.tb_next
    return "".join(traceback.format_exception(type(exc), exc, tb))


def _sweep():
    """Kill every other process of the sandbox (what the call started), reap our children, and
    return once none is left (a killed process dies when next scheduled; one that was being forked
    during a kill escapes it: kill again). Gives up after about a second."""
    me = str(os.getpid())
    for _ in range(1000):
        try:
            _kill(-1, signal.SIGKILL)  # never PID 1 (the worker, which reaps orphans) nor us
        except OSError:  # ESRCH: no other process at all
            return
        while True:
            try:
                pid, _ = _waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                break
            if pid == 0:
                break
        if not [p for p in os.listdir("/proc") if p.isdigit() and p != "1" and p != me]:
            return
        time.sleep(0.001)


def _in_pool_sandbox():
    """True only in a pool sandbox: our parent is PID 1 of our pid namespace and is the worker.
    Sweeping (`kill(-1)`) anywhere else could kill the host's processes of our uid."""
    try:
        with open("/proc/1/cmdline", "rb") as f:
            init = f.read()
    except OSError:
        return False
    return os.getppid() == 1 and os.getuid() != 0 and b"/run/rlvr/worker.py" in init


def serve(in_fd=0, out_fd=3, sweep=False):
    """Answer requests until the host closes IN. `sweep`: kill what a call started (pool sandbox only)."""
    sweep = sweep and _in_pool_sandbox()
    requests = fcntl.fcntl(in_fd, fcntl.F_DUPFD_CLOEXEC, 10)
    replies = fcntl.fcntl(out_fd, fcntl.F_DUPFD_CLOEXEC, 10)
    os.close(out_fd)
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    if null != 0:
        os.close(null)
    if in_fd != 0:
        os.close(in_fd)
    sink = _Sink()
    buffer, out, err = _streams(sink)
    main = types.ModuleType("__main__")
    main.__dict__["__builtins__"] = builtins
    sys.modules["__main__"] = main
    sys.argv = [""]
    ns = main.__dict__
    state = {"timeout": None}

    def on_timer(signum, frame):
        state["timeout"] = "cpu" if signum == signal.SIGPROF else "wall"
        which = "CPU" if signum == signal.SIGPROF else "wall"
        raise CallTimeout(f"the call exceeded its {which} time limit ({state['limit_' + which]:g} s)")

    _send(replies, {"ready": True, "python": ".".join(map(str, sys.version_info[:3]))})
    count = 0
    while True:
        req = _recv(requests)
        if req is None:
            os._exit(0)
        count += 1
        sink.left, sink.dropped = int(req["out"]) + 1, 0
        sys.stdout, sys.stderr = sys.__stdout__, sys.__stderr__ = out, err
        state["timeout"] = None
        state["limit_wall"], state["limit_CPU"] = float(req["wall_s"]), float(req["cpu_s"])
        error = None
        cpu0 = time.process_time()
        try:
            try:
                signal.signal(signal.SIGALRM, on_timer)
                signal.signal(signal.SIGPROF, on_timer)
                signal.setitimer(signal.ITIMER_PROF, state["limit_CPU"])
                signal.setitimer(signal.ITIMER_REAL, state["limit_wall"])
                _cell(req["code"], f"<cell {count}>", ns, out)
            finally:
                signal.setitimer(signal.ITIMER_REAL, 0)
                signal.setitimer(signal.ITIMER_PROF, 0)
        except BaseException as exc:  # the user's error (a timeout or SystemExit too): a result
            try:
                error = _format(exc, on_timer.__code__)
            except BaseException as e:  # an exception whose formatting fails
                error = f"{type(exc).__name__}: <unprintable: {type(e).__name__}>\n"
            error = error.encode("utf-8", "backslashreplace")[: int(req["out"]) + 1].decode("utf-8", "ignore")
        try:
            buffer.flush()
        except BaseException:
            pass
        if sweep:
            _sweep()
        cpu = time.process_time() - cpu0
        _send(replies, {"id": req["id"], "error": error, "timeout": state["timeout"], "cpu_s": cpu})


if __name__ == "__main__":
    serve(*(int(a) for a in sys.argv[1:3]), sweep="sweep" in sys.argv[3:])
