"""The v1 front door: a `Task` as a `verifiers.v1` `Taskset` (verifiers 0.3.1 .. 0.4.x).

Importing this module needs `verifiers.v1`; environment modules import it only when
`vf_compat.has_v1()` and then list the built class in `__all__` (the v1 loader takes the one
`Taskset` subclass there). Same rows, prompts, golds and rubric as `load_environment()` and the
Atropos runtime:

* `load()` maps `task.items(split)` (default `eval`) to `RlvrData` rows: the system message becomes
  `system_prompt`, the rest the prompt, the gold travels JSON-encoded in `answer` (as in the classic
  door), `uid` (and `id` on 0.4) is the item's stable uid. Malformed rows are skipped with a warning.
* One reward, `rubric_reward` (weight 1), awaits the project rubric on the final reply. An
  unverified result RAISES `UnverifiedReward`: v1 records a `TaskError`, the reward is None and the
  trace is `ok=False` (consumers must drop such traces; `trace.reward` alone reads 0.0 there).
* Multi-turn tasks (`MultiTurnTask`, e.g. RLEF code repair): the Taskset comes with `<Name>EpisodeEnv`
  (`episode_env_class`, export it in `__all__` too): its `run()` opens with the prompt and answers each
  reply with `task.env_step` through `interaction.turn(...)` until done, failure or the turn budget; the
  reward is the task's `final_sample` + `finalize`. An environment failure makes the reward unverified.
* Config: `--env.taskset.<field>` for each field the environment's config adds over
  `RubricEnvConfig` (dataset, judge_base_url, ...), plus `--env.taskset.split train|eval`.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterator
from typing import Any, Literal

import pydantic
import verifiers.v1 as vf

from environments.atropos_runtime.base import RubricEnvConfig
from environments.task import Item, Task
from environments.vf_bridge.compat import detect
from environments.vf_bridge.v1_uv_pin import pin_harness_openai
from rubrics.adapters.verifiers import decode_answer, encode_answer
from rubrics.core import RewardResult, Rubric, Sample

log = logging.getLogger("rlvr")
pin_harness_openai(detect().version)  # verifiers 0.3.x: harness programs on openai<3 (see v1_uv_pin)


class UnverifiedReward(RuntimeError):
    """The rubric could not verify the reply (score None); the message carries status and reason."""


class RlvrData(vf.TaskData):
    """One item of a project `Task`: `uid` is its stable id, `answer` the JSON-encoded gold (`encode_answer`)."""

    uid: str
    answer: str
    info: dict[str, Any] = pydantic.Field(default_factory=dict)


class Scorer:
    """The project task and its rubric for one taskset (the rubric built on first use inside the running
    event loop), shared by its v1 tasks; `episodes` holds each open multi-turn episode by trace id."""

    def __init__(self, task: Task) -> None:
        self.task = task
        self._rubric: Rubric | None = None
        self._lock = asyncio.Lock()
        self.episodes: dict[str, Any] = {}

    def __deepcopy__(self, memo: dict[int, Any]) -> Scorer:  # `Task.defer_scoring` deep-copies tasks
        return self

    async def rubric(self) -> Rubric:
        async with self._lock:
            if self._rubric is None:
                self._rubric = self.task.rubric()
        return self._rubric

    async def score(self, sample: Sample) -> RewardResult:
        return await (await self.rubric()).score(sample)


class _ScoredTask(vf.Task[RlvrData]):
    def __init__(self, data: RlvrData, config: Any = None, scorer: Scorer | None = None) -> None:
        super().__init__(data, config)
        self.scorer = scorer

    def _scorer(self) -> Scorer:
        if self.scorer is None:
            raise UnverifiedReward("task built without its taskset's scorer (load it through the Taskset)")
        return self.scorer


def verified(result: RewardResult) -> float:
    """The score of a verified result; an unverified one raises (v1: TaskError, reward None, ok=False)."""
    if result.score is None:
        raise UnverifiedReward(f"unverified ({result.status.value}): {result.reason}")
    return float(result.score)


class RlvrTask(_ScoredTask):
    """A single-turn task scored by the project rubric. Built by the Taskset's `load()` with its scorer."""

    @vf.stop
    async def single_turn(self, trace: vf.Trace) -> bool:
        return trace.num_turns >= 1

    @vf.reward(weight=1.0)
    async def rubric_reward(self, trace: vf.Trace) -> float:
        return verified(await self._scorer().score(to_sample(self.data, trace.last_reply or "")))


class RlvrEpisodeTask(_ScoredTask):
    """A multi-turn task (`environments.atropos_runtime.episodes.MultiTurnTask`). `EpisodeEnv.run` plays the environment's
    side turn by turn with `task.env_step`; the reward is `final_sample` + `finalize`, as in `serve`."""

    @vf.reward(weight=1.0)
    async def rubric_reward(self, trace: vf.Trace) -> float:
        scorer = self._scorer()
        episode = scorer.episodes.pop(trace.id, None)
        if episode is None:
            raise UnverifiedReward("no episode was run for this trace (run it with the taskset's EpisodeEnv)")
        if episode.failure:
            raise UnverifiedReward(f"environment step failed: {episode.failure}")
        ctx = episode.context(await scorer.rubric())
        result = await scorer.score(scorer.task.final_sample(ctx))
        return verified(scorer.task.finalize(ctx, result) if result.verified else result)


class Episode:
    """One v1 episode of a `MultiTurnTask`: the project-side conversation, state and turn count."""

    def __init__(self, task: Any, data: RlvrData, split: str) -> None:
        sample = to_sample(data, "")
        self.item = Item(uid=data.uid, prompt=list(sample.prompt), answer=sample.answer, info=data.info)
        self.task, self.split = task, split
        self.messages: list[dict[str, Any]] = [dict(m) for m in self.item.prompt]
        self.state = task.init_state(self.item)
        self.turns = 0
        self.failure: str | None = None

    def context(self, rubric: Rubric) -> Any:
        from environments.atropos_runtime.episodes import EpisodeContext

        budget = self.task.turn_budget()
        return EpisodeContext(self.item, self.messages, self.state, self.turns, budget, rubric, self.split)


def episode_env_class(name: str, module: str) -> type:
    """`<Name>EpisodeEnv`: the v1 Env that runs a `MultiTurnTask`'s episodes (the vf04_retry pattern:
    the task's prompt opens, each `env_step` reply is the next user turn, until done / failure / budget)."""

    class _EpisodeEnv(vf.SingleAgentEnv):
        async def run(self, task: RlvrEpisodeTask, seats: Any) -> None:
            scorer = task._scorer()
            async with seats.agent.interaction(task) as interaction:
                episode = scorer.episodes[interaction.trace.id] = Episode(
                    scorer.task, task.data, self.taskset.config.split
                )
                try:
                    await _play(scorer, episode, interaction)
                finally:  # however it stopped, before scoring: the task releases what it held
                    try:
                        await scorer.task.end_episode(episode.context(await scorer.rubric()))
                    except Exception as exc:  # noqa: BLE001 - the episode's outcome stands
                        log.warning(
                            "releasing an episode's resources failed: %s: %s", type(exc).__name__, exc
                        )

    _EpisodeEnv.__name__ = _EpisodeEnv.__qualname__ = f"{name}EpisodeEnv"
    _EpisodeEnv.__module__ = module
    return _EpisodeEnv


async def _play(scorer: Any, episode: Episode, interaction: Any) -> None:
    """The episode's turns: the model's reply, then the task's `env_step`, until done / failure / budget."""
    segment = await interaction.turn()
    while not segment.terminated:
        episode.turns += 1
        episode.messages.append(scorer.task.assistant_message(segment.last_reply))
        try:
            step = await scorer.task.env_step(episode.context(await scorer.rubric()))
        except Exception as exc:  # an environment failure, never the model's
            episode.failure = f"{type(exc).__name__}: {exc}"
            break
        interaction.trace.info.setdefault("rlvr_turns", []).append(step.info)
        if step.failure is not None:
            episode.failure = step.failure
            break
        if step.done or not step.messages:
            break
        episode.messages.extend(step.messages)
        reply = step.messages
        segment = await interaction.turn(
            reply[0]["content"] if len(reply) == 1 and reply[0].get("role") == "user" else reply
        )


def to_data(item: Item, idx: int) -> RlvrData:
    """The v1 row of an item: system message → `system_prompt`, one user text → a plain prompt."""
    messages = [dict(m) for m in item.prompt]
    system = None
    if messages and messages[0].get("role") == "system":
        system = str(messages.pop(0).get("content") or "")
    prompt: Any = messages
    if (
        len(messages) == 1
        and messages[0].get("role") == "user"
        and isinstance(messages[0].get("content"), str)
    ):
        prompt = messages[0]["content"]
    durable_id = {"id": item.uid} if "id" in vf.TaskData.model_fields else {}  # `id` is new in 0.4
    return RlvrData(
        idx=idx,
        uid=item.uid,
        **durable_id,
        prompt=prompt,
        system_prompt=system,
        answer=encode_answer(item.answer),
        info=dict(item.info),
    )


def to_sample(data: RlvrData, reply: str) -> Sample:
    """The rubric's view of a v1 row and the model's final reply (the inverse of `to_data`)."""
    prompt = data.prompt if isinstance(data.prompt, str) else [m.model_dump() for m in data.prompt or []]
    if isinstance(prompt, str):
        prompt = [{"role": "user", "content": prompt}]
    if data.system_prompt:
        prompt = [{"role": "system", "content": data.system_prompt}, *prompt]
    return Sample(prompt=prompt, completion=reply, answer=decode_answer(data.answer), info=data.info)


def config_fields(env_config_cls: type[RubricEnvConfig]) -> dict[str, Any]:
    """The environment's own config fields (those it adds over `RubricEnvConfig`), for create_model."""
    base = RubricEnvConfig.model_fields
    return {
        name: (f.annotation, f)
        for name, f in env_config_cls.model_fields.items()
        if name not in base and name not in vf.TasksetConfig.model_fields
    }


def taskset_class(task_cls: type[Task], env_config_cls: type[RubricEnvConfig], name: str) -> type:
    """Build `<Name>Taskset` (a `vf.Taskset[RlvrTask, <Name>TasksetConfig]`) for a project `Task`.

    `name` is the class-name stem ("Math" → `MathTaskset`); the classes claim the caller's module so
    v1 finds them by import path and `__all__`.
    """
    module = task_cls.__module__
    config_cls = pydantic.create_model(
        f"{name}TasksetConfig",
        __base__=vf.TasksetConfig,
        __module__=module,
        split=(Literal["train", "eval"], pydantic.Field(default="eval", description="Which split to serve")),
        **config_fields(env_config_cls),
    )

    task_type = RlvrEpisodeTask if hasattr(task_cls, "env_step") else RlvrTask

    class _Taskset(vf.Taskset[task_type, config_cls]):  # type: ignore[valid-type]
        __doc__ = f"The {name.lower()} environment's rows and rubric as a verifiers v1 Taskset."

        def load(self) -> Iterator[_ScoredTask]:
            values = self.config.model_dump(include=set(config_fields(env_config_cls)))
            task = task_cls(env_config_cls(**values))
            items, errors = task.items(self.config.split)
            for line in errors[:20]:
                log.warning("skipping bad row: %s", line)
            if not items:
                raise ValueError(f"{type(task).__name__}: no usable rows in the {self.config.split} split")
            scorer = Scorer(task)
            for idx, item in enumerate(items):
                yield task_type(to_data(item, idx), self.config.task, scorer)

    _Taskset.__name__ = _Taskset.__qualname__ = f"{name}Taskset"
    _Taskset.__module__ = module
    return _Taskset
