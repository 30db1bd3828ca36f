"""Does the code-repair environment teach? The RLEF ablation (Gehring et al.) through the real stack.

    python benchmarks/rlef_learn.py            # make learn: 5 seeds x 4 arms, ~ minutes on 2 cores
    python benchmarks/rlef_learn.py --quick    # one seed, fewer steps

Every component is the real one: `environments/code_repair_env.py serve` (real sandbox, real
public-test feedback, exact multi-turn token episodes) sends scored groups to atroposlib's `run-api`;
this script is the trainer. It registers with run-api, pulls `/batch`, and updates the policy with a
group-relative policy gradient (GRPO: advantage = (score - group mean) / group std, PPO-clipped
importance ratio against the batch's `inference_logprobs`). The policy (`benchmarks/rlef_policy.py`)
is served on loopback in stock vLLM's token wire format and shares its one parameter with the trainer
(as a colocated trainer shares weights with its vLLM): theta, the logit of using the feedback.

The trainer reads the decision from the tokens only: the first token of every trained span after the
first (a repair turn) is `yes` (use the feedback) or `no` (resample); rewards, masks and logprobs are
the batches'. Arms, same budget each (steps x batch episodes): feedback `real`, `random`, `none`, and
`real` with rewards shuffled across the batch's episodes (a control that must learn nothing).

Evaluation is the env's own `evaluate` on the held-out problems (the last half of the file; nothing
is tuned on them): solve rate after k turns under each feedback mode, and the RLEF baseline,
independent resampling with the same budget of 3 samples (best by public tests). Before = the start,
P(use) = 0.1 (the RLEF lecture's: repair no better than resampling); after = the arm's trained theta, evaluated under the arm's own feedback mode.
Writes out/learn/rlef_learning.{md,json,png} (or --out); --update-results writes the committed
benchmarks/results/ instead.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import io
import json
import math
import os
import random
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.rlef_policy import PolicyServer, RepairPolicy, write_problems  # noqa: E402

ENV = ROOT / "environments" / "code_repair_env.py"
RESULTS = ROOT / "benchmarks" / "results"


@dataclass(frozen=True)
class Arm:
    name: str
    feedback: str
    shuffle: bool = False


ARMS = (Arm("real", "real"), Arm("random", "random"), Arm("none", "none"), Arm("real-shuffled", "real", True))


@dataclass
class Settings:
    problems: int = 96  # the last half held out for evaluation
    eval_fraction: float = 0.5
    group_size: int = 8
    groups_per_step: int = 4
    steps: int = 12
    lr: float = 3.0
    p_use_start: float = 0.1  # the lecture's start: repair no better than resampling
    clip: float = 0.2
    seeds: tuple[int, ...] = (0, 1, 2, 3, 4)
    max_tokens: int = 256
    arms: tuple[Arm, ...] = ARMS
    workdir: Path = field(default_factory=lambda: ROOT / "out" / "rlef")

    @property
    def batch_size(self) -> int:
        return self.group_size * self.groups_per_step


def _env() -> dict[str, str]:
    return dict(os.environ, PYTHONPATH=str(ROOT), HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1",
                WANDB_MODE="disabled", TOKENIZERS_PARALLELISM="false")  # fmt: skip


class RunApi:
    """atroposlib's `run-api` on a free loopback port, as its own process."""

    def __init__(self, log: Path) -> None:
        from environments.atropos_runtime.local_model import free_port

        self.url = f"http://127.0.0.1:{free_port()}"
        self.log = log.open("wb")
        exe = Path(sys.executable).with_name("run-api")
        port = self.url.rsplit(":", 1)[1]
        self.proc = subprocess.Popen([str(exe), "--host", "127.0.0.1", "--port", port], stdout=self.log,
                                     stderr=subprocess.STDOUT, env=_env())  # fmt: skip
        deadline = time.monotonic() + 60
        while True:
            try:
                httpx.get(self.url + "/status", timeout=1)
                return
            except httpx.HTTPError:
                if self.proc.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"run-api did not start: {log.read_text()[-2000:]}") from None
                time.sleep(0.1)  # readiness poll of a child process

    def close(self) -> None:
        self.proc.terminate()
        self.proc.wait(timeout=30)
        self.log.close()


def sigmoid(x: float) -> float:
    return 1.0 / (1.0 + math.exp(-x))


def logit(p: float) -> float:
    return math.log(p / (1 - p))


class GRPOTrainer:
    """Pulls batches from run-api and updates theta (the policy's logit of `yes`) by the clipped,
    group-relative policy gradient. Reads only what a trainer receives: tokens, masks, scores,
    inference_logprobs, generation_params, overrides."""

    def __init__(self, policy: RepairPolicy, lr: float, clip: float, shuffle: bool, seed: int) -> None:
        self.policy, self.lr, self.clip, self.shuffle = policy, lr, clip, shuffle
        self.rng = random.Random(f"trainer:{seed}")

    def decisions(
        self, tokens: list[int], masks: list[int], logprobs: list[float]
    ) -> list[tuple[bool, float]]:
        """(used the feedback?, inference logprob) of each repair turn: the first token of every
        trained span after the first (the first span is the first attempt)."""
        starts = [i for i, m in enumerate(masks) if m != -100 and (i == 0 or masks[i - 1] == -100)]
        out = []
        for i in starts[1:]:
            if tokens[i] not in (self.policy.use_id, self.policy.ignore_id):
                raise ValueError(f"repair turn starts with token {tokens[i]}, not a decision token")
            out.append((tokens[i] == self.policy.use_id, logprobs[i]))
        return out

    def step(self, batch: list[dict[str, Any]]) -> dict[str, float]:
        theta = self.policy.theta
        p = sigmoid(theta)
        # a canonical order (by tokens): the batch's arrival order must not change the shuffle or the sums
        seqs = sorted(
            ((g, i) for g in batch for i in range(len(g["scores"]))), key=lambda gi: gi[0]["tokens"][gi[1]]
        )
        scores = [float(g["scores"][i]) for g, i in seqs]
        trained = list(scores)
        if self.shuffle:  # the control: each episode gets another episode's reward
            self.rng.shuffle(trained)
        by_group: dict[int, list[float]] = {}
        for (g, _), s in zip(seqs, trained, strict=True):
            by_group.setdefault(id(g), []).append(s)
        grad, n_dec, n_use, clipped, stale = 0.0, 0, 0, 0, 0.0
        for (g, i), s in zip(seqs, trained, strict=True):
            if float(g.get("generation_params", {}).get("temperature", 1.0)) != 1.0:
                raise ValueError("this trainer expects samples at temperature 1")
            if (g.get("overrides") or [{}] * len(g["scores"]))[i].get("set_advantage_to_zero"):
                continue
            group = by_group[id(g)]
            mean, std = statistics.fmean(group), statistics.pstdev(group)
            adv = (s - mean) / max(std, 1e-8)
            for used, old_lp in self.decisions(g["tokens"][i], g["masks"][i], g["inference_logprobs"][i]):
                n_dec, n_use = n_dec + 1, n_use + used
                new_lp = math.log(p if used else 1 - p)
                ratio = math.exp(new_lp - old_lp)
                stale = max(stale, abs(ratio - 1))  # > 0 only for a sample drawn at an older theta
                if (adv > 0 and ratio > 1 + self.clip) or (adv < 0 and ratio < 1 - self.clip):
                    clipped += 1  # the clipped surrogate has no gradient here
                    continue
                grad += adv * ratio * ((1 - p) if used else -p)  # d log pi / d theta
        self.policy.theta = theta + self.lr * grad / len(seqs)
        return {"p_use": p, "reward": statistics.fmean(scores), "decisions": n_dec,
                "use_share": n_use / n_dec if n_dec else float("nan"), "clipped": clipped,
                "episodes": len(seqs), "staleness": stale}  # fmt: skip


def serve_cmd(
    s: Settings, arm: Arm, seed: int, dataset: Path, tok: Path, api: str, policy_url: str
) -> list[str]:
    return [sys.executable, str(ENV), "serve", "--env.rollout_server_url", api,
            "--env.dataset", str(dataset), "--env.eval_fraction", str(s.eval_fraction),
            "--env.feedback", arm.feedback, "--env.group_size", str(s.group_size),
            "--env.total_steps", str(s.steps), "--env.max_tokens", str(s.max_tokens),
            "--env.max_batches_offpolicy", "1", "--env.steps_per_eval", "0", "--env.seed", str(seed),
            "--env.tokenizer_name", str(tok), "--openai.model_name", "rlef-policy",
            "--openai.base_url", policy_url, "--env.wandb_name", f"rlef_{arm.name}",
            "--env.status_every_s", "600"]  # fmt: skip


def train_arm(s: Settings, arm: Arm, seed: int, server: PolicyServer, dataset: Path, tok: Path) -> list[dict]:
    """One training run: fresh run-api, registered trainer, `serve`, `steps` batches. Returns the
    per-step log (P(use) when the batch was pulled, reward, decisions)."""
    policy = server.policy
    policy.theta = logit(s.p_use_start)
    policy.reseed(f"policy:{arm.name}:{seed}")
    run = s.workdir / f"{arm.name}-s{seed}"
    run.mkdir(parents=True, exist_ok=True)
    api = RunApi(run / "run-api.log")
    log = (run / "serve.log").open("w")
    proc = None
    try:
        body = {"wandb_group": "", "wandb_project": "", "batch_size": s.batch_size, "max_token_len": 4096,
                "checkpoint_dir": "", "save_checkpoint_interval": -1, "starting_step": 0,
                "num_steps": s.steps}  # fmt: skip
        httpx.post(api.url + "/register", json=body, timeout=10).raise_for_status()
        httpx.get(api.url + "/batch", timeout=10).raise_for_status()  # the trainer has started
        cmd = serve_cmd(s, arm, seed, dataset, tok, api.url, server.base_url)
        proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=_env(), cwd=run)
        trainer = GRPOTrainer(policy, s.lr, s.clip, arm.shuffle, seed)
        steps: list[dict] = []
        deadline = time.monotonic() + 900
        while len(steps) < s.steps:
            with policy.lock:  # no sample is drawn between taking a batch and updating on it
                batch = httpx.get(api.url + "/batch", timeout=30).json().get("batch")
                if batch:
                    steps.append(trainer.step(batch))
            if batch:
                continue
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(
                    f"serve stopped after {len(steps)} batches:\n{(run / 'serve.log').read_text()[-3000:]}"
                )
            time.sleep(0.05)  # a trainer polls /batch
        steps.append({"p_use": sigmoid(policy.theta)})  # after the last update
        return steps
    finally:
        if proc is not None:
            proc.terminate()
            proc.wait(timeout=60)
        log.close()
        api.close()


class Evaluator:
    """The env's own evaluation (`CodeRepairEnv.evaluate`, i.e. `code_repair_env.py evaluate`) on the
    held-out problems at temperature 1, run in this process on one env whose sandbox stays warm
    between evaluations (a fresh `evaluate` process per policy costs ~15 s of start-up)."""

    def __init__(self, s: Settings, server: PolicyServer, dataset: Path, tok: Path) -> None:
        from atroposlib.envs.server_handling.server_baseline import APIServerConfig

        from environments.code_repair_env import CodeRepairEnv, CodeRepairEnvConfig

        config = CodeRepairEnvConfig(tokenizer_name=str(tok), wandb_name="rlef_eval", use_wandb=False,
                                     group_size=s.group_size, max_token_length=4096, dataset=str(dataset),
                                     eval_fraction=s.eval_fraction, eval_temperature=1.0,
                                     max_tokens=s.max_tokens, seed=0)  # fmt: skip
        api = APIServerConfig(server_type="vllm", model_name="rlef-policy", base_url=server.base_url,
                              api_key="x", tokenizer_name=str(tok), timeout=120, health_check=False)  # fmt: skip
        self.s, self.server, self.env = s, server, CodeRepairEnv(config, [api])

    @property
    def episodes(self) -> int:
        """Episodes per feedback mode in one evaluation (one per held-out problem)."""
        return len(self.env.eval_items)

    async def __aenter__(self) -> Evaluator:
        await self.env.setup()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.env.aclose()  # pools, watcher and HTTP sessions (no "Unclosed client session")

    async def __call__(self, theta: float, seed: int, tag: str) -> dict[str, float]:
        """{"<mode>/solve@k": rate} for real, none, random and resample, the policy at `theta`."""
        self.server.policy.theta = theta
        self.server.policy.reseed(f"eval:{tag}:{seed}")
        self.env.config.data_dir_to_save_evals = str(self.s.workdir / f"eval-{tag}-s{seed}")
        with contextlib.redirect_stdout(io.StringIO()):  # its table; the numbers come back here
            metrics = await self.env.evaluate()
        return {
            k.removeprefix("eval/"): float(v)
            for k, v in metrics.items()
            if "solve@" in k or "unverified" in k
        }


async def run(s: Settings) -> dict[str, Any]:
    from transformers import AutoTokenizer

    from environments.atropos_runtime.local_model import build_tiny_model

    s.workdir.mkdir(parents=True, exist_ok=True)
    tok = build_tiny_model(ROOT / ".cache" / "tiny-model")
    dataset = write_problems(s.workdir / "problems.jsonl", s.problems)
    policy = RepairPolicy(AutoTokenizer.from_pretrained(str(tok)))
    result: dict[str, Any] = {"settings": {k: v for k, v in vars(s).items() if k not in ("workdir", "arms")},
                              "arms": [a.name for a in s.arms], "seeds": {}}  # fmt: skip
    start = time.time()
    with PolicyServer(policy) as server:
        async with Evaluator(s, server, dataset, tok) as evaluate:
            for seed in s.seeds:
                runs: dict[str, Any] = {"before": await evaluate(logit(s.p_use_start), seed, "before")}
                for arm in s.arms:
                    t0 = time.time()
                    steps = await asyncio.to_thread(train_arm, s, arm, seed, server, dataset, tok)
                    after = await evaluate(policy.theta, seed, arm.name)
                    runs[arm.name] = {"steps": steps, "theta": policy.theta, "after": after,
                                      "seconds": round(time.time() - t0, 1)}  # fmt: skip
                    mode = arm.feedback
                    print(f"seed {seed} {arm.name:14s} P(use) {steps[0]['p_use']:.2f} -> {steps[-1]['p_use']:.2f}"
                          f"  solve@3 {runs['before'][f'{mode}/solve@3']:.3f} -> {after[f'{mode}/solve@3']:.3f}"
                          f"  ({time.time() - t0:.0f} s)", flush=True)  # fmt: skip
                result["seeds"][str(seed)] = runs
    result["eval_episodes"] = evaluate.episodes
    result["seconds"] = round(time.time() - start, 1)
    result["date"] = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    result["load_avg"] = os.getloadavg()
    return result


def wilson(rate: float, n: int, z: float = 1.96) -> tuple[float, float]:
    """95% Wilson score interval of a success rate measured on `n` independent episodes."""
    if n <= 0:
        return (float("nan"), float("nan"))
    centre = (rate + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(rate * (1 - rate) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return (max(0.0, centre - half), min(1.0, centre + half))


@dataclass(frozen=True)
class Rate:
    """A solve rate pooled over evaluations: mean and its 95% interval over `n` episodes."""

    mean: float
    n: int

    @classmethod
    def pool(cls, rates: list[float], per_eval: int) -> Rate:
        return cls(statistics.fmean(rates), per_eval * len(rates))

    @property
    def interval(self) -> tuple[float, float]:
        return wilson(self.mean, self.n)

    def minus(self, other: Rate) -> tuple[float, float, float]:
        """(difference, 95% interval) of two independent rates (normal approximation)."""
        d = self.mean - other.mean
        se = math.sqrt(self.mean * (1 - self.mean) / self.n + other.mean * (1 - other.mean) / other.n)
        return d, d - 1.96 * se, d + 1.96 * se

    def cell(self) -> str:
        lo, hi = self.interval
        return f"{self.mean:.3f} [{lo:.2f}, {hi:.2f}]"


def summary(result: dict[str, Any]) -> list[dict[str, Any]]:
    """One row per arm (plus resampling): solve@3 before / after pooled over seeds (`Rate`, Wilson
    95% intervals over all held-out episodes), the change with its interval, P(use) after per seed."""
    seeds, per_eval = list(result["seeds"].values()), int(result["eval_episodes"])
    feedback = {a.name: a.feedback for a in ARMS}
    rows = []
    for name in result["arms"]:
        mode = feedback[name]
        before = Rate.pool([r["before"][f"{mode}/solve@3"] for r in seeds], per_eval)
        after = Rate.pool([r[name]["after"][f"{mode}/solve@3"] for r in seeds], per_eval)
        shown_random = Rate.pool([r[name]["after"]["random/solve@3"] for r in seeds], per_eval)
        p = [r[name]["steps"][-1]["p_use"] for r in seeds]
        rows.append({"arm": name, "feedback": mode, "before": before, "after": after,
                     "change": after.minus(before), "shown_random": shown_random, "p_use": p})  # fmt: skip
    resample = [r["before"]["resample/solve@3"] for r in seeds]
    resample += [r[name]["after"]["resample/solve@3"] for r in seeds for name in result["arms"]]
    pooled = Rate.pool(resample, per_eval)
    rows.append({"arm": "resample (3 samples)", "feedback": "-", "before": pooled, "after": pooled,
                 "change": None, "shown_random": None, "p_use": None})  # fmt: skip
    return rows


def _spread(values: list[float] | None) -> str:
    if not values:
        return "-"
    if len(values) == 1:
        return f"{values[0]:.3f}"
    return f"{statistics.fmean(values):.3f} ({min(values):.2f}..{max(values):.2f})"


def _change(change: tuple[float, float, float] | None) -> str:
    return "-" if change is None else f"{change[0]:+.3f} [{change[1]:+.2f}, {change[2]:+.2f}]"


HOW = [
    "## What runs",
    "",
    "* `environments/code_repair_env.py serve` (3 turns, public-test feedback from the real sandbox, reward "
    "= private tests of the last attempt) sends scored groups to atroposlib's `run-api`; the trainer in "
    "`benchmarks/rlef_learn.py` registers, pulls `/batch` and updates the policy (GRPO: advantage = (score - "
    "group mean) / group std, PPO-clipped ratio against the batches' `inference_logprobs`).",
    "* The policy (`benchmarks/rlef_policy.py`) is served on loopback in stock vLLM's `/v1/completions` "
    "token format. Its first attempt is a program from a per-problem family (correct, or a bug for each subset "
    "of the three input classes the public tests cover). On a repair turn its first token is `yes` (use the "
    "feedback: change the previous program on the input the feedback names) with probability sigmoid(theta), "
    "else `no` (a fresh attempt). theta is the one learned parameter; the trainer finds the decisions in the "
    "batches' tokens (first token of each trained span after the first), never through a side channel.",
    "* Arms differ only in `--env.feedback` (real / random / none) or, for the control, in the trainer "
    "shuffling rewards across the batch's episodes. Same budget per arm. Evaluation is the env's own "
    "`evaluate` (its RLEF table) on held-out problems at temperature 1. lr and steps were set from a "
    "look at the training-side P(use) curves of seeds 0-3 (from P(use) = 0.1, lr 1.5 had not converged "
    "in 8 steps; lr 3 converges in about 10), never at evaluation numbers.",
    "* Random feedback has real feedback's exact form: a uniformly chosen public test (failing or not), "
    "its real input and expected output and the attempt's real output on it, under a 'wrong answer' verdict. "
    "The policy cannot tell it from real feedback; only the training signal can.",
    "* Reproducible: the policy's randomness is keyed by (seed, context, occurrence), random feedback by "
    "(seed, problem, turn, attempt); the trainer orders each batch by tokens before shuffling or summing; "
    "serve keeps at most one batch of groups queued or in flight and the trainer takes a batch and updates "
    "under the policy's lock, so every batch is sampled by the policy it updates (staleness 0).",
    "* Expected shape (the RLEF lecture): at P(use) = 0.1 repair is no better than resampling; with real "
    "feedback the policy learns to use it and rises clearly above independent resampling at the same "
    "budget; random feedback carries no information (using it breaks as much as it fixes), so P(use) "
    "stays low; with no feedback using it only resubmits, so P(use) falls; shuffled rewards teach nothing.",
]


def write_results(result: dict[str, Any], out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    (out / "rlef_learning.json").write_text(json.dumps(result, indent=1))
    st, n_seeds, per_eval = result["settings"], len(result["seeds"]), result["eval_episodes"]
    seeds_text = "one seed" if n_seeds == 1 else f"{n_seeds} seeds"
    stale = max(step.get("staleness", 0.0) for r in result["seeds"].values() for a in result["arms"]
                for step in r[a]["steps"])  # fmt: skip
    lines = [
        "# RLEF learning experiment (`make learn`, `benchmarks/rlef_learn.py`)",
        "",
        f"{result['date']}, load average {', '.join(f'{x:.1f}' for x in result['load_avg'])}, "
        f"{result['seconds']:.0f} s in all. Seeds {', '.join(result['seeds'])}; per arm and seed "
        f"{st['steps']} steps x {st['group_size'] * st['groups_per_step']} episodes "
        f"({st['groups_per_step']} groups of {st['group_size']}), lr {st['lr']}, clip {st['clip']}, "
        f"starting at P(use feedback) = {st['p_use_start']}; {st['problems']} problems, the last "
        f"{st['eval_fraction']:.0%} held out for evaluation ({per_eval} episodes per mode per evaluation). "
        f"Largest |importance ratio - 1| at any update: {stale:.2g} (0: every sample was drawn by the "
        "policy being updated; `staleness` per step in the JSON). The same seed reproduces every number.",
        "",
        f"Solve rate within 3 turns on the held-out problems, pooled over {seeds_text} "
        f"({per_eval * n_seeds} episodes per cell), with Wilson 95% intervals; the change after - before "
        "with a normal-approximation 95% interval. Before: the untrained policy "
        f"(P(use) = {st['p_use_start']}); after: the arm's trained policy, evaluated under its own "
        "feedback. Resampling: 3 independent first attempts, best by public tests (same budget; it does "
        "not depend on P(use), so every evaluation pools into its row). 'Shown random feedback': the "
        "trained policy evaluated with random feedback instead (the lecture's check that it reads the "
        "feedback). P(use) after: mean (min..max) over seeds.",
        "",
        "| arm | feedback | solve@3 before | solve@3 after | change | after, shown random feedback | P(use) after |",
        "|---|---|---|---|---|---|---|",
    ]
    for row in summary(result):
        shown = row["shown_random"].cell() if row["shown_random"] else "-"
        lines.append(f"| {row['arm']} | {row['feedback']} | {row['before'].cell()} | {row['after'].cell()} | "
                     f"{_change(row['change'])} | {shown} | {_spread(row['p_use'])} |")  # fmt: skip
    lines += ["", "Per seed: P(use) after training and solve@3 after (own feedback mode); seconds per arm "
              "(training + evaluation).", "", "| seed | " + " | ".join(result["arms"]) + " |",
              "|---|" + "---|" * len(result["arms"])]  # fmt: skip
    feedback = {a.name: a.feedback for a in ARMS}
    for seed, runs in result["seeds"].items():
        cells = [f"{runs[a]['steps'][-1]['p_use']:.2f} / {runs[a]['after'][f'{feedback[a]}/solve@3']:.3f} "
                 f"({runs[a]['seconds']:.0f} s)" for a in result["arms"]]  # fmt: skip
        lines.append(f"| {seed} | " + " | ".join(cells) + " |")
    lines += ["", "![P(use) over steps and solve@3](rlef_learning.png)", "", *HOW]
    (out / "rlef_learning.md").write_text("\n".join(lines) + "\n")
    plot(result, out / "rlef_learning.png")


def plot(result: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4))
    colors = {"real": "tab:green", "random": "tab:orange", "none": "tab:gray", "real-shuffled": "tab:purple"}
    n_seeds = len(result["seeds"])
    for name in result["arms"]:
        curves = [[s["p_use"] for s in r[name]["steps"]] for r in result["seeds"].values()]
        for i, curve in enumerate(curves):
            left.plot(
                range(len(curve)), curve, color=colors.get(name), alpha=0.8, label=name if i == 0 else None
            )
    seeds_text = "one seed" if n_seeds == 1 else f"each of {n_seeds} seeds"
    left.set(
        xlabel="training step", ylabel="P(use feedback)", ylim=(0, 1), title=f"learned P(use), {seeds_text}"
    )
    left.legend()
    *rows, resample = summary(result)
    for k, key in enumerate(("before", "after")):
        means = [r[key].mean for r in rows]
        lo = [m - r[key].interval[0] for m, r in zip(means, rows, strict=True)]
        hi = [r[key].interval[1] - m for m, r in zip(means, rows, strict=True)]
        xs = [i + (k - 0.5) * 0.38 for i in range(len(rows))]
        right.bar(xs, means, width=0.38, yerr=[lo, hi], capsize=3, label=key, alpha=0.85)
    base = resample["after"]
    right.axhline(base.mean, color="black", linestyle="--", label="resample, 3 samples")
    right.axhspan(*base.interval, color="black", alpha=0.08)
    right.set_xticks(range(len(rows)), [f"{r['arm']}\n({r['feedback']} feedback)" for r in rows], fontsize=8)
    n = rows[0]["after"].n
    right.set(ylabel="solve@3 (held-out)", ylim=(0, 1),
              title=f"solved within 3 turns ({n} episodes per bar, 95% intervals)")  # fmt: skip
    right.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="one seed, 8 steps")
    parser.add_argument("--seeds", type=int, nargs="+", default=None)
    parser.add_argument("--steps", type=int, default=None)
    parser.add_argument("--out", type=Path, help="output folder (default out/learn)")
    parser.add_argument(
        "--update-results", action="store_true", help=f"write the committed results in {RESULTS} instead"
    )
    parser.add_argument("--from-json", type=Path, help="rewrite the table and plot from a results JSON")
    args = parser.parse_args(argv)
    args.out = args.out or (RESULTS if args.update_results else Path("out") / "learn")
    args.out.mkdir(parents=True, exist_ok=True)
    if args.from_json:
        write_results(json.loads(args.from_json.read_text()), args.out)
        return
    s = Settings()
    if args.quick:
        s.seeds, s.steps = (0,), 8
    if args.seeds is not None:
        s.seeds = tuple(args.seeds)
    if args.steps is not None:
        s.steps = args.steps
    result = asyncio.run(run(s))
    write_results(result, args.out)
    print((args.out / "rlef_learning.md").read_text())


if __name__ == "__main__":
    main()
