"""`evaluate` for the RLEF environment: real vs no vs random feedback and the resampling baseline.

One run, one table (printed, and logged as atroposlib's `metrics.json` + `samples.jsonl`). Rows:
* `real`, `none`, `random`: one episode per eval item in that feedback mode;
* `resample` (the RLEF baseline): `max_turns` independent samples of the first prompt; after k
  samples the answer is the first one passing the public tests (else the k-th), scored on the
  private tests.
Columns: `solve@k` (private tests pass after k turns / samples, pass@1 after k turns), turns used,
`named_fixed` (share of repair turns after which the test named in the feedback passes),
`feedback_chars` (mean length of the feedback shown), `unverified` (episodes not scored).
At `eval_temperature` 0 the baseline's samples coincide; set a temperature for a fair baseline.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

from environments.atropos_runtime.base import RubricEnv
from environments.atropos_runtime.episode_runtime import eval_fields
from environments.atropos_runtime.modes import failed_sample
from environments.atropos_runtime.rollouts import sample_group
from rubrics.code.suites import suite_from
from rubrics.core import Sample

MODES = ("real", "none", "random")


async def evaluate_rlef(env: RubricEnv) -> dict[str, Any]:
    """Run every mode on `env`'s eval items (`env.task` is a `CodeRepairTask`: its feedback mode is
    switched per row and restored afterwards)."""
    if not env.eval_items:
        return {}
    start, turns = time.time(), env.task.turn_budget()
    chosen, rows, samples = env.task.config.feedback, {}, []
    sem = asyncio.Semaphore(max(1, env.config.max_concurrent_groups))
    try:
        for mode in MODES:
            env.task.config.feedback = mode

            async def one(item: Any, mode: str = mode) -> dict[str, Any]:
                fields: dict[str, Any] = {}
                try:
                    async with sem:
                        rollouts, results = await env.rollout_and_score(item, 1, split="eval")
                    result = results[0]
                    fields = eval_fields(rollouts[0])
                except Exception as exc:  # noqa: BLE001 - one failing episode must not end the eval
                    result = failed_sample(exc)
                return {"uid": item.uid, "mode": mode, "score": result.score, "status": result.status.value,
                        "reason": result.reason, **fields}  # fmt: skip

            done = await asyncio.gather(*(one(item) for item in env.eval_items))
            rows[mode] = _episode_row(done, turns)
            samples += done
        rows["resample"], baseline = await _resample(env, turns, sem)
        samples += baseline
    finally:
        env.task.config.feedback = chosen
    metrics = {  # atroposlib's metrics table formats every value as a number: leave out the empty cells
        f"eval/{mode}/{key}": value
        for mode, row in rows.items()
        for key, value in row.items()
        if value is not None
    }
    print_table(rows, turns)
    await env.evaluate_log(
        metrics,
        task_name=f"{env.name}_eval",
        model_name=env.server.servers[0].config.model_name if env.server.servers else None,
        start_time=start,
        end_time=time.time(),
        generation_parameters={**env.generation_params("eval"), "n": 1, "max_turns": turns},
        samples=samples,
    )
    return metrics


def _episode_row(samples: list[dict[str, Any]], turns: int) -> dict[str, Any]:
    scored = [s for s in samples if s["score"] is not None]
    row: dict[str, Any] = {}
    for k in range(1, turns + 1):
        row[f"solve@{k}"] = _mean([_solved_after(s, k) for s in scored])
    infos = [info for s in scored for info in s.get("turn_info", [])]
    row["turns"] = _mean([s["turns"] for s in scored])
    row["named_fixed"] = _mean([float(i["named_fixed"]) for i in infos if "named_fixed" in i])
    row["feedback_chars"] = _mean([float(i["feedback_chars"]) for i in infos if "feedback_chars" in i])
    row["unverified"] = len(samples) - len(scored)
    return row


def _solved_after(sample: dict[str, Any], k: int) -> float:
    """Private verdict of the last attempt within the first k turns (the final reward for the last)."""
    infos = sample.get("turn_info", [])
    if k >= len(infos):
        return float(sample["score"] == 1.0)
    return float(bool(infos[k - 1].get("private_pass")))


async def _resample(env: RubricEnv, turns: int, sem: asyncio.Semaphore) -> tuple[dict[str, Any], list]:
    """Best of `turns` independent samples. Greedy (temperature 0) samples are all the same, and vLLM
    refuses n > 1 with greedy sampling: there one sample stands for all of them."""
    assert env.rubric is not None
    params = env.generation_params("eval")
    n = 1 if not params.get("temperature") else turns

    async def one(item: Any) -> tuple[list[float] | None, dict[str, Any]]:
        try:
            async with sem:
                rollouts = await sample_group(env.server, env.tokenizer, item.prompt, n,
                                              params, env.token_capable,
                                              env.config.request_timeout_s, split="eval")  # fmt: skip
        except Exception as exc:  # noqa: BLE001 - one failing sample must not end the eval
            failed = failed_sample(exc)
            return None, {"uid": item.uid, "mode": "resample", "score": None, "status": failed.status.value,
                          "reason": failed.reason}  # fmt: skip
        texts = [r.text for r in rollouts] * (turns // n)
        public = suite_from(item.info["public"])
        pub = await env.rubric.score_group([Sample(item.prompt, t, public, item.info) for t in texts])
        priv = await env.rubric.score_group([item.sample(t) for t in texts])
        record = {"uid": item.uid, "mode": "resample", "attempts": texts,
                  "public": [r.score for r in pub], "private": [r.score for r in priv]}  # fmt: skip
        if not all(r.verified for r in (*pub, *priv)):
            return None, {**record, "score": None, "status": "error"}
        solve = []
        for k in range(1, turns + 1):
            pick = next((i for i in range(k) if pub[i].score == 1.0), k - 1)
            solve.append(float(priv[pick].score == 1.0))
        return solve, {**record, "score": solve[-1], "status": "ok"}

    done = await asyncio.gather(*(one(item) for item in env.eval_items))
    scored = [s for s, _ in done if s is not None]
    row: dict[str, Any] = {f"solve@{k}": _mean([s[k - 1] for s in scored]) for k in range(1, turns + 1)}
    row.update(turns=float(turns), named_fixed=None, feedback_chars=None, unverified=len(done) - len(scored))
    return row, [record for _, record in done]


def print_table(rows: dict[str, dict[str, Any]], turns: int) -> None:
    columns = [f"solve@{k}" for k in range(1, turns + 1)] + [
        "turns",
        "named_fixed",
        "feedback_chars",
        "unverified",
    ]
    print("\n== code_repair evaluate (RLEF) ==")
    print("  " + "mode".ljust(10) + "".join(c.rjust(15) for c in columns))
    for mode, row in rows.items():
        cells = [
            "-" if row[c] is None else f"{row[c]:.3f}" if isinstance(row[c], float) else str(row[c])
            for c in columns
        ]
        print("  " + mode.ljust(10) + "".join(c.rjust(15) for c in cells))


def _mean(values: list[float]) -> float | None:
    return sum(values) / len(values) if values else None
