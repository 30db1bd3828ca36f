"""The host's end of one sandboxed Python interpreter (`sandbox/_repl.py`) for `sandbox.python_session`:
length-prefixed JSON frames on the reply pipe, capped reads of the output pipe, and finding the
interpreter's pid inside a bwrap worker so it can be killed alone."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import struct
import time

from sandbox.core import SandboxError

START_TIMEOUT_S = 20.0  # an interpreter's hello; a worker's reply after its interpreter ended
MAX_FRAME = 64 << 20  # a reply frame longer than this is garbage (the code wrote to the channel)
DRAIN_BYTES = 1 << 20  # output read after a call's reply (what the pipe still holds), at most


def _frames(buf: bytearray) -> list[dict]:
    """Remove the complete frames (4-byte length + JSON object) from `buf`; ValueError if garbled."""
    out = []
    while len(buf) >= 4:
        (size,) = struct.unpack(">I", buf[:4])
        if size > MAX_FRAME:
            raise ValueError(f"frame of {size} bytes")
        if len(buf) < 4 + size:
            break
        obj = json.loads(bytes(buf[4 : 4 + size]))
        del buf[: 4 + size]
        if not isinstance(obj, dict):
            raise ValueError("frame is not an object")
        out.append(obj)
    return out


class Interpreter:
    """The host's end of one interpreter process (`sandbox/_repl.py`): its request pipe, the output
    pipe (stdout and stderr) and the reply pipe. `pidfd` (None if unknown) lets it be killed alone."""

    def __init__(self, req_w: int, out_r: int, chan_r: int, pidfd: int | None = None):
        self.req_w, self.out_r, self.chan_r, self.pidfd = req_w, out_r, chan_r, pidfd
        for fd in (req_w, out_r, chan_r):
            os.set_blocking(fd, False)
        self._chan = bytearray()
        self._id = 0
        self.closed = False

    async def hello(self, timeout_s: float = START_TIMEOUT_S) -> dict:
        """The interpreter's first frame; SandboxError (with what it printed) if none comes."""
        kind, frame, out, _, _ = await self._exchange(None, timeout_s, cap=4096)
        if kind != "reply" or not frame.get("ready"):
            text = out.decode(errors="replace").strip()[-1000:]
            raise SandboxError(f"the Python session's interpreter did not start ({kind}): {text!r}")
        return frame

    async def call(
        self, code: str, wall_s: float, cpu_s: float, cap: int, grace_s: float
    ) -> tuple[str, dict, bytes, int, float]:
        """Run `code`; (how it ended: reply | hung | dead | garbled, the reply, the first `cap` + 1
        bytes of output, how many bytes it wrote, seconds)."""
        self._id += 1
        req = {"id": self._id, "code": code, "wall_s": wall_s, "cpu_s": cpu_s, "out": cap}
        return await self._exchange(req, wall_s + grace_s, cap)

    async def _exchange(self, req: dict | None, limit_s: float, cap: int):
        loop = asyncio.get_running_loop()
        settled: asyncio.Future = loop.create_future()
        out = bytearray()
        total = [0]
        want = None if req is None else req["id"]

        def settle(kind: str, frame: dict | None = None) -> None:
            if not settled.done():
                settled.set_result((kind, frame or {}))

        def on_out() -> None:
            total[0] += max(0, _read_capped(self.out_r, out, cap + 1, lambda: loop.remove_reader(self.out_r)))

        def on_chan() -> None:
            try:
                data = os.read(self.chan_r, 1 << 16)
            except BlockingIOError:
                return
            except OSError:
                data = b""
            if not data:
                return settle("dead")
            self._chan += data
            try:
                frames = _frames(self._chan)
            except ValueError:
                return settle("garbled")
            for frame in frames:  # others: the code wrote a well-formed frame itself; ignored
                if frame.get("id") == want:
                    return settle("reply", frame)

        loop.add_reader(self.out_r, on_out)
        loop.add_reader(self.chan_r, on_chan)
        timer = loop.call_later(limit_s, settle, "hung")
        t0 = time.monotonic()
        try:
            if req is not None:
                data = json.dumps(req).encode()
                if not await self._write(struct.pack(">I", len(data)) + data):
                    settle("dead")
            kind, frame = await settled
        finally:
            timer.cancel()
            loop.remove_reader(self.out_r)
            loop.remove_reader(self.chan_r)
        seconds = time.monotonic() - t0
        while total[0] < cap + DRAIN_BYTES:  # what it wrote before the reply is in the pipe now
            n = _read_capped(self.out_r, out, cap + 1, lambda: None)
            if n <= 0:
                break
            total[0] += n
        return kind, frame, bytes(out), total[0], seconds

    async def _write(self, data: bytes) -> bool:
        """Write all of `data` to the request pipe; False if the interpreter is gone."""
        loop = asyncio.get_running_loop()
        view = memoryview(data)
        while view:
            try:
                view = view[os.write(self.req_w, view) :]
                continue
            except BlockingIOError:
                pass
            except OSError:
                return False
            ready: asyncio.Future = loop.create_future()
            loop.add_writer(self.req_w, _settle_none, ready)
            try:
                await ready
            finally:
                loop.remove_writer(self.req_w)
        return True

    def kill(self) -> bool:
        """SIGKILL the interpreter alone (its worker lives on); False if it cannot be reached."""
        if self.pidfd is None:
            return False
        try:
            signal.pidfd_send_signal(self.pidfd, signal.SIGKILL)
        except ProcessLookupError:
            pass
        except OSError:
            return False
        return True

    def close(self) -> None:
        if not self.closed:
            self.closed = True
            for fd in (self.req_w, self.out_r, self.chan_r, self.pidfd):
                if fd is not None:
                    os.close(fd)


def _settle_none(fut: asyncio.Future) -> None:
    if not fut.done():
        fut.set_result(None)


def _read_capped(fd: int, out: bytearray, keep: int, on_eof) -> int:
    """Read what `fd` holds now (up to 1 MiB), keeping the first `keep` bytes in `out`; bytes read,
    0 when nothing is there, -1 at EOF (after calling `on_eof`)."""
    n = 0
    while n < 1 << 20:
        try:
            chunk = os.read(fd, 1 << 16)
        except BlockingIOError:
            return n
        except OSError:
            chunk = b""
        if not chunk:
            on_eof()
            return n or -1
        n += len(chunk)
        if len(out) < keep:
            out += chunk[: keep - len(out)]
    return n


def _children(pid: int) -> list[int]:
    found: list[int] = []
    try:
        for tid in os.listdir(f"/proc/{pid}/task"):
            with open(f"/proc/{pid}/task/{tid}/children") as f:
                found += [int(x) for x in f.read().split()]
    except (OSError, ValueError):
        return []
    return found


def _interpreter_pidfd(worker) -> int | None:
    """A pidfd of the worker's only child (the interpreter, just started), or None where it cannot
    be found (Docker: the container's processes are not ours; the session then kills the worker)."""
    proc = getattr(worker, "proc", None)
    if proc is None:
        return None
    inner = _children(proc.pid)  # bwrap -> the worker (PID 1 inside) -> the interpreter
    kids = _children(inner[0]) if len(inner) == 1 else []
    if len(kids) != 1:
        return None
    try:
        return os.pidfd_open(kids[0])
    except OSError:
        return None
