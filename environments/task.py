"""What an environment is about, independent of the trainer: dataset rows, prompts, and the rubric.

A `Task` is the one thing each environment module writes. The Atropos runtime (`RubricEnv` in
`environments/atropos_runtime/base.py`) and the Verifiers front door (`environments/vf_bridge/classic_front.py`) both build
on the same `Task`, so serve / process / evaluate / `load_environment` see identical prompts, golds
and rewards.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from rubrics.core import Rubric, Sample

Split = Literal["train", "eval"]


class DatasetError(ValueError):
    """A dataset row cannot be used. The message names the row and the problem in one line."""


@dataclass(frozen=True)
class Item:
    """One prompt with its gold. `uid` is stable across runs (used to resume output files)."""

    uid: str
    prompt: Sequence[Mapping[str, Any]]
    answer: Any
    info: Mapping[str, Any] = field(default_factory=dict)

    def sample(self, completion: str | Sequence[Mapping[str, Any]]) -> Sample:
        return Sample(prompt=self.prompt, completion=completion, answer=self.answer, info=self.info)


class Task(ABC):
    """Dataset + prompt format + rubric for one environment.

    Contract:
    * `rows(split)` yields raw rows (dicts) from the configured source; it may hit the network only
      when the configuration names a remote dataset.
    * `item(row, index)` turns one row into an `Item`, raising `DatasetError` for a malformed row.
      Callers skip (and count) such rows; they never crash a run.
    * `rubric()` returns the reward rubric; the caller owns it and calls `aclose()`.
    * `node_rubric(slots)` is the same rubric sized for one node of a Ray cluster; the task must
      pickle (it is shipped to every node, which builds its own rubric and pools).
    """

    def __init__(self, config: Any) -> None:
        self.config = config

    @abstractmethod
    def rows(self, split: Split) -> Iterable[Mapping[str, Any]]: ...

    @abstractmethod
    def item(self, row: Mapping[str, Any], index: int) -> Item: ...

    @abstractmethod
    def rubric(self) -> Rubric: ...

    def node_rubric(self, slots: int) -> Rubric:
        """The rubric one scoring node builds for itself (`--env.scorer ray`), sized to its `slots`
        (its CPUs). Tasks with a pool (sandbox, CAS) override this; the default is `rubric()`."""
        return self.rubric()

    def items(self, split: Split) -> tuple[list[Item], list[str]]:
        """All usable items of a split, plus one error line per skipped row."""
        items, errors = [], []
        for index, row in enumerate(self.rows(split)):
            try:
                items.append(self.item(row, index))
            except DatasetError as exc:
                errors.append(f"{split} row {index}: {exc}")
        return items, errors


def require(row: Mapping[str, Any], key: str, kind: type | tuple[type, ...] = str) -> Any:
    """`row[key]`, or a `DatasetError` naming the missing/mistyped field."""
    if key not in row or row[key] is None:
        raise DatasetError(f"missing field {key!r} (fields: {sorted(row)})")
    value = row[key]
    if not isinstance(value, kind):
        raise DatasetError(f"field {key!r} has type {type(value).__name__}")
    if isinstance(value, str) and not value.strip():
        raise DatasetError(f"field {key!r} is empty")
    return value
