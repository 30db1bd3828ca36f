"""Pure host-side pieces: code extraction, stdout comparison, exact-type decoding, check parsing."""

from __future__ import annotations

import ast

import pytest

from rubrics.code.rubric import clip, extract_code, static_hack_scan
from rubrics.code.suites import (
    AssertTest,
    CallTest,
    DecodeError,
    StdioTest,
    TestSuite,
    asserts_to_tests,
    compare_stdout,
    decode,
    loose_eq,
    parse_assert,
    run_check,
    suite_from,
    validate_check,
)


def test_extract_last_python_block_and_language_filter():
    text = "```python\nx = 1\n```\nthen\n```js\nlet y\n```\n```py\nx = 2\n```\ntrailing"
    assert extract_code(text) == "x = 2\n"
    assert extract_code("```js\nlet y\n```") is None
    assert extract_code("```\nprint(1)\n```") == "print(1)\n"  # untagged accepted by default
    assert extract_code("```\nprint(1)\n```", languages=("python",)) is None
    assert extract_code("~~~python\nprint(3)\n~~~") == "print(3)\n"
    assert extract_code("no code here") is None
    assert extract_code("```python\n\n```") is None  # empty block is no answer


def test_extract_respects_think_blocks():
    inside = "<think>```python\nprint('draft')\n```"
    assert extract_code(inside) is None  # unclosed think: nothing gradable
    closed = "<think>```python\nprint('draft')\n```</think>```python\nprint('final')\n```"
    assert extract_code(closed) == "print('final')\n"
    assert extract_code("<think>```python\nx=1\n```</think>no code after") is None


def test_extract_ignores_unclosed_fence():
    assert extract_code("```python\nfinal = 1\n```\n```python\ncut off") == "final = 1\n"


def test_stdout_rules():
    assert compare_stdout("3\n", "3")[0]
    assert compare_stdout("3  \r\n\n\n", "3\n")[0]  # trailing whitespace and blank lines
    assert compare_stdout("1 2\n", "1    2\n")[0]  # token split
    assert not compare_stdout("1\n", "1\n2\n")[0]  # line counts must match (no zip truncation)
    assert not compare_stdout("1\n2\n3\n", "1\n2\n")[0]
    assert compare_stdout("2.3333333\n", "2.333333333\n")[0]  # float within 1e-6
    assert not compare_stdout("2.33\n", "2.333333333\n")[0]
    assert not compare_stdout("3.0\n", "3\n")[0]  # integer tokens compare exactly
    assert not compare_stdout("nan\n", "1.5\n")[0]
    assert not compare_stdout("YES\n", "yes\n")[0]
    ok, why = compare_stdout("1\n5\n", "1\n6\n")
    assert not ok and "line 2" in why


def test_decode_only_builtin_types():
    assert decode([1, {"tuple": [2, "a"]}, {"set": [1]}, {"dict": [[{"tuple": [1]}, None]]}]) == [
        1,
        (2, "a"),
        {1},
        {(1,): None},
    ]
    assert decode({"float": "inf"}) == float("inf")
    assert decode({"int": hex(10**5000)}) == 10**5000
    assert type(decode({"tuple": []})) is tuple
    for bad in ({"object": 1}, {"tuple": [1], "x": 2}, {"int": "zz"}):
        with pytest.raises(DecodeError):
            decode(bad)


def test_checks_are_restricted():
    validate_check("math.isclose(v0, 2.5, rel_tol=1e-3) and sorted(v1) == [1, 2]")
    for bad in ("v0.__class__", "__import__('os')", "open('x')", "[x for x in v0]", "lambda: 1", "os.system"):
        with pytest.raises((ValueError, SyntaxError)):
            validate_check(bad)
    assert run_check("v0 == expected", [[1, 2]], [1, 2])
    assert not run_check("v0 == expected", [(1, 2)], [1, 2])  # same semantics as the original assert
    assert not run_check("abs(v0 - 1) < 1e-6", ["text"], None)  # a raising check is a failed check


def test_parse_assert_forms():
    def conv(src: str, names=("f",)) -> CallTest | None:
        return parse_assert(ast.parse(src).body[0], set(names))

    t = conv("assert f(1, [2, 3]) == (4, 5)")
    assert t is not None and t.calls == ("f(1, [2, 3])",) and t.check == "v0 == (4, 5)"
    assert conv("assert not f('a')").check == "not v0"
    assert conv("assert math.isclose(f(2), 3.14, rel_tol=0.001)").check.startswith("math.isclose(v0")
    assert conv("assert f(1) == f(2)").calls == ("f(1)", "f(2)")
    assert conv("assert f(x) == 1") is None  # non-literal argument: runs in-process instead
    assert conv("assert f(1) == g(2)") is None  # unknown function on the host side
    assert conv("assert f(f(1)) == 2") is None
    assert conv("assert candidate(3) == 9", ["candidate"]).calls == ("candidate(3)",)
    renamed = parse_assert(ast.parse("assert candidate(3) == 9").body[0], {"candidate"}, rename="square")
    assert renamed.calls == ("square(3)",) and renamed.source == "assert candidate(3) == 9"


def test_asserts_to_tests_mixes_formats():
    tests = asserts_to_tests("assert add(1, 2) == 3\nassert add(*[1, 2]) == 3\nassert add(Z, 1) == 2")
    assert (
        isinstance(tests[0], CallTest)
        and isinstance(tests[1], AssertTest)
        and isinstance(tests[2], AssertTest)
    )


def test_loose_eq():
    assert loose_eq((1, 2), [1, 2])
    assert loose_eq(3, [3])  # APPS wraps outputs in a list
    assert loose_eq([1.0000001], [1.0], 1e-6)
    assert not loose_eq([1.1], [1.0], 1e-6)
    assert not loose_eq(True, 1.0)


def test_suite_round_trip():
    suite = TestSuite(
        (StdioTest("1\n", "2\n"), CallTest(("f(1)",), "v0 == 2"), AssertTest("assert f(1) == 2")),
        setup="import math",
        entry_point="f",
        time_limit_s=2.0,
    )
    assert suite_from(suite.to_dict()) == suite
    with pytest.raises(ValueError):
        suite_from({"tests": []})
    with pytest.raises(ValueError):
        suite_from({"tests": [{"kind": "telepathy"}]})


def test_static_scan_and_clip():
    assert static_hack_scan(ast.parse("import sys\nf = sys._getframe(1)")) is not None
    assert static_hack_scan(ast.parse("import ctypes")) is not None
    assert static_hack_scan(ast.parse("def f(x):\n    return sorted(x)")) is None
    text = "a" * 1000 + "END"
    short = clip(text, 90)
    assert len(short) < 200 and short.endswith("END") and "omitted" in short


def test_extract_follows_commonmark_fences():
    assert extract_code("```python\n```js\ninner\n```\n") == "```js\ninner\n"  # an info string never closes
    assert extract_code("````python\nx = '```'\n```\ny = 1\n````") == "x = '```'\n```\ny = 1\n"
    assert extract_code("say ```python``` inline\n```python\nok\n```") == "ok\n"
    many_unclosed = "```python\nx\n" * 2000 + "tail"  # one pass over the lines, no quadratic rescans
    assert extract_code(many_unclosed) is None
