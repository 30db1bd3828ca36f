"""`process` and `evaluate` for RubricEnv: concurrent, resumable, offline-friendly.

* process: `total_steps` groups of `group_size` rollouts from the train split, up to
  `max_concurrent_groups` sampling at once (a group being scored does not hold its slot, and at most
  as many again are past sampling: `sampling_slots`), appended to a resumable JSONL (exact sampled token ids when the
  server returns them), dropped groups and unverified samples to `<stem>.dropped.jsonl` (with the
  reason), then a summary (printed and `<stem>.summary.json`; plus the env's own `summary_extra()`
  entries, if it has that method) and the viewer (`<stem>.html`,
  `environments.atropos_runtime.viewer`). A failing group is counted and logged; groups already written are never
  lost or duplicated by a re-run.
* evaluate: one rollout per eval item at `eval_temperature`, written as atroposlib's
  `metrics.json` + `samples.jsonl` (per sample: prompt, gold `answer`, correctness, reward status,
  feedback and components, per-test records `tests` and what the rubric read `seen` when the
  rubric gives them, finish reason, token counts, generation parameters, episode turns);
  `rlvr view DIR` shows them.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections import Counter
from pathlib import Path
from typing import Any

from tqdm import tqdm
from tqdm.contrib.logging import logging_redirect_tqdm

from environments.atropos_runtime.env_protocol import RuntimeEnv
from environments.atropos_runtime.episode_runtime import eval_fields, turn_metrics
from environments.atropos_runtime.output import GroupWriter, jsonable, token_counts, write_html
from environments.atropos_runtime.run_identity import DROPPED_SUFFIX, claim_output, model_name
from environments.atropos_runtime.sampling_slots import SamplingSlots
from environments.atropos_runtime.server_health import describe, unwrap
from rubrics.core import RewardResult, Status

log = logging.getLogger("rlvr")


class RunStopped(Exception):
    """A run that cannot go on (the message says why); its written groups and summary are kept."""


async def run_process(env: RuntimeEnv) -> dict[str, Any]:
    await env.setup()
    if not env.train_items:
        raise SystemExit(f"{env.name}: no usable items in the train split (see the warnings above)")
    path = env.output_path or f"out/{env.name}/groups.jsonl"
    claim_output(path, env.run_settings(), env.config.overwrite)
    total = env.config.total_steps
    n_items = len(env.train_items)
    planned = [
        (f"{env.train_items[k % n_items].uid}#{k // n_items}", env.train_items[k % n_items])
        for k in range(total)
    ]
    start = time.monotonic()
    dropped_path = Path(path).with_suffix(DROPPED_SUFFIX)
    with GroupWriter(path) as writer, GroupWriter(dropped_path) as dropped:
        todo = [(uid, item) for uid, item in planned if uid not in writer.done]
        already = total - len(todo)
        if already:
            log.info("resuming %s: %d of %d groups already written", path, already, total)
        slots = SamplingSlots(env.config.max_concurrent_groups)
        bar = tqdm(total=total, initial=already, desc=f"{env.name} process", unit="group")
        scores: list[float] = []

        async def one(uid: str, item: Any) -> None:
            async with slots.group():
                outcome = await env.group_for(item, training=False)
            if env.hopeless:
                raise RunStopped(f"{env.name} process: {env.hopeless}")
            if outcome.group is not None:
                group = outcome.group
                writer.write(
                    {"uid": uid, "item_uid": item.uid, "tokens_exact": bool(group["tokens"]), **group}
                )
                scores.extend(group["scores"])
            if outcome.rejected is not None:  # dropped groups and unverified samples: never in `path`
                dropped.write({"uid": uid, **outcome.rejected})
            bar.update(1)

        stopped = ""  # why the run ended early (a server down under on_server_down=stop, a hopeless run)
        tasks = [asyncio.ensure_future(one(uid, item)) for uid, item in todo]
        try:
            with logging_redirect_tqdm():  # warnings (a server down) print above the bar, whole
                await env.until_stopped(asyncio.gather(*tasks))
        except (SystemExit, RunStopped) as exc:
            stopped = str(exc.code if isinstance(exc, SystemExit) else exc)
        finally:
            for task in tasks:  # a stopped run leaves no group sampling behind it
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            bar.close()
            await env.aclose()
        written = len(writer.done)
    elapsed = time.monotonic() - start
    html_path = Path(path).with_suffix(".html")
    summary = {
        "env": env.name,
        "model": model_name(env),
        "tokenizer": env.config.tokenizer_name,
        "settings": {
            "group_size": env.config.group_size,
            **env.generation_params(),
            "server_type": getattr(env.server.servers[0].config, "server_type", None)
            if env.server.servers and hasattr(env.server.servers[0], "config")
            else None,
        },
        "groups_planned": total,
        "groups_new": env.groups_ok,
        "groups_in_file": written,
        "dropped": dict(env.drops),
        "reward_status": dict(env.statuses),
        "rollouts_per_s": round(env.groups_ok * env.config.group_size / elapsed, 2) if elapsed > 0 else None,
        "mean_score": round(sum(scores) / len(scores), 4) if scores else None,
        "seconds": round(elapsed, 2),
        "jsonl": str(path),
        "dropped_jsonl": str(dropped_path),
        "html": str(html_path),
    }
    if stopped:
        summary["stopped"] = stopped
    extra = getattr(env, "summary_extra", None)  # an env's own additions (the Verifiers bridge: per task)
    if extra is not None:
        summary.update(extra())
    Path(path).with_suffix(".summary.json").write_text(json.dumps(summary, indent=2))
    write_html(path, html_path, env.tokenizer)  # reads the summary for its run header
    print_summary(f"{env.name} process", summary)
    if stopped:
        raise SystemExit(stopped)  # what was written is kept, with its summary and viewer
    if todo and not env.groups_ok:  # a run that produced nothing says so and fails
        raise SystemExit(
            f"{env.name} process: no group was written (dropped: {dict(env.drops) or 'none'}; reward "
            f"status: {dict(env.statuses) or 'none'}); see the first warning of each kind above"
        )
    return summary


def print_summary(title: str, summary: dict[str, Any]) -> None:
    width = max(len(k) for k in summary)
    print(f"\n== {title} ==")
    for key, value in summary.items():
        print(f"  {key.ljust(width)}  {value}")


def failed_sample(exc: BaseException) -> RewardResult:
    """The could-not-verify verdict of an eval sample whose episode raised: a timeout, or an error
    with its cause (what a retried call's RetryError wraps, e.g. the server's 400 and its text)."""
    cause = unwrap(exc)
    if isinstance(cause, asyncio.TimeoutError):
        return RewardResult.unverified(Status.TIMEOUT, "inference timed out")
    return RewardResult.unverified(Status.ERROR, describe(cause))


async def run_evaluate(env: RuntimeEnv) -> dict[str, Any]:
    if not env.eval_items:
        log.warning("%s: no eval items; nothing to evaluate", env.name)
        return {}
    start = time.time()
    sem = asyncio.Semaphore(max(1, env.config.max_concurrent_groups * env.config.group_size))

    async def one(item: Any) -> dict[str, Any]:
        async with sem:
            text, finish, extra = "", None, {}
            try:
                rollouts, results = await env.rollout_and_score(item, 1, split="eval")
                text, finish, result = rollouts[0].text, rollouts[0].finish_reason, results[0]
                prompt_tokens, completion_tokens = token_counts(rollouts[0].masks)
                extra = {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens}
                extra.update(eval_fields(rollouts[0]))
            except Exception as exc:  # noqa: BLE001 - one failing sample must not end the eval
                result = failed_sample(exc)
        return {
            "uid": item.uid,
            "messages": [*item.prompt, {"role": "assistant", "content": text}],
            "prompt": jsonable(item.prompt),
            "gold": jsonable(item.answer),
            "answer": jsonable(item.answer),
            "score": result.score,
            "correct": result.score is not None and result.score >= 1.0 - 1e-9,
            "status": result.status.value,
            "reason": result.reason,
            "feedback": result.feedback,
            "components": dict(result.components),
            **{k: v for k, v in result.to_dict().items() if k in ("tests", "seen")},  # rubric's own
            "finish_reason": finish,
            "generation_params": env.generation_params("eval"),
            **extra,
        }

    samples = await env.until_stopped(asyncio.gather(*(one(item) for item in env.eval_items)))
    end = time.time()
    verified = [s for s in samples if s["score"] is not None]
    metrics = {
        "eval/accuracy": sum(s["correct"] for s in verified) / len(verified) if verified else None,
        "eval/mean_score": sum(s["score"] for s in verified) / len(verified) if verified else None,
        "eval/n_samples": len(samples),
        "eval/n_unverified": len(samples) - len(verified),
        **{f"eval/status/{k}": v for k, v in Counter(s["status"] for s in samples).items()},
        **turn_metrics(samples),
    }
    params = {**env.generation_params("eval"), "n": 1}
    params["max_new_tokens"] = params["max_tokens"]
    await env.evaluate_log(
        {k: v for k, v in metrics.items() if v is not None},  # atroposlib's table cannot print None
        task_name=f"{env.name}_eval",
        model_name=model_name(env),
        start_time=start,
        end_time=end,
        generation_parameters=params,
        samples=list(samples),
    )
    return metrics
