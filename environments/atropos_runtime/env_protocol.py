"""What the runtime's modes need of an environment: the interface `RubricEnv` (base.py) provides.

`serve_loop.py`, `modes.py` and `episode_runtime.py` take the environment as a `RuntimeEnv`, so they
need not import `base.py`, which imports them to run its modes: the arrows point one way. Members are
grouped by who uses them; `RubricEnv` is the one implementation (atroposlib's `BaseEnv` provides the
serve bookkeeping).
"""

from __future__ import annotations

from typing import Any, Protocol


class RuntimeEnv(Protocol):
    # what every mode reads
    name: str | None
    config: Any  # RubricEnvConfig (or a subclass)
    server: Any  # atroposlib's ServerManager
    task: Any  # environments.task.Task
    rubric: Any  # rubrics.core.Rubric
    tokenizer: Any
    token_capable: bool
    max_token_len: int
    statuses: Any  # Counter of reward statuses
    _episode_runner: Any

    async def setup(self) -> None: ...
    def generation_params(self, split: str = "train") -> dict[str, Any]: ...
    async def rollout_and_score(self, item: Any, n: int, split: str = "train") -> Any: ...

    # process / evaluate (modes.py)
    drops: Any
    groups_ok: int
    output_path: Any
    train_items: list[Any]
    eval_items: list[Any]

    def run_settings(self) -> dict[str, Any]: ...
    async def group_for(self, item: Any, training: bool) -> Any: ...
    async def until_stopped(self, awaitable: Any) -> Any: ...
    async def close_watcher(self) -> None: ...
    async def close_rubric(self) -> None: ...
    async def close_inference_http(self) -> None: ...
    async def aclose(self) -> None: ...
    async def evaluate_log(self, *args: Any, **kwargs: Any) -> None: ...

    # serve (serve_loop.py): atroposlib BaseEnv's bookkeeping
    workers: Any
    running_items: Any
    status_dict: Any
    last_loop_time: Any
    mainloop_timings: Any
    max_num_workers: int
    derived_batch_size: int
    sent_since_status: int

    async def register_env(self) -> None: ...
    async def get_server_info(self) -> None: ...
    async def get_status(self) -> None: ...
    async def env_step_checks(self) -> None: ...
    async def add_train_workers(self) -> None: ...
    async def close_run_api_http(self) -> None: ...
    async def setup_wandb(self) -> None: ...
