"""Test formats for code rubrics, and the host-side half of every verdict.

Three formats, all running in ONE sandbox job per problem (`sandbox/runner/` is the other half):

* `StdioTest(input, output)`: CodeContests / APPS / TACO / LiveCodeBench style. The expected output
  never enters the sandbox; the host compares with `compare_stdout` (rules in its docstring).
* `CallTest(calls, check, expected)`: only the calls (e.g. `add(1, 2)`) are evaluated in the sandbox;
  their values come back as exact-builtin-type JSON and the host evaluates `check`, a restricted
  expression over `v0..vN` and `expected` (e.g. `v0 == 3`, `math.isclose(v0, 2.5)`). Expected values
  never enter the sandbox, and rigged `__eq__` objects or int subclasses cannot come back at all.
  `parse_assert` turns `assert f(args) == expected`-style statements into CallTests with `ast`.
* `AssertTest(code)`: arbitrary in-process assert code (HumanEval `check`) when it cannot be
  converted. Best effort: nonce-framed per-test records plus a hack detector (see the runner).

A `TestSuite` bundles tests with trusted `setup` code (e.g. the HumanEval prompt with its helpers),
an `entry_point`, and limits. Suites round-trip through plain dicts (`to_dict`/`suite_from`) so
datasets and environments can store them as JSON.
"""

from __future__ import annotations

import ast
import builtins
import copy
import functools
import json
import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from types import CodeType
from typing import Any

from rubrics.code import pyparse


@dataclass(frozen=True)
class StdioTest:
    input: str
    output: str


@dataclass(frozen=True)
class CallTest:
    """`calls` run in the sandbox (with `__rlvr_args__` = `args`); `check` runs on the host."""

    calls: tuple[str, ...]
    check: str = "v0 == expected"
    expected: Any = None
    args: Any = None
    source: str = ""  # what feedback shows (e.g. the original assert)


@dataclass(frozen=True)
class AssertTest:
    code: str
    source: str = ""


Test = StdioTest | CallTest | AssertTest


@dataclass(frozen=True)
class TestSuite:
    """Tests of one problem plus trusted setup code and limits (per test)."""

    __test__ = False  # not a pytest class

    tests: tuple[Test, ...]
    setup: str = ""
    entry_point: str | None = None
    time_limit_s: float = 4.0
    memory_mb: int = 512
    float_tol: float = 1e-6

    @functools.cached_property
    def fingerprint(self) -> str:
        """Canonical JSON of the whole suite (computed once per suite object: the suite is frozen)."""
        return json.dumps(self.to_dict(), sort_keys=True, default=repr)

    @functools.cached_property
    def harness_tests(self) -> tuple[str, int, int, int]:
        """The tests as the sandbox's harness gets them (`sandbox/runner/` spec; expected outputs
        and values never included), as JSON, with the result channel bytes the stdio tests need and
        the numbers of call and assert tests. Once per suite object."""
        tests, stdio_bytes, calls, asserts = [], 0, 0, 0
        for test in self.tests:
            if isinstance(test, StdioTest):
                cap = 2 * len(test.output.encode()) + 4096
                tests.append({"kind": "stdio", "input": test.input, "max_output": cap})
                stdio_bytes += cap * 2 + 8192  # JSON escaping can double it
            elif isinstance(test, CallTest):
                tests.append({"kind": "call", "calls": list(test.calls), "args": test.args})
                calls += 1
            else:
                tests.append({"kind": "assert", "code": test.code})
                asserts += 1
        return json.dumps(tests), stdio_bytes, calls, asserts

    def to_dict(self) -> dict[str, Any]:
        tests = []
        for t in self.tests:
            if isinstance(t, StdioTest):
                tests.append({"kind": "stdio", "input": t.input, "output": t.output})
            elif isinstance(t, CallTest):
                tests.append(
                    {
                        "kind": "call",
                        "calls": list(t.calls),
                        "check": t.check,
                        "expected": t.expected,
                        "args": t.args,
                        "source": t.source,
                    }
                )
            else:
                tests.append({"kind": "assert", "code": t.code, "source": t.source})
        return {
            "tests": tests,
            "setup": self.setup,
            "entry_point": self.entry_point,
            "time_limit_s": self.time_limit_s,
            "memory_mb": self.memory_mb,
            "float_tol": self.float_tol,
        }


def suite_from(value: TestSuite | Mapping[str, Any]) -> TestSuite:
    """A `TestSuite` from itself or from its `to_dict` form (ValueError if malformed)."""
    if isinstance(value, TestSuite):
        return value
    if not isinstance(value, Mapping) or not isinstance(value.get("tests"), Sequence):
        raise ValueError("a test suite needs a 'tests' list")
    tests: list[Test] = []
    for raw in value["tests"]:
        kind = raw.get("kind")
        if kind == "stdio":
            tests.append(StdioTest(str(raw["input"]), str(raw["output"])))
        elif kind == "call":
            tests.append(
                CallTest(
                    tuple(raw["calls"]),
                    raw.get("check", "v0 == expected"),
                    raw.get("expected"),
                    raw.get("args"),
                    raw.get("source", ""),
                )
            )
        elif kind == "assert":
            tests.append(AssertTest(str(raw["code"]), raw.get("source", "")))
        else:
            raise ValueError(f"unknown test kind {kind!r}")
    if not tests:
        raise ValueError("a test suite needs at least one test")
    return TestSuite(
        tuple(tests),
        setup=value.get("setup") or "",
        entry_point=value.get("entry_point"),
        time_limit_s=float(value.get("time_limit_s", 4.0)),
        memory_mb=int(value.get("memory_mb", 512)),
        float_tol=float(value.get("float_tol", 1e-6)),
    )


# ----------------------------------------------------------------------------- stdout comparison

_FLOATISH = re.compile(r"^[+-]?(\d+\.\d*|\.\d+|\d+(\.\d*)?[eE][+-]?\d+)$")


def _lines(text: str) -> list[str]:
    lines = [line.rstrip() for line in text.replace("\r\n", "\n").replace("\r", "\n").split("\n")]
    while lines and not lines[-1]:
        lines.pop()
    return lines


def compare_stdout(actual: str, expected: str, float_tol: float = 1e-6) -> tuple[bool, str]:
    """Judge a program's stdout against the expected output. Returns (ok, why-not).

    Rules: line endings are normalised (CRLF/CR → LF), trailing whitespace on each line and trailing
    blank lines are ignored; the NUMBER OF LINES MUST MATCH (no zip truncation). Each line is split
    on whitespace and token counts must match. Tokens compare as exact strings, except when the
    expected token is a decimal/exponent float literal (`0.5`, `1e-3`; not an integer): then the
    actual token must parse as a float within `float_tol` absolute or relative error.
    """
    got, want = _lines(actual), _lines(expected)
    if len(got) != len(want):
        return False, f"expected {len(want)} line(s), got {len(got)}"
    for number, (g, w) in enumerate(zip(got, want, strict=True), 1):
        if g == w:
            continue
        gt, wt = g.split(), w.split()
        if len(gt) != len(wt):
            return False, f"line {number}: expected {len(wt)} token(s), got {len(gt)}"
        for a, b in zip(gt, wt, strict=True):
            if a != b and not _close_tokens(a, b, float_tol):
                return False, f"line {number}: expected {b!r}, got {a!r}"
    return True, ""


def _close_tokens(actual: str, expected: str, tol: float) -> bool:
    if not _FLOATISH.match(expected):
        return False
    try:
        a, b = float(actual), float(expected)
    except ValueError:
        return False
    return math.isfinite(a) and abs(a - b) <= tol * max(1.0, abs(b))


# ----------------------------------------------------------------------------- exact-type values


class DecodeError(ValueError):
    """The sandbox sent something that is not an exact-builtin-type encoding."""


_TAGS = {"tuple", "dict", "set", "frozenset", "int", "float", "complex", "bytes"}


def decode(obj: Any, depth: int = 0) -> Any:
    """Inverse of the runner's `encode`; only builtin types come out."""
    if depth > 200:
        raise DecodeError("nested too deeply")
    if obj is None or type(obj) in (bool, int, float, str):
        return obj
    if type(obj) is list:
        return [decode(v, depth + 1) for v in obj]
    if type(obj) is not dict or len(obj) != 1:
        raise DecodeError(f"unexpected {type(obj).__name__}")
    ((tag, body),) = obj.items()
    if tag not in _TAGS:
        raise DecodeError(f"unknown tag {tag!r}")
    try:
        if tag == "tuple":
            return tuple(decode(v, depth + 1) for v in body)
        if tag == "dict":
            return {decode(k, depth + 1): decode(v, depth + 1) for k, v in body}
        if tag in ("set", "frozenset"):
            items = (decode(v, depth + 1) for v in body)
            return set(items) if tag == "set" else frozenset(items)
        if tag == "int":
            return int(body, 16)
        if tag == "float":
            return float(body)
        if tag == "complex":
            return complex(float(body[0]), float(body[1]))
        return bytes.fromhex(body)
    except (TypeError, ValueError) as exc:
        raise DecodeError(f"bad {tag}: {exc}") from None


# ----------------------------------------------------------------------------- host-side checks


def _norm(value: Any) -> Any:
    if isinstance(value, (list, tuple)):
        return [_norm(v) for v in value]
    if isinstance(value, dict):
        return {k: _norm(v) for k, v in value.items()}
    return value


def loose_eq(actual: Any, expected: Any, tol: float = 0.0) -> bool:
    """JSON-dataset equality: tuples equal lists, floats within `tol`, and (APPS quirk) an expected
    one-element list also matches its element."""
    a, e = _norm(actual), _norm(expected)
    if _tol_eq(a, e, tol):
        return True
    return isinstance(e, list) and len(e) == 1 and _tol_eq(a, e[0], tol)


def _tol_eq(a: Any, e: Any, tol: float) -> bool:
    if type(a) is float or type(e) is float:
        if isinstance(a, (int, float)) and isinstance(e, (int, float)) and not isinstance(a, bool):
            return a == e or (tol > 0 and abs(a - e) <= tol * max(1.0, abs(e)))
        return False
    if isinstance(a, list) and isinstance(e, list):
        return len(a) == len(e) and all(_tol_eq(x, y, tol) for x, y in zip(a, e, strict=True))
    if isinstance(a, dict) and isinstance(e, dict):
        return a.keys() == e.keys() and all(_tol_eq(a[k], e[k], tol) for k in a)
    return a == e


class _Math:
    isclose, fabs, sqrt, floor, ceil = math.isclose, math.fabs, math.sqrt, math.floor, math.ceil
    isnan, isinf, pi, e = math.isnan, math.isinf, math.pi, math.e


_FUNCS: dict[str, Any] = {
    name: getattr(builtins, name)
    for name in (
        "abs",
        "len",
        "set",
        "sorted",
        "list",
        "tuple",
        "frozenset",
        "sum",
        "min",
        "max",
        "all",
        "any",
        "round",
        "int",
        "float",
        "str",
        "bool",
        "dict",
        "isinstance",
        "reversed",
    )
}
_FUNCS.update({"math": _Math, "loose_eq": loose_eq, "True": True, "False": False, "None": None})
_MATH_ATTRS = {"isclose", "fabs", "sqrt", "floor", "ceil", "isnan", "isinf", "pi", "e"}
_NODES = (
    ast.Expression,
    ast.Compare,
    ast.BoolOp,
    ast.UnaryOp,
    ast.BinOp,
    ast.Constant,
    ast.List,
    ast.Tuple,
    ast.Set,
    ast.Dict,
    ast.Name,
    ast.Call,
    ast.keyword,
    ast.Subscript,
    ast.Slice,
    ast.Load,
    ast.boolop,
    ast.unaryop,
    ast.operator,
    ast.cmpop,
    ast.IfExp,
)


def validate_check(expr: str) -> None:
    """Raise ValueError unless `expr` is a restricted host-side check expression."""
    tree = pyparse.parse(expr, mode="eval")
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute):
            if not (
                isinstance(node.value, ast.Name) and node.value.id == "math" and node.attr in _MATH_ATTRS
            ):
                raise ValueError(f"attribute {ast.unparse(node)!r} not allowed")
            continue
        if not isinstance(node, _NODES):
            raise ValueError(f"{type(node).__name__} not allowed in a check")
        if (
            isinstance(node, ast.Name)
            and node.id not in _FUNCS
            and node.id != "expected"
            and not re.fullmatch(r"v\d+", node.id)
        ):
            raise ValueError(f"name {node.id!r} not allowed in a check")


@functools.lru_cache(maxsize=4096)
def _compiled_check(check: str) -> CodeType:
    """`validate_check` + compile, once per distinct check (a suite's checks are judged many times)."""
    validate_check(check)
    return compile(check, "<check>", "eval")


def run_check(check: str, values: Sequence[Any], expected: Any) -> bool:
    """Evaluate a validated check over decoded builtin values. Any exception means 'failed'."""
    code = _compiled_check(check)
    scope = dict(_FUNCS)
    scope.update({f"v{i}": v for i, v in enumerate(values)})
    scope["expected"] = expected
    try:
        return bool(eval(code, {"__builtins__": {}}, scope))  # noqa: S307
    except Exception:  # noqa: BLE001 - a check that raises on the model's value is a failed check
        return False


# ----------------------------------------------------------------------------- assert conversion


def parse_assert(stmt: ast.stmt, entry_points: set[str], rename: str | None = None) -> CallTest | None:
    """`assert <expr over calls to an entry point with literal args>` → CallTest, else None.

    Every call to a name in `entry_points` must have literal arguments (ast.literal_eval); it becomes
    `v<i>` in the host check and is sent to the sandbox (renamed to `rename` if given, e.g.
    HumanEval's `candidate` → the entry point). The rest must pass `validate_check`.
    """
    if not isinstance(stmt, ast.Assert):
        return None
    calls: list[str] = []

    class Swap(ast.NodeTransformer):
        def visit_Call(self, node: ast.Call) -> ast.AST:
            if isinstance(node.func, ast.Name) and node.func.id in entry_points:
                for arg in [*node.args, *(k.value for k in node.keywords)]:
                    ast.literal_eval(arg)  # raises ValueError for non-literals
                if any(isinstance(a, ast.Starred) for a in node.args) or any(
                    k.arg is None for k in node.keywords
                ):
                    raise ValueError("starred arguments")
                call = ast.Call(ast.Name(rename or node.func.id, ast.Load()), node.args, node.keywords)
                calls.append(ast.unparse(call))
                return ast.Name(f"v{len(calls) - 1}", ast.Load())
            return self.generic_visit(node)

    source = ast.unparse(stmt)
    try:
        check = Swap().visit(ast.Expression(copy.deepcopy(stmt.test)))
        text = ast.unparse(check)
        validate_check(text)
    except (ValueError, TypeError, SyntaxError, RecursionError):
        return None
    if not calls:
        return None
    return CallTest(tuple(calls), check=text, source=source)


def asserts_to_tests(code: str, entry_point: str | None = None) -> list[Test]:
    """MBPP-style assert lists: one CallTest per convertible assert, AssertTest for the others."""
    tree = pyparse.parse(code)
    names = {entry_point} if entry_point else _called_names(tree)
    tests: list[Test] = []
    for stmt in tree.body:
        converted = parse_assert(stmt, names)
        tests.append(converted or AssertTest(ast.unparse(stmt), source=ast.unparse(stmt)))
    return tests


def infer_entry_point(code: str) -> str | None:
    """The first function an assert list calls (MBPP rows do not name their entry point)."""
    names = _called_names(pyparse.parse(code))
    return next(iter(names), None)


def _called_names(tree: ast.AST) -> set[str]:
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id not in _FUNCS:
            return {node.func.id}
    return set()


def humaneval_suite(problem: Mapping[str, Any], time_limit_s: float = 4.0) -> TestSuite:
    """HumanEval problem → suite. `check(candidate)` becomes CallTests when every statement in it is
    a convertible assert (or a no-op); otherwise the whole check runs in-process as one AssertTest.
    The prompt is trusted setup (it defines helpers such as `poly` and the typing imports)."""
    entry = problem["entry_point"]
    tree = pyparse.parse(problem["test"])
    check = next((n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "check"), None)
    tests: list[Test] = []
    if check is not None and check.args.args:
        param = check.args.args[0].arg
        for stmt in check.body:
            if isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Constant):
                continue  # docstring
            if isinstance(stmt, (ast.Import, ast.ImportFrom, ast.Pass)):
                continue
            if isinstance(stmt, ast.Assert) and isinstance(stmt.test, ast.Constant) and stmt.test.value:
                continue  # `assert True, "..."`
            converted = parse_assert(stmt, {param}, rename=entry)
            if converted is None:
                tests = []
                break
            tests.append(converted)
    if not tests:
        code = f"{problem['test']}\ncheck({entry})\n"
        tests = [AssertTest(code, source=f"check({entry})")]
    return TestSuite(tuple(tests), setup=problem["prompt"], entry_point=entry, time_limit_s=time_limit_s)


def call_suite(
    fn_name: str,
    inputs: Sequence[Any],
    outputs: Sequence[Any],
    *,
    method_of: str | None = None,
    float_tol: float = 1e-6,
    time_limit_s: float = 4.0,
) -> TestSuite:
    """JSON call-based tests (APPS/TACO `fn_name`, LiveCodeBench functional): `fn(*args) ≈ expected`."""
    target = f"{method_of}().{fn_name}" if method_of else fn_name
    tests = tuple(
        CallTest(
            (f"{target}(*__rlvr_args__)",),
            check=f"loose_eq(v0, expected, {float_tol!r})",
            expected=out,
            args=list(args) if isinstance(args, (list, tuple)) else [args],
            source=f"{fn_name}(*{json.dumps(args)[:200]})",
        )
        for args, out in zip(inputs, outputs, strict=True)
    )
    return TestSuite(tests, entry_point=fn_name, time_limit_s=time_limit_s, float_tol=float_tol)


@dataclass(frozen=True)
class Outcome:
    """One test's verdict on the host. `verdict` ∈ passed, wrong_answer, runtime_error, timeout,
    memory, output_limit, invalid_value, hack, not_run."""

    index: int
    verdict: str
    detail: Mapping[str, Any] = field(default_factory=dict)

    @property
    def passed(self) -> bool:
        return self.verdict == "passed"
