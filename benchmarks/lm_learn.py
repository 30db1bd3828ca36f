"""A real language model learns through the real stack: GRPO on SmolLM2-135M-Instruct, 2 CPU cores.

    make learn-lm                               # 2 seeds + a shuffled-reward control; out/learn-lm/
    python benchmarks/lm_learn.py --quick       # one seed, fewer steps (a smoke run)
    python benchmarks/lm_learn.py --update-results   # rewrite benchmarks/results/lm_learning.*

The stack: `math_env.py serve` (one-digit sums "Calculate 6 + 10.", the env's own system prompt
asking for the answer in \\boxed{}) samples from a local vLLM serving the model with a LoRA adapter
named `policy`; atroposlib's `run-api` queues the scored groups; this script is the trainer. It pulls
`/batch` and updates a peft LoRA (rank 16 on q/k/v/o) with the clipped GRPO surrogate on the batch's
own tokens, masks and scores: advantages are group-normalised scores, the importance ratio is the
trainer's recomputed logprob (at the batch's temperature) against the batch's `inference_logprobs`,
token-level loss, plus a KL penalty toward the base model (k3 estimate; the base is the same model with
the adapter switched off). After each step the adapter is saved and loaded into vLLM in place (a few
seconds at most), so the next groups sample from it. Per step: reward, share boxed, share correct, ratio
statistics (mean and max |log ratio| before the update, share of tokens clipped), and staleness: a
sequence whose recomputed logprobs match the batch's to within 1e-3 nats was sampled by the current
adapter (the stack agrees to ~1e-5, `real_model_stack.md`); others by an older one.
KL(policy || base) per token and the sampled tokens' mean negative logprob (an entropy estimate)
show a policy drifting or collapsing.

Evaluation: the env's own `evaluate` on 200 held-out problems (reasoning-gym's eval seed; no eval
problem is in the training split), greedy, before training and after each run. Correct (reward 1)
and boxed (a `\\boxed{}` anywhere in the answer) are reported apart, so a run that only learned to box
shows as such. 95% intervals: bootstrap over the 200 problems (paired for gains). The control trains
on rewards permuted across the batch's samples: it must not improve beyond its interval.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import signal
import subprocess
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import httpx

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.trainer_client import register_trainer, start_run_api  # noqa: E402

RESULTS = ROOT / "benchmarks" / "results"
ENV = ROOT / "environments" / "math_env.py"
ADAPTER = "policy"
FRESH = 1e-3  # nats: a sequence within this of the current adapter's logprobs was sampled by it


@dataclass
class Settings:
    steps: int = 12
    group_size: int = 8
    groups_per_step: int = 3
    lr: float = 1e-3
    clip: float = 0.2
    # beta of a k3 KL penalty toward the base model (the adapter switched off): without it the
    # shuffled control collapsed onto wrong terse answers (greedy 0.515 -> 0.275 at lr 1e-3 and 2e-3);
    # at 0.2 one control run held (-0.020) and a rerun fell (-0.155); at 1.0 two control runs held
    kl_coef: float = 1.0
    rank: int = 16
    max_tokens: int = 96
    temperature: float = 1.0
    seeds: tuple[int, ...] = (0, 1)
    control_seeds: tuple[int, ...] = (0,)
    eval_items: int = 200
    micro_batch: int = 8
    # sampling (vLLM) and training overlap (serve samples the next batch while this one trains): on 2
    # cores each gets its own, as two 2-thread OpenMP pools on 2 cores slow each other ~5x
    train_threads: int = 1
    workdir: Path = field(default_factory=lambda: ROOT / "out" / "learn-lm")

    @property
    def batch_size(self) -> int:
        return self.group_size * self.groups_per_step


def task_flags(s: Settings) -> list[str]:
    from environments.atropos_runtime.demo import ONE_DIGIT_SUMS

    return ["--env.rg_tasks", "basic_arithmetic", "--env.rg_config", json.dumps(ONE_DIGIT_SUMS),
            "--env.rg_eval_size", str(s.eval_items), "--env.max_tokens", str(s.max_tokens)]  # fmt: skip


def _env() -> dict[str, str]:
    return dict(os.environ, PYTHONPATH=str(ROOT), HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1",
                WANDB_MODE="disabled", TOKENIZERS_PARALLELISM="false")  # fmt: skip


# ----------------------------------------------------------------------------- the policy


class Policy:
    """The trainer's copy of the model: the base weights frozen, a LoRA adapter trained."""

    def __init__(self, model_dir: Path, s: Settings, seed: int) -> None:
        import torch
        from peft import LoraConfig, get_peft_model
        from transformers import AutoModelForCausalLM

        torch.manual_seed(seed)
        torch.set_num_threads(s.train_threads)
        base = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
        config = LoraConfig(r=s.rank, lora_alpha=2 * s.rank, lora_dropout=0.0, bias="none",
                            target_modules=["q_proj", "k_proj", "v_proj", "o_proj"])  # fmt: skip
        self.model = get_peft_model(base, config)  # lora_B starts at 0: the adapter is the base model
        self.params = [p for p in self.model.parameters() if p.requires_grad]
        self.opt = torch.optim.AdamW(self.params, lr=s.lr, weight_decay=0.0)
        self.s = s

    def save(self, folder: Path) -> Path:
        self.model.save_pretrained(folder)
        return folder

    def merged(self, folder: Path, model_dir: Path) -> Path:
        """The base model with the adapter merged in, as a full checkpoint (for evaluation)."""
        import copy
        import shutil

        copy.deepcopy(self.model).merge_and_unload().save_pretrained(folder)
        for name in (
            "tokenizer.json",
            "tokenizer_config.json",
            "chat_template.jinja",
            "generation_config.json",
        ):
            if (model_dir / name).exists():
                shutil.copy(model_dir / name, folder / name)
        return folder

    def token_logprobs(
        self, seqs: list[list[int]], temperature: float, positions: list[list[int]] | None = None
    ) -> list[Any]:
        """Per sequence, a tensor of log p(token_i | tokens_<i) at `temperature` for each i in its
        `positions` (default: every i >= 1), graph kept for backward. The 49k-wide head runs only on
        the positions asked for (the trained tokens): a fifth of a forward pass saved on prompts."""
        import torch

        positions = positions or [list(range(1, len(q))) for q in seqs]
        width = max(map(len, seqs))
        ids = torch.tensor([q + [0] * (width - len(q)) for q in seqs])
        attention = torch.tensor([[1] * len(q) + [0] * (width - len(q)) for q in seqs])
        inner = self.model.get_base_model()  # the causal LM, its attention layers carrying the adapter
        hidden = inner.model(input_ids=ids, attention_mask=attention).last_hidden_state
        out = []
        for row, (q, where) in enumerate(zip(seqs, positions, strict=True)):
            at = torch.tensor(where)
            logits = inner.lm_head(hidden[row, at - 1]).float() / temperature
            out.append(
                torch.log_softmax(logits, dim=-1)
                .gather(1, torch.tensor([q[i] for i in where]).unsqueeze(1))
                .squeeze(1)
            )
        return out

    def step(self, batch: list[dict], shuffle: random.Random | None) -> dict[str, float]:
        """One clipped GRPO update on a run-api batch; the step's statistics."""
        import torch

        rows = [(g, i) for g in batch for i in range(len(g["tokens"]))]
        scores = [float(g["scores"][i]) for g, i in rows]
        trained = list(scores)
        if shuffle is not None:  # the control: every sample gets another sample's reward
            shuffle.shuffle(trained)
        by_group: dict[int, list[float]] = {}
        for (g, _), r in zip(rows, trained, strict=True):
            by_group.setdefault(id(g), []).append(r)
        advantages = []
        for (g, i), r in zip(rows, trained, strict=True):
            group = torch.tensor(by_group[id(g)])
            zero = (g.get("overrides") or [{}] * len(g["tokens"]))[i].get("set_advantage_to_zero")
            std = float(group.std(unbiased=False))
            advantages.append(0.0 if zero or std < 1e-8 else (r - float(group.mean())) / std)
        temperature = float(batch[0]["generation_params"]["temperature"])
        n_tokens = sum(sum(m != -100 for m in g["masks"][i]) for g, i in rows)
        stats = dict.fromkeys(("abs_log_ratio", "max_abs_log_ratio", "clipped", "fresh", "nll", "kl"), 0.0)
        self.opt.zero_grad()
        for start in range(0, len(rows), self.s.micro_batch):
            chunk = rows[start : start + self.s.micro_batch]
            where = [[k for k, m in enumerate(g["masks"][i]) if m != -100 and k > 0] for g, i in chunk]
            seqs = [g["tokens"][i] for g, i in chunk]
            new = self.token_logprobs(seqs, temperature, where)
            with torch.no_grad(), self.model.disable_adapter():
                base = self.token_logprobs(seqs, temperature, where)
            loss = torch.zeros(())
            for (g, i), at, lp, ref, adv in zip(
                chunk, where, new, base, advantages[start : start + len(chunk)], strict=True
            ):
                old = torch.tensor([g["inference_logprobs"][i][k] for k in at])
                log_ratio = lp - old
                ratio = torch.exp(log_ratio)
                surrogate = torch.minimum(
                    ratio * adv, torch.clamp(ratio, 1 - self.s.clip, 1 + self.s.clip) * adv
                )
                to_base = ref - lp  # k3 below: an unbiased, non-negative estimate of KL(policy || base)
                kl = torch.exp(to_base) - to_base - 1
                loss = loss - (surrogate.sum() - self.s.kl_coef * kl.sum()) / n_tokens
                stats["kl"] += float(kl.detach().sum())
                delta = log_ratio.detach().abs()
                stats["abs_log_ratio"] += float(delta.sum())
                stats["max_abs_log_ratio"] = max(stats["max_abs_log_ratio"], float(delta.max()))
                stats["clipped"] += int(((ratio - 1).abs() > self.s.clip).sum())
                stats["fresh"] += bool(delta.max() < FRESH)
                stats["nll"] -= float(old.sum())
            loss.backward()
        torch.nn.utils.clip_grad_norm_(self.params, 1.0)
        self.opt.step()
        return {
            "reward": sum(scores) / len(scores),
            "correct": sum(r >= 1.0 for r in scores) / len(scores),
            "boxed": sum(
                "\\boxed{" in (g.get("messages") or [[{}]] * len(g["tokens"]))[i][-1].get("content", "")
                for g, i in rows
            )
            / len(rows),
            "samples": len(rows),
            "tokens": n_tokens,
            "mean_abs_log_ratio": stats["abs_log_ratio"] / n_tokens,
            "max_abs_log_ratio": stats["max_abs_log_ratio"],
            "clipped_share": stats["clipped"] / n_tokens,
            "fresh_share": stats["fresh"] / len(rows),
            # -mean sampled-token logprob at the sampling temperature: an estimate of the policy's
            # per-token entropy (a policy collapsing onto one answer form drives it toward 0)
            "sampled_nll": stats["nll"] / n_tokens,
            "kl_to_base": stats["kl"] / n_tokens,
        }


# ----------------------------------------------------------------------------- inference + env


class Sampler:
    """vLLM serving the base model with the adapter `policy`, updated in place after each step."""

    def __init__(self, model_dir: Path, s: Settings, log: Path) -> None:
        from environments.atropos_runtime.local_model import VLLMServer

        os.environ["VLLM_ALLOW_RUNTIME_LORA_UPDATING"] = "True"
        if (os.cpu_count() or 1) > s.train_threads:  # sampling on core 0, training beside it
            os.environ.setdefault("VLLM_CPU_OMP_THREADS_BIND", "0")
        self.server = VLLMServer(model_dir, log_path=log, extra_args=[
            "--enable-lora", "--max-lora-rank", str(s.rank), "--max-loras", "1"]).start()  # fmt: skip
        self.root = self.server.base_url.rsplit("/v1", 1)[0]

    def load(self, folder: Path) -> float:
        """Load (or replace in place) the adapter; seconds it took."""
        started = time.monotonic()
        loaded = {m["id"] for m in httpx.get(self.server.base_url + "/models", timeout=30).json()["data"]}
        body = {"lora_name": ADAPTER, "lora_path": str(folder), "load_inplace": ADAPTER in loaded}
        response = httpx.post(self.root + "/v1/load_lora_adapter", json=body, timeout=120)
        if response.status_code != 200:
            raise RuntimeError(f"vLLM refused the adapter: {response.status_code} {response.text[:300]}")
        return time.monotonic() - started

    def close(self) -> None:
        self.server.stop()


def serve_command(s: Settings, model_dir: Path, base_url: str, api: str, seed: int) -> list[str]:
    return [sys.executable, str(ENV), "serve", *task_flags(s), "--env.rollout_server_url", api,
            "--env.group_size", str(s.group_size), "--env.total_steps", str(s.steps),
            "--env.temperature", str(s.temperature), "--env.max_batches_offpolicy", "1",
            "--env.include_messages", "true", "--env.seed", str(seed), "--env.status_every_s", "600",
            "--env.tokenizer_name", str(model_dir), "--openai.model_name", ADAPTER,
            "--openai.base_url", base_url]  # fmt: skip


def evaluate(s: Settings, checkpoint: Path, out: Path) -> list[dict]:
    """The env's `evaluate` (greedy, held-out problems) on a full checkpoint served by its own vLLM
    (both cores, no adapter: vLLM's CPU LoRA path samples ~5x slower); per problem, correct and
    boxed."""
    from environments.atropos_runtime.local_model import VLLMServer

    with VLLMServer(checkpoint, log_path=out.with_name(out.name + "-vllm.log")) as server:
        cmd = [sys.executable, str(ENV), "evaluate", *task_flags(s), "--env.data_dir_to_save_evals", str(out),
               "--env.tokenizer_name", str(checkpoint), "--openai.model_name", str(checkpoint),
               "--openai.base_url", server.base_url]  # fmt: skip
        done = subprocess.run(cmd, capture_output=True, text=True, env=_env(), cwd=ROOT)
    if done.returncode != 0:
        raise RuntimeError(f"evaluate failed:\n{done.stderr[-3000:]}")
    rows = [json.loads(line) for line in (out / "samples.jsonl").read_text().splitlines() if line.strip()]
    return [{"uid": r["uid"], "correct": bool(r["correct"]), "boxed": "\\boxed{" in r["messages"][-1]["content"]}
            for r in sorted(rows, key=lambda r: r["uid"])]  # fmt: skip


def train_run(s: Settings, model_dir: Path, sampler: Sampler, seed: int, shuffled: bool, say) -> dict:
    """One run: a fresh adapter, `s.steps` GRPO steps through serve -> run-api, then evaluation."""
    name = f"{'shuffled' if shuffled else 'grpo'}-s{seed}"
    run = s.workdir / name
    run.mkdir(parents=True, exist_ok=True)
    policy = Policy(model_dir, s, seed)
    sampler.load(policy.save(run / "adapter-0"))
    api_proc, api = start_run_api(run / "run-api.log")
    log = (run / "serve.log").open("w")
    proc = None
    steps: list[dict] = []
    try:
        register_trainer(api, s.batch_size, max_token_len=2048, steps=s.steps)
        proc = subprocess.Popen(serve_command(s, model_dir, sampler.server.base_url, api, seed), stdout=log,
                                stderr=subprocess.STDOUT, env=_env(), cwd=ROOT)  # fmt: skip
        rng = random.Random(f"shuffle:{seed}") if shuffled else None
        deadline, waited = time.monotonic() + 1800, time.monotonic()
        while len(steps) < s.steps:
            batch = httpx.get(api + "/batch", timeout=60).json().get("batch")
            if not batch:
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(
                        f"serve stopped after {len(steps)} steps:\n{(run / 'serve.log').read_text()[-3000:]}"
                    )
                time.sleep(0.2)  # a trainer polls /batch
                continue
            started = time.monotonic()
            stats = policy.step(batch, rng)
            stats["load_s"] = sampler.load(policy.save(run / "adapter"))
            stats.update(step=len(steps) + 1, wait_s=started - waited, train_s=time.monotonic() - started)
            waited = time.monotonic()
            steps.append(stats)
            say(f"{name} step {stats['step']:>2}/{s.steps}: reward {stats['reward']:.2f} correct "
                f"{stats['correct']:.2f} boxed {stats['boxed']:.2f} | |log r| mean {stats['mean_abs_log_ratio']:.1e} "
                f"max {stats['max_abs_log_ratio']:.1e} clipped {stats['clipped_share']:.1%} fresh "
                f"{stats['fresh_share']:.0%} | KL {stats['kl_to_base']:.1e} nll {stats['sampled_nll']:.2f} tokens/sample {stats['tokens'] / stats['samples']:.0f} | wait {stats['wait_s']:.0f}s train {stats['train_s']:.0f}s")  # fmt: skip
    finally:
        if proc is not None:
            proc.terminate()
            proc.wait(timeout=60)
        log.close()
        api_proc.terminate()
        api_proc.wait(timeout=30)
    after = evaluate(s, policy.merged(run / "merged", model_dir), run / "eval")
    return {"name": name, "seed": seed, "shuffled": shuffled, "steps": steps, "after": after}


# ----------------------------------------------------------------------------- statistics + report


def rate(rows: list[dict], key: str) -> float:
    return sum(r[key] for r in rows) / len(rows)


def bootstrap(values: list[float], seed: int = 0, draws: int = 2000) -> tuple[float, float]:
    """95% percentile interval of the mean of `values` (resampled with replacement)."""
    rng = random.Random(seed)
    means = sorted(sum(rng.choices(values, k=len(values))) / len(values) for _ in range(draws))
    return means[int(0.025 * draws)], means[int(0.975 * draws) - 1]


def gain(before: list[dict], after: list[dict], key: str) -> dict[str, Any]:
    """after - before on the same problems, with a paired bootstrap interval."""
    assert [r["uid"] for r in before] == [r["uid"] for r in after]
    diffs = [float(a[key]) - float(b[key]) for a, b in zip(after, before, strict=True)]
    return {"gain": sum(diffs) / len(diffs), "ci": bootstrap(diffs)}


def report(result: dict, out: Path) -> None:
    before = result["before"]
    lines = [
        "# A real language model learns through the real stack (`make learn-lm`)",
        "",
        f"SmolLM2-135M-Instruct, LoRA rank {result['settings']['rank']} on q/k/v/o (AdamW, lr {result['settings']['lr']:g}, KL penalty {result['settings'].get('kl_coef', 0.0):g}), GRPO through `math_env.py serve` → "
        f"atroposlib `run-api` → `benchmarks/lm_learn.py` (the trainer), on 2 CPU cores. Task: one-digit sums "
        f"with the env's own prompt (answer in `\\boxed{{}}`); {result['settings']['steps']} steps × "
        f"{result['settings']['groups_per_step']} groups × {result['settings']['group_size']} samples at temperature "
        f"{result['settings']['temperature']}. Evaluation: {len(before)} held-out problems, greedy; 95% bootstrap "
        f"intervals (paired for gains). Wall time {result['seconds'] / 60:.1f} min.",
        "",
        "| run | correct | boxed | correct gain | boxed gain |",
        "|---|---|---|---|---|",
        f"| before (base) | {rate(before, 'correct'):.3f} {_ci(bootstrap([float(r['correct']) for r in before]))} | "
        f"{rate(before, 'boxed'):.3f} {_ci(bootstrap([float(r['boxed']) for r in before]))} | | |",
    ]
    for run in result["runs"]:
        a = run["after"]
        cg, bg = gain(before, a, "correct"), gain(before, a, "boxed")
        lines.append(f"| {run['name']} | {rate(a, 'correct'):.3f} | {rate(a, 'boxed'):.3f} | "
                     f"{cg['gain']:+.3f} {_ci(cg['ci'])} | {bg['gain']:+.3f} {_ci(bg['ci'])} |")  # fmt: skip
    lines += ["", "Per step (train batches: mean reward, correct and boxed share; |log ratio| of the trained tokens "
              "against the batch's inference logprobs before the update; share of tokens outside the clip range; "
              "share of samples drawn by the current adapter; KL(policy || base) per token (k3 estimate, before the update); "
              "mean negative logprob of the sampled tokens, an estimate of "
              "the policy's entropy per token; mean trained tokens per sample):", ""]  # fmt: skip
    for run in result["runs"]:
        lines += [f"**{run['name']}**", "", "| step | reward | correct | boxed | mean abs log r | max abs log r | clipped | fresh | KL to base | nll | tokens | train s |",
                  "|---|---|---|---|---|---|---|---|---|---|---|---|"]  # fmt: skip
        for st in run["steps"]:
            lines.append(f"| {st['step']} | {st['reward']:.2f} | {st['correct']:.2f} | {st['boxed']:.2f} | "
                         f"{st['mean_abs_log_ratio']:.1e} | {st['max_abs_log_ratio']:.1e} | {st['clipped_share']:.1%} | "
                         f"{st['fresh_share']:.0%} | {st.get('kl_to_base', float('nan')):.1e} | {st.get('sampled_nll', float('nan')):.2f} | "
                         f"{st['tokens'] / st['samples']:.0f} | {st['train_s']:.0f} |")  # fmt: skip
        lines.append("")
    out.mkdir(parents=True, exist_ok=True)
    plot(result, out / "lm_learning.png")
    lines.insert(2, "![per-step reward and held-out accuracy](lm_learning.png)\n")
    (out / "lm_learning.md").write_text("\n".join(lines) + "\n")
    (out / "lm_learning.json").write_text(json.dumps(result, indent=1, default=str) + "\n")


def plot(result: dict, path: Path) -> None:
    """Left: each run's train reward per step; right: held-out correct and boxed, before and after."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4))
    for run in result["runs"]:
        steps = [st["step"] for st in run["steps"]]
        left.plot(steps, [st["correct"] for st in run["steps"]], marker="o", label=f"{run['name']} correct")
        left.plot(steps, [st["boxed"] for st in run["steps"]], linestyle=":", label=f"{run['name']} boxed")
    left.set(xlabel="step", ylabel="share of the step's samples", ylim=(0, 1),
             title="train batches (serve sends only groups with mixed scores)")  # fmt: skip
    left.legend(fontsize=7)
    names = ["before", *[run["name"] for run in result["runs"]]]
    evals = [result["before"], *[run["after"] for run in result["runs"]]]
    x = range(len(names))
    for offset, key in ((-0.2, "correct"), (0.2, "boxed")):
        values = [rate(e, key) for e in evals]
        cis = [bootstrap([float(r[key]) for r in e]) for e in evals]
        errors = [
            [v - lo for v, (lo, _) in zip(values, cis, strict=True)],
            [hi - v for v, (_, hi) in zip(values, cis, strict=True)],
        ]
        right.bar([i + offset for i in x], values, width=0.4, yerr=errors, capsize=3, label=key)
    right.set_xticks(list(x), names, fontsize=8)
    right.set(ylabel="share of held-out problems", title=f"held-out, greedy, n={len(result['before'])} (95% CI)",
              ylim=(0, 1))  # fmt: skip
    right.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def _ci(ci: tuple[float, float]) -> str:
    return f"[{ci[0]:+.3f}, {ci[1]:+.3f}]" if ci[0] < 0 else f"[{ci[0]:.3f}, {ci[1]:.3f}]"


def _seeds(text: str) -> tuple[int, ...]:
    return tuple(int(part) for part in text.split(",") if part.strip())


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--quick", action="store_true", help="one seed, 6 steps, no control")
    p.add_argument("--steps", type=int)
    p.add_argument("--lr", type=float, help=f"LoRA learning rate (default {Settings.lr})")
    p.add_argument("--kl", type=float, help=f"KL penalty toward the base model (default {Settings.kl_coef})")
    p.add_argument("--seeds", type=_seeds, help="GRPO runs' seeds, comma-separated ('' for none)")
    p.add_argument("--control-seeds", type=_seeds, help="shuffled-reward runs' seeds ('' for none)")
    p.add_argument("--out", type=Path, help="results folder (default out/learn-lm)")
    p.add_argument("--update-results", action="store_true", help=f"write the committed results in {RESULTS}")
    args = p.parse_args(argv)
    s = Settings()
    if args.quick:
        s.steps, s.seeds, s.control_seeds = 6, (0,), ()
    if args.steps:
        s.steps = args.steps
    if args.lr:
        s.lr = args.lr
    if args.kl is not None:
        s.kl_coef = args.kl
    if args.seeds is not None:
        s.seeds = args.seeds
    if args.control_seeds is not None:
        s.control_seeds = args.control_seeds
    out = args.out or (RESULTS if args.update_results else s.workdir)
    os.environ.update(_env())
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # `finally` stops vLLM (its own session)
    from environments.atropos_runtime.real_model import real_model_path

    def say(line: str) -> None:
        print(line, flush=True)

    started = time.monotonic()
    model_dir = real_model_path()
    s.workdir.mkdir(parents=True, exist_ok=True)
    before = evaluate(s, model_dir, s.workdir / "eval-before")
    say(
        f"before: correct {rate(before, 'correct'):.3f} boxed {rate(before, 'boxed'):.3f} on {len(before)} problems"
    )
    sampler = Sampler(model_dir, s, s.workdir / "vllm.log")
    try:
        # the control first: a control that drifts shows it within minutes, not after the GRPO runs
        runs = [train_run(s, model_dir, sampler, seed, True, say) for seed in s.control_seeds]
        runs = [train_run(s, model_dir, sampler, seed, False, say) for seed in s.seeds] + runs
    finally:
        sampler.close()
    for run in runs:
        say(
            f"{run['name']}: correct {rate(run['after'], 'correct'):.3f} boxed {rate(run['after'], 'boxed'):.3f}"
        )
    settings = {k: (str(v) if isinstance(v, Path) else v) for k, v in asdict(s).items()}
    report({"settings": settings, "before": before, "runs": runs, "seconds": time.monotonic() - started}, out)
    print((out / "lm_learning.md").read_text())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
