"""`rubrics.code.pyparse.parse` from many threads at once: CPython 3.11's `ast.parse` fails now and then
with `SystemError: AST constructor recursion depth mismatch` when the garbage collector runs a
finalizer mid-parse and lets another thread parse (gh-106905); a CI run scored a correct HumanEval
completion as unverifiable that way."""

from __future__ import annotations

import ast
import gc
import threading
import time

import pytest

from rubrics.code import pyparse

SOURCE = "\n".join(f"def f{i}(x):\n    return [y * {i} for y in range(x) if y % 3]" for i in range(60))


class _Cycle:
    """Cyclic garbage whose finalizer gives up the GIL: the collector runs it in the middle of a parse."""

    def __init__(self) -> None:
        self.me = self

    def __del__(self) -> None:
        time.sleep(0)


def _parse_in_threads(parse, threads: int = 4, rounds: int = 60) -> list[str]:
    errors: list[str] = []

    def work() -> None:
        for _ in range(rounds):
            for _ in range(30):
                _Cycle()
            try:
                parse(SOURCE)
            except SystemError as exc:
                errors.append(str(exc))

    old = gc.get_threshold()
    gc.set_threshold(50, 5, 5)  # collect often, so that collections land inside parses
    try:
        workers = [threading.Thread(target=work) for _ in range(threads)]
        for w in workers:
            w.start()
        for w in workers:
            w.join()
    finally:
        gc.set_threshold(*old)
    return errors


def test_parses_from_many_threads_never_fail_where_ast_parse_does():
    assert _parse_in_threads(pyparse.parse) == []  # raw ast.parse: one failure per run on 3.11 here


def test_the_mismatch_is_parsed_again_and_other_system_errors_are_raised(monkeypatch):
    calls: list[str] = []

    def flaky(source: str, mode: str = "exec") -> ast.AST:
        calls.append(source)
        if len(calls) == 1:
            raise SystemError("AST constructor recursion depth mismatch (before=18, after=13)")
        return ast.Module(body=[], type_ignores=[])

    monkeypatch.setattr(pyparse.ast, "parse", flaky)
    assert isinstance(pyparse.parse("x = 1"), ast.Module) and calls == ["x = 1", "x = 1"]

    def broken(source: str, mode: str = "exec") -> ast.AST:
        raise SystemError("something else")

    monkeypatch.setattr(pyparse.ast, "parse", broken)
    with pytest.raises(SystemError, match="something else"):
        pyparse.parse("x = 1")
