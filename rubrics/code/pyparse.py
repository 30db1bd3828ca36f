"""`ast.parse` that is safe from many threads at once: every host-side parse of the reward layer goes
through `parse`.

CPython 3.11's converter from its internal AST to `ast` objects keeps its recursion counter per
interpreter, not per thread (gh-106905, fixed only in 3.12+). When the garbage collector runs a
finalizer in the middle of a parse, another thread's parse can run meanwhile, and one of them fails
with `SystemError: AST constructor recursion depth mismatch`. Reward functions run on trainers'
threads (TRL, veRL, the reward server), so that would be a spurious "could not verify".
`parse` holds one process-wide lock, and parses once more if the error still comes (a parse outside
the reward layer, in some other library's thread, can interleave too); the check that raises
it runs after a complete parse, so a second parse is the whole remedy.
"""

from __future__ import annotations

import ast
import threading

_LOCK = threading.Lock()
_MISMATCH = "AST constructor recursion depth mismatch"


def parse(source: str, mode: str = "exec") -> ast.AST:
    """`ast.parse(source, mode=mode)`, serialised across threads (see module docstring)."""
    with _LOCK:
        try:
            return ast.parse(source, mode=mode)
        except SystemError as exc:
            if _MISMATCH not in str(exc):
                raise
            return ast.parse(source, mode=mode)
