"""What crosses a pipe: return values as exact-builtin-type JSON (`encode`, checked in-process by
`check_builtin`) and the child's frames to the harness (`take_messages`). Stdlib only."""

from __future__ import annotations

import os
import struct

CHANNEL_FD = 3
RESULT_FD = 9  # the child's end of its private pipe to the harness
NONCE_BYTES = 16
MAX_CHILD_MESSAGE = 8 << 20
MAX_DEPTH = 200
# the one-shot job's layout (`sandbox.harness.harness_job` ships it): the spec, the 4-line script that
# imports this package and calls `main()`, and the package itself
SPEC_FILE, STUB_FILE, PACKAGE = "spec.json", "run.py", "rlvr_runner"
JOB_FILES = frozenset({SPEC_FILE, STUB_FILE, PACKAGE})
BIG_INT = 1 << 12000  # ints at least this large travel as hex (JSON readers cap decimal digits)


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
