"""`serve`'s rollout loop for RubricEnv: atroposlib's `env_manager` protocol without its idle time.

Same protocol and bounds as `BaseEnv.env_manager` (setup, wandb, `/register-env`, `/info`, then
`/status-env` polling, evals / checkpoints / logging on step changes via `env_step_checks`, the stop
rule `current_step + queued_batches > total_steps`, `worker_timeout`), reusing atroposlib's own
`add_train_workers` / `handle_env` for the workers. What differs, and why:

* no fixed 5 s wait after registration (upstream waits "for other instances"; nothing depends on it);
* the loop wakes when a group finishes instead of only every 0.1 s, so a free slot is refilled at once;
* in-flight groups are never cancelled: a new group starts only while
  `queued + in flight < max_batches_offpolicy * batch_size / group_size`, which keeps upstream's
  off-policy bound without throwing away (and later redoing) inference when the queue fills;
  `queued` counts the groups sent since the last poll too (upstream's fill reads only the polled
  queue size, so a group that finished between polls let it start one group too many);
* `max_num_workers = -1` means `max_concurrent_groups` groups per inference server (the process-mode
  concurrency) rather than upstream's 8;
* `/status-env` is asked at most every `STATUS_EVERY_S`, not on every wake (one per finished group:
  at thousands of rollouts/s the polls were a third of serve's CPU); in between, the groups this env
  sent since the last poll count as queued, so the off-policy bound only gets stricter.

With `min_batch_allocation` set (multi-env allocation arithmetic) upstream's loop runs unchanged.
"""

from __future__ import annotations

import asyncio
import time

from atroposlib.envs.base import BaseEnv

from environments.atropos_runtime.env_protocol import RuntimeEnv

POLL_S = 0.1  # longest wait between two /status-env polls
STATUS_EVERY_S = 0.05  # shortest time between two /status-env polls


async def run_serve(env: RuntimeEnv) -> None:
    try:
        if env.config.min_batch_allocation is not None:
            await BaseEnv.env_manager(env)
        else:
            await _serve(env)
    finally:
        await env.aclose()


async def _serve(env: RuntimeEnv) -> None:
    cfg = env.config
    if cfg.max_num_workers == -1:
        cfg.max_num_workers = max(1, cfg.max_concurrent_groups) * max(1, len(env.server.servers))
    await env.setup()
    await env.setup_wandb()
    await env.register_env()
    await env.get_server_info()
    last_status = -STATUS_EVERY_S
    while True:
        if env.last_loop_time is not None:
            env.mainloop_timings.append(max(0.0, time.time() - env.last_loop_time))
        env.last_loop_time = time.time()
        if time.monotonic() - last_status >= STATUS_EVERY_S:
            await env.get_status()
            last_status = time.monotonic()
        await env.env_step_checks()
        status = env.status_dict
        queued_groups = status["queue_size"] + env.sent_since_status
        if status["current_step"] + queued_groups * cfg.group_size // cfg.batch_size > cfg.total_steps:
            for worker in env.workers:
                worker.cancel()
            break
        if env.derived_batch_size != -1:
            cap = env.max_num_workers
            if cfg.max_batches_offpolicy > 0:
                cap = min(
                    cap, cfg.max_batches_offpolicy * env.derived_batch_size // cfg.group_size - queued_groups
                )
            if len(env.workers) < cap:
                # upstream fills up to min(max_num_workers, its bound from the last polled queue size),
                # which misses groups sent since that poll: lend it our cap for the call
                bound, env.max_num_workers = env.max_num_workers, cap
                try:
                    await env.add_train_workers()  # never above len(workers) here: cancels no worker
                finally:
                    env.max_num_workers = bound
        _expire_timed_out(env)
        if env.workers:
            await asyncio.wait(set(env.workers), timeout=POLL_S, return_when=asyncio.FIRST_COMPLETED)
        else:
            await asyncio.sleep(POLL_S)


def _expire_timed_out(env: RuntimeEnv) -> None:
    """upstream's `worker_timeout`: cancel (and do not retry) groups running longer than that."""
    if env.config.worker_timeout <= 0:
        return
    now = time.time()
    for item_uuid, running in list(env.running_items.items()):
        if now - running["start_time"] > env.config.worker_timeout:
            running["worker"].cancel()
            env.workers.discard(running["worker"])
            env.running_items.pop(item_uuid)
