"""RubricEnv: the Atropos `BaseEnv` every environment subclasses (serve / process / evaluate).

A subclass only names its `Task` and config:

    class MathEnvConfig(RubricEnvConfig):
        dataset: str = "reasoning_gym:basic_arithmetic"

    class MathEnv(RubricEnv):
        name = "math"
        env_config_cls = MathEnvConfig
        task_cls = MathTask

    if __name__ == "__main__":
        MathEnv.cli()

What this class fixes once for every environment (the atroposlib facts behind each: docs/atropos.md):
* `config_init` returns a *list* of server configs, so `--openai.base_url` is honoured; a bare
  config passed to the constructor is wrapped too.
* `wandb_name` defaults to the env name (serve registers); `use_wandb` is off unless the command
  line asks for it (atroposlib's process/evaluate force it on); empty api keys become a dummy key.
* stock vLLM works for training (`environments/atropos_runtime/servers.py`); OpenAI-only endpoints are refused for
  `serve` with a clear message.
* every network call has a timeout; registration fails fast when the trainer never starts;
  `batch_size % group_size` is checked against the trainer's `/info`.
* serve sends `inference_logprobs`, `generation_params` (temperature, `logprobs_mode`) and
  `set_advantage_to_zero` for truncated samples, and checks every group's alignment first.
  `inference_logprobs` follow `logprobs_mode`: "processed" (default) = logprobs of the distribution
  actually sampled from (temperature and top-p applied), which is what atroposlib's trainer compares
  against (it divides its logits by `generation_params.temperature`); "raw" = the model's unscaled
  logprobs (stock vLLM's default). When sampling changes them (temperature or top-p != 1), serve and
  process probe the server once and stop, in one line, if it returns the other convention.
* an inference server that dies or hangs is reported within seconds, waited for (or the run stops,
  `on_server_down=stop`) and resumed from; run-api outages and a missing trainer are said in one
  line each, with what the env waits for (`server_health.py`, `serve_api.py`). serve is quiet: one
  summary line every `status_every_s`; `--env.verbose true` adds atroposlib's per-loop lines.
"""

from __future__ import annotations

import asyncio
import logging
import os
import random
import sys
import warnings
from collections import Counter
from typing import Any, ClassVar, Literal

import rich
from atroposlib.envs.base import BaseEnv, BaseEnvConfig, ScoredDataGroup
from atroposlib.envs.server_handling.server_baseline import APIServerConfig
from pydantic import Field, ValidationError

from environments.atropos_runtime.cli_help import render_help
from environments.atropos_runtime.episode_runtime import episode_rollouts, finish_group
from environments.atropos_runtime.episodes import MultiTurnTask
from environments.atropos_runtime.modes import run_evaluate, run_process
from environments.atropos_runtime.options_given import option_flag, option_given
from environments.atropos_runtime.output import VIEW_KEYS, jsonable, rejected_record, token_counts
from environments.atropos_runtime.rollouts import DropReason, GroupOutcome, assemble_group, sample_group
from environments.atropos_runtime.run_identity import run_settings
from environments.atropos_runtime.sampling_slots import sampling_done
from environments.atropos_runtime.serve_api import RunApiClient, quiet_atroposlib
from environments.atropos_runtime.serve_loop import run_serve
from environments.atropos_runtime.server_health import InferenceWatcher, OnDown, Outage, describe, unwrap
from environments.atropos_runtime.servers import (
    TOKEN_CAPABLE,
    LogprobsMode,
    VLLMTokenServer,
    check_logprobs_mode,
    check_reachable,
    check_tokenizer,
    server_class_for,
)
from environments.task import Item, Task
from rubrics.core import RewardResult, Rubric, Status

log = logging.getLogger("rlvr")

MODES = ("serve", "process", "evaluate")
DEFAULT_MODEL = os.environ.get("RLVR_MODEL", "Qwen/Qwen2.5-1.5B-Instruct")
DEFAULT_BASE_URL = os.environ.get("RLVR_BASE_URL", "http://127.0.0.1:9001/v1")


class RubricEnvConfig(BaseEnvConfig):
    """BaseEnvConfig plus the generation settings every RubricEnv shares. Defaults work offline."""

    system_prompt: str | None = Field(default=None, description="Overrides the task's system prompt")
    max_tokens: int = Field(default=512, description="Completion budget per sample (tokens)")
    temperature: float = Field(default=1.0, description="Sampling temperature (sent to the trainer)")
    top_p: float = Field(default=1.0, description="Nucleus sampling")
    eval_temperature: float = Field(default=0.0, description="Sampling temperature in evaluate")
    train_limit: int | None = Field(default=None, description="Use at most this many train items")
    eval_limit: int | None = Field(default=None, description="Use at most this many eval items")
    max_concurrent_groups: int = Field(
        default=16,
        description="Groups sampling at once in process mode (as many again may be scoring) (and per server in "
        "serve, if max_num_workers is -1)",
    )
    request_timeout_s: float = Field(default=300.0, description="Timeout of one group's inference calls")
    score_timeout_s: float = Field(default=300.0, description="Timeout of scoring one group")
    trainer_wait_s: float = Field(default=600.0, description="How long serve waits for a trainer")
    vllm_api: Literal["openai", "generate"] = Field(
        default="openai",
        description="server_type vllm: 'openai' = stock vLLM server, 'generate' = atroposlib's /generate",
    )
    max_batch_prompts: int = Field(
        default=64,
        ge=1,
        description="server_type vllm (stock vLLM): concurrent sampling calls sent as one request of at most "
        "this many token-id prompts (1 = a request per call)",
    )
    seed: int = Field(default=0, description="Shuffling seed of the train items")
    scorer: Literal["local", "ray"] = Field(
        default="local", description="Score here, or on a Ray cluster (one rubric per node; extra [ray])"
    )
    ray_address: str | None = Field(default=None, description="Ray cluster host:port (default RAY_ADDRESS)")
    logprobs_mode: LogprobsMode = Field(
        default="processed",
        description="inference_logprobs sent: 'processed' = of the sampling distribution (temperature, "
        "top-p applied; what trainers expect; vLLM --logprobs-mode processed_logprobs) or 'raw'",
    )
    on_server_down: OnDown = Field(
        default="wait",
        description="Inference server down: 'wait' (status lines, resume when back) or 'stop' cleanly",
    )
    status_every_s: float = Field(default=30.0, gt=0, description="Period of status/summary lines")
    verbose: bool = Field(default=False, description="serve: atroposlib's per-loop status lines too")
    overwrite: bool = Field(
        default=False,
        description="process: replace the output file (default: resume the same run; another run is refused)",
    )


def _cli_mode() -> str | None:
    """The command (serve / process / evaluate) this process was started with, if any."""
    return next((a for a in sys.argv[1:2] if a in MODES), None)


class RubricEnv(RunApiClient, BaseEnv):
    """Shared serve/process/evaluate machinery over a `Task` (see module docstring)."""

    name: ClassVar[str | None] = None
    rubric_flags: ClassVar[str] = ""  # the options that point the rubric at what it depends on, if any
    env_config_cls = RubricEnvConfig
    task_cls: ClassVar[type[Task]]

    # ---------------------------------------------------------------- configuration
    @classmethod
    def cli(cls) -> None:
        """atroposlib's CLI (`serve | process | evaluate`, `--env.*`, `--openai.*`), with failures
        reported as one clear line (set RLVR_DEBUG=1 for the traceback)."""
        argv = sys.argv[1:]
        asks_help = {"-h", "--help", "--help-all"} & set(argv)
        if asks_help:  # the defaults a run really uses (config_init), not atroposlib's class defaults
            mode = argv[0] if argv[0] in MODES else None
            print(render_help(cls, RubricEnvConfig, mode, show_all="--help-all" in argv))
            raise SystemExit(0)
        if not argv or argv[0] not in MODES:
            prog = os.path.basename(sys.argv[0])
            got = f"unknown command {argv[0]!r}" if argv else "a command is required"
            print(f"usage: {prog} {{serve,process,evaluate}} [--env.* ...] [--openai.* ...]\n"
                  f"{prog}: error: {got}; serve (RL training through run-api), process (write groups "
                  f"to a file) or evaluate (metrics on the eval split); `{prog} COMMAND --help` lists the "
                  "options", file=sys.stderr)  # fmt: skip
            raise SystemExit(2)
        logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
        verbose = option_flag("verbose")
        rich.reconfigure(quiet=not verbose)  # atroposlib's ~85-line config dump (rich.print) only with it
        # setup() checks the inference server itself, in one line if it is not there
        warnings.filterwarnings("ignore", message="You are using a local Base URL", category=UserWarning)
        logging.captureWarnings(True)  # through logging, so process's progress bar stays whole
        logging.getLogger("httpx").setLevel(logging.WARNING)
        quiet_atroposlib(verbose)  # its CLI's debug dump too, before any env exists
        try:
            super().cli()
        except (SystemExit, KeyboardInterrupt):
            raise
        except Exception as exc:  # noqa: BLE001 - the CLI's last line of defence
            if os.environ.get("RLVR_DEBUG"):
                raise
            print(f"{cls.name or cls.__name__}: error: {_one_line(exc)}", file=sys.stderr)
            raise SystemExit(1) from None

    @classmethod
    def config_init(cls) -> tuple[RubricEnvConfig, list[APIServerConfig]]:
        name = cls.name or cls.__name__
        env_config = cls.env_config_cls(
            tokenizer_name=DEFAULT_MODEL,
            wandb_name=name,
            use_wandb=False,
            group_size=8,
            total_steps=16,
            max_token_length=2048,
            rollout_server_url="http://127.0.0.1:8000",
            data_path_to_save_groups=f"out/{name}/groups.jsonl",
            data_dir_to_save_evals=f"out/{name}/eval",
            ensure_scores_are_not_same=True,
        )
        server = APIServerConfig(
            server_type="vllm",
            model_name=DEFAULT_MODEL,
            tokenizer_name="none",  # follows --env.tokenizer_name
            base_url=DEFAULT_BASE_URL,
            api_key=os.environ.get("OPENAI_API_KEY") or "x",
            timeout=300,
            num_max_requests_at_once=64,
            num_requests_for_eval=64,
        )
        return env_config, [server]

    def __init__(
        self, config: RubricEnvConfig, server_configs: Any, slurm: bool = False, testing: bool = False
    ):
        if isinstance(server_configs, APIServerConfig):
            server_configs = [server_configs]  # atroposlib would otherwise ignore base_url
        if config.group_size < 1:
            raise ValueError(f"group_size must be >= 1, got {config.group_size}")
        if config.group_size == 1 and config.ensure_scores_are_not_same and _cli_mode() == "serve":
            raise SystemExit(
                "--env.group_size 1 can never give a group to train on: a group of one always has identical "
                "scores (set --env.group_size 2 or more, or --env.ensure_scores_are_not_same false)"
            )
        if config.use_wandb and not option_flag("use_wandb"):
            config.use_wandb = False
        if not config.wandb_name:
            config.wandb_name = self.name or type(self).__name__
        self.output_path = config.data_path_to_save_groups
        config.data_path_to_save_groups = None  # we write our own resumable JSONL
        server_type = "vllm"
        if isinstance(server_configs, list) and server_configs:
            server_type = server_configs[0].server_type
            if config.tokenizer_name == DEFAULT_MODEL and not option_given("tokenizer_name"):
                config.tokenizer_name = server_configs[0].model_name  # the default follows the served model
            for sc in server_configs:
                sc.api_key = sc.api_key or "x"
                if sc.tokenizer_name in ("", "none"):
                    sc.tokenizer_name = config.tokenizer_name
        self.server_cls = server_class_for(server_type, config.vllm_api)
        self.token_capable = server_type in TOKEN_CAPABLE
        super().__init__(config, server_configs, slurm=slurm, testing=testing)
        for server in getattr(self.server, "servers", []):
            if isinstance(server, VLLMTokenServer):
                server.max_batch_prompts = config.max_batch_prompts
        config.data_path_to_save_groups = self.output_path  # BaseEnv opened no writer of its own
        self.task = self.task_cls(config)
        self.rubric: Rubric | None = None
        self.train_items: list[Item] = []
        self.eval_items: list[Item] = []
        self.cursor = 0
        self.drops: Counter[str] = Counter()
        self.statuses: Counter[str] = Counter()
        self.groups_ok = 0
        self.hopeless = ""  # set when no group can get through this configuration (see hopeless_run)
        # process/evaluate honour --env.max_token_length when it is given (serve gets the trainer's)
        self._process_len_limit = config.max_token_length if option_given("max_token_length") else -1
        # process drops groups of identical scores only when --env.ensure_scores_are_not_same is given
        # true (serve: on by default); written data keeps every group unless asked otherwise
        self._process_drops_identical = (
            option_given("ensure_scores_are_not_same") and config.ensure_scores_are_not_same
        )
        self.inflight = 0
        self._trains = False  # serve/process: logprobs are sent/written, so their convention is checked
        self.watcher: InferenceWatcher | None = None
        self._outage: Outage | None = None
        self._last_summary = 0.0
        quiet_atroposlib(config.verbose)

    # ---------------------------------------------------------------- data
    async def setup(self) -> None:
        for server in self.server.servers:
            if hasattr(server, "config"):
                await asyncio.to_thread(check_reachable, server)
                if self.token_capable:
                    await asyncio.to_thread(
                        check_tokenizer, server, self.tokenizer, self.config.tokenizer_name
                    )
        sampling_changes_logprobs = self.config.temperature != 1.0 or self.config.top_p != 1.0
        if self._trains and self.token_capable and sampling_changes_logprobs:
            for server in self.server.servers:
                await asyncio.to_thread(check_logprobs_mode, server, self.config.logprobs_mode)
        if self.watcher is None:
            self.watcher = InferenceWatcher(
                self.server.servers,
                policy=self.config.on_server_down,
                status_every_s=self.config.status_every_s,
                waiting=lambda: f"{self.inflight} group(s) waiting" if self.inflight else "",
            )
            await self.watcher.start()
        self.train_items = self._load("train", self.config.train_limit)
        self.eval_items = self._load("eval", self.config.eval_limit)
        random.Random(self.config.seed).shuffle(self.train_items)
        if self.config.scorer == "ray":
            from rubrics.remote.scorer import RayScorerConfig, connect

            self.rubric = await connect(
                self.task.node_rubric, RayScorerConfig(address=self.config.ray_address)
            )
        else:
            self.rubric = self.task.rubric()
        problem = await self.rubric.unavailable()
        if problem:  # e.g. a judge endpoint that is down: no sample could be verified
            hint = f" ({self.rubric_flags})" if self.rubric_flags else ""
            raise SystemExit(f"{self.name or type(self).__name__}: the rubric cannot score: {problem}{hint}")
        if isinstance(self.task, MultiTurnTask):  # e.g. tool servers, the chat template's tool support
            await self.task.start(self.tokenizer if self.token_capable else None)

    def _load(self, split: Literal["train", "eval"], limit: int | None) -> list[Item]:
        items, errors = self.task.items(split)
        for line in errors[:20]:
            log.warning("skipping bad row: %s", line)
        if errors:
            log.warning("%d %s rows skipped as malformed", len(errors), split)
        if self.config.system_prompt is not None:
            items = [_with_system_prompt(it, self.config.system_prompt) for it in items]
        return items[:limit] if limit is not None else items

    async def get_next_item(self) -> Item | None:
        if not self.train_items:
            return None
        item = self.train_items[self.cursor % len(self.train_items)]
        self.cursor += 1
        return item

    def save_checkpoint(self, step: int, data: dict | None = None) -> None:
        super().save_checkpoint(step, {**(data or {}), "cursor": self.cursor})

    # ---------------------------------------------------------------- one group
    def run_settings(self) -> dict[str, Any]:
        """What defines this run's groups (stored beside process output; see run_identity)."""
        return run_settings(self, set(RubricEnvConfig.model_fields))

    def generation_params(self, split: str = "train") -> dict[str, Any]:
        temperature = self.config.temperature if split == "train" else self.config.eval_temperature
        return {"temperature": temperature, "top_p": self.config.top_p, "max_tokens": self.config.max_tokens}

    async def rollout_and_score(
        self, item: Item, n: int, split: str = "train"
    ) -> tuple[list, list[RewardResult]]:
        """`n` rollouts of `item` and their rewards. Network/rubric timeouts raise TimeoutError."""
        if isinstance(self.task, MultiTurnTask):
            return await episode_rollouts(self, item, n, split)
        rollouts = await sample_group(
            self.server,
            self.tokenizer,
            item.prompt,
            n,
            self.generation_params(split),
            self.token_capable,
            self.config.request_timeout_s,
            split=split,
            watcher=self.watcher,
        )
        sampling_done()  # scoring does not hold the group's sampling slot (process mode)
        samples = [item.sample(r.text) for r in rollouts]
        assert self.rubric is not None, "setup() not called"
        try:
            results = await asyncio.wait_for(self.rubric.score_group(samples), self.config.score_timeout_s)
        except asyncio.TimeoutError:
            reason = f"scoring took longer than {self.config.score_timeout_s}s"
            results = [RewardResult.unverified(Status.TIMEOUT, reason) for _ in samples]
        self.statuses.update(r.status.value for r in results)
        return rollouts, results

    async def _rollouts(self, item: Item) -> tuple[list, list[RewardResult]] | GroupOutcome:
        """`rollout_and_score`, or why inference failed. An inference failure during an outage of
        the inference server is retried once the server is back (at most 3 times), never blamed on
        slowness."""
        for _attempt in range(4):
            outages = self.watcher.outages if self.watcher else 0
            try:
                return await self.rollout_and_score(item, self.config.group_size)
            except asyncio.TimeoutError:
                failed = GroupOutcome(
                    None, "timeout", f"inference took longer than {self.config.request_timeout_s}s"
                )
            except Exception as exc:  # noqa: BLE001 - one failing group must not end the run
                failed = GroupOutcome(None, "error", describe(unwrap(exc)))  # the cause, not a RetryError
            watcher = self.watcher
            if watcher is None:
                return failed
            await watcher.next_round()  # a server that just died is seen as down by now
            if (watcher.outages == outages and not watcher.down) or watcher.stop_reason:
                return failed
            await watcher.wait_up()
        return failed

    async def group_for(self, item: Item, training: bool) -> GroupOutcome:
        """Rollouts → rewards → a checked group, or the drop reason (counted, never raised)."""
        self.inflight += 1
        try:
            got = await self._rollouts(item)
        finally:
            self.inflight -= 1
        rollouts, results = ([], []) if isinstance(got, GroupOutcome) else got
        if isinstance(got, GroupOutcome):
            outcome = got
        else:
            outcome = assemble_group(
                item.prompt,
                rollouts,
                results,
                self.generation_params(),
                group_size=self.config.group_size,
                training=training,
                ensure_scores_differ=self.config.ensure_scores_are_not_same
                if training
                else self._process_drops_identical,
                max_token_len=self.max_token_len if training else self._process_len_limit,
                bos_token_id=self.tokenizer.bos_token_id,
                eos_token_id=None,
            )
            if outcome.group is not None:
                if outcome.group["inference_logprobs"] is not None:
                    outcome.group["generation_params"]["logprobs_mode"] = self.config.logprobs_mode
                outcome.group["rewards"] = [r.to_dict() for r in results if r.verified]
                outcome.group["finish_reasons"] = [
                    r.finish_reason for r, s in zip(rollouts, results, strict=True) if s.verified
                ]
                outcome.group["prompt"] = jsonable(item.prompt)
                outcome.group["answer"] = jsonable(item.answer)
                counts = [token_counts(m) for m in outcome.group["masks"]] if outcome.group["tokens"] else []
                outcome.group["prompt_tokens"] = [c[0] for c in counts] or None
                outcome.group["completion_tokens"] = [c[1] for c in counts] or None
                outcome = finish_group(self, outcome, rollouts, results)
        outcome.rejected = rejected_record(
            item, outcome.drop, outcome.detail, rollouts, results, self.generation_params()
        )
        if outcome.drop:
            self.drops[outcome.drop] += 1
            if self.drops[outcome.drop] == 1:  # later ones are counted in the status line / summary
                log.warning("dropped group for item %s: %s (%s); further %s drops are counted, not logged",
                            item.uid, outcome.drop, outcome.detail[:300], outcome.drop)  # fmt: skip
            else:
                log.debug("dropped group for item %s: %s (%s)", item.uid, outcome.drop, outcome.detail[:300])
            self.hopeless = self.hopeless or hopeless_run(self.drops, self.groups_ok, outcome.detail)
        else:
            self.groups_ok += 1
        return outcome

    # ---------------------------------------------------------------- serve
    async def collect_trajectories(self, item: Item) -> tuple[ScoredDataGroup | None, list]:
        outcome = await self.group_for(item, training=True)
        if outcome.group is None:
            return None, []
        group = {k: v for k, v in outcome.group.items() if k not in VIEW_KEYS}
        return ScoredDataGroup(**group), []

    async def env_manager(self) -> None:
        if not self.token_capable:
            raise SystemExit(
                "serve needs token ids and logprobs: use --openai.server_type vllm (stock `vllm serve`, "
                "or --env.vllm_api generate for atroposlib's /generate server) or sglang; OpenAI-only "
                "endpoints can run `process` and `evaluate` only"
            )
        self._trains = True

        await run_serve(self)  # atroposlib's serve protocol without its idle time (see serve_loop)

    async def get_server_info(self) -> None:
        await asyncio.wait_for(super().get_server_info(), 30)
        bs, gs = self.config.batch_size, self.config.group_size
        if bs > 0 and bs % gs != 0:
            raise SystemExit(
                f"batch_size {bs} is not a multiple of group_size {gs}: run-api would never form a batch"
            )

    async def add_rollouts_for_wandb(self, scored_data: Any, item: Any = None) -> None:
        """Rollout texts are kept for wandb's table only: without wandb, nothing is decoded per group
        (and wandb_log never builds a `wandb.Table`, whose first use imports wandb: seconds of CPU)."""
        if self.config.use_wandb:
            await super().add_rollouts_for_wandb(scored_data, item)

    async def wandb_log(self, wandb_metrics: dict | None = None) -> None:
        metrics = dict(wandb_metrics or {})
        metrics.update({f"drops/{k}": v for k, v in self.drops.items()})
        metrics.update({f"reward_status/{k}": v for k, v in self.statuses.items()})
        await super().wandb_log(metrics)

    # ---------------------------------------------------------------- process / evaluate
    async def process_manager(self) -> None:
        self._trains = True
        await run_process(self)

    async def _run_evaluate(self) -> None:
        await self.setup()
        try:
            await self.evaluate()
        finally:
            await self.aclose()

    async def until_stopped(self, awaitable: Any) -> Any:
        """`await awaitable`, unless the inference server goes down under `on_server_down=stop`:
        then it is cancelled and SystemExit says which server is down (work already saved is kept)."""
        watcher = self.watcher
        if watcher is None or watcher.policy != "stop":
            return await awaitable
        task = asyncio.ensure_future(awaitable)
        stop = asyncio.ensure_future(watcher.stopped.wait())
        await asyncio.wait({task, stop}, return_when=asyncio.FIRST_COMPLETED)
        if task.done():
            stop.cancel()
            return task.result()
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        raise SystemExit(watcher.stop_reason)

    async def close_watcher(self) -> None:
        if self.watcher is not None:
            await self.watcher.aclose()
            self.watcher = None

    async def close_inference_http(self) -> None:
        """Close the token servers' HTTP sessions (aiohttp reports a session left open at exit)."""
        for server in getattr(self.server, "servers", []):
            if isinstance(server, VLLMTokenServer):
                await server.aclose()

    async def close_rubric(self) -> None:
        """Release the rubric's pools and clients (sandbox workers, judge connections)."""
        if self.rubric is not None:
            await self.rubric.aclose()
            self.rubric = None

    async def aclose(self) -> None:
        """Release everything the env holds: the rubric's pools and clients, the inference watcher,
        a multi-turn task's shared resources (`MultiTurnTask.aclose`), and the HTTP sessions of
        the token path and of serve's run-api calls. Every mode ends with it; code that drives an
        env itself (`rollout_and_score`, a trainer's own loop) calls it when done. Idempotent; a
        session closed here reopens on its next use."""
        try:
            await self.close_rubric()
            await self.close_watcher()
            if isinstance(self.task, MultiTurnTask):
                await self.task.aclose()
        finally:
            await self.close_inference_http()
            await self.close_run_api_http()

    async def evaluate(self, *args: Any, **kwargs: Any) -> dict[str, Any]:
        return await run_evaluate(self)


HOPELESS_AFTER = 20  # groups in a row dropped for one reason, none delivered, before a run stops


def hopeless_run(drops: Counter[str], delivered: int, detail: str) -> str:
    """Why the run must stop, or "": the first `HOPELESS_AFTER` groups were all dropped for the same
    reason, and it is not one that better items can pass (identical scores on items that are too hard
    or too easy is said in the status line instead)."""
    if delivered or len(drops) != 1:
        return ""
    ((reason, count),) = drops.items()
    if count < HOPELESS_AFTER or reason == DropReason.IDENTICAL:
        return ""
    return (f"the first {count} groups were all dropped ({reason}: {detail[:200]}); no group can get through "
            "this configuration, stopping")  # fmt: skip


def _one_line(exc: Exception) -> str:
    """A one-line description of a CLI failure, naming the offending field for config errors."""
    if isinstance(exc, ValidationError):
        return "invalid configuration: " + "; ".join(
            f"{'.'.join(str(p) for p in err['loc']).replace('__', '.')}: {err['msg']} (got {err.get('input')!r})"
            for err in exc.errors()
        )
    return f"{type(exc).__name__}: {exc}".splitlines()[0]


def _with_system_prompt(item: Item, system_prompt: str) -> Item:
    rest = [m for m in item.prompt if m.get("role") != "system"]
    return Item(item.uid, [{"role": "system", "content": system_prompt}, *rest], item.answer, item.info)
