"""The environment's own throughput and CPU per rollout, inference out of the way: rlvr-envs vs atroposlib.

An instant inference server (`instant_server.py`: stock vLLM's `/v1/completions` token-id wire format,
streamed where the client streams, every request answered at once with precomputed ids and logprobs)
stands in for vLLM, so the environment process is the limit. Per case, in one run, alternating which
goes first:
  * rlvr-envs: math_env's task (`overhead_envs.py`), single-turn or 3-turn episodes;
  * atroposlib: its own `BaseEnv` loop with `ManagedServer` and its own `VLLMServer` client
    (`atropos_baseline_env.py`), same prompts, same server (which also answers that client's
    `/generate`, in the archived custom server's format);
  * `atroposlib/our-client` (only with `--envs`): the same with rlvr-envs' `VLLMTokenServer` client;
both with group size 8, 64 tokens per turn, and a trivial reward (a constant, inline) or the real
math reward (rlvr-envs: `MathRubric`, math-verify in its CAS worker processes; atroposlib:
math-verify `parse`/`verify` inline, as its gsm8k example does). Modes:
  * serve: a fresh run-api, a trainer (this process) registered with batch 64 polling `/batch`
    every 10 ms; rollouts/s between the first and the last batch received;
  * process: `--env.total_steps` groups written to a JSONL file; rollouts/s over the middle of the
    run (from 10% to 90% of the output file's final size, so start-up and shut-down are left out).
Env CPU = user + system time of the environment process alone (`/proc/PID/stat`, all its threads;
not run-api, not the server, not the trainer), over the same window, per rollout. `server` and
`run-api` are the instant server's and run-api's CPU per rollout over that window: on a 2-core
machine they share the cores with the env, so they bound the rollouts/s either env can reach. `+workers` adds
the env's child processes (the math rubric's CAS workers). `BENCH_ENV_PREFIX` (e.g. `py-spy record
-f raw -o prof.txt --`) runs each env under a profiler (its CPU figures are then the profiler's);
`BENCH_ENV_ARGS` adds options to both envs' command lines.

    python benchmarks/env_overhead_bench.py [--modes serve,process] [--turns 1,3] [--rubrics trivial,math]
        [--rollouts 1024] [--repeats 2]
"""

from __future__ import annotations

import argparse
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "benchmarks")]

from serve_bench import start_run_api  # noqa: E402

GROUP, TOKENS, BATCH = 8, 64, 64
ENVS = ("rlvr-envs", "atroposlib")
OUR_CLIENT = "atroposlib/our-client"
TICK = os.sysconf("SC_CLK_TCK")


def proc_cpu(pid: int) -> float:
    """CPU seconds (user + system, all threads) of one process; 0 once it is gone."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return 0.0
    return (int(fields[11]) + int(fields[12])) / TICK


def descendants(pid: int) -> list[int]:
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        try:
            tids = os.listdir(f"/proc/{p}/task")
        except OSError:
            continue
        for tid in tids:
            try:
                kids = [int(k) for k in Path(f"/proc/{p}/task/{tid}/children").read_text().split()]
            except OSError:
                continue
            out += kids
            todo += kids
    return out


def cpu_pair(pid: int) -> tuple[float, float]:
    """(the process's CPU, its children's CPU), seconds."""
    return proc_cpu(pid), sum(proc_cpu(k) for k in descendants(pid))


@dataclass
class Result:
    rollouts_s: float
    env_ms: float  # env process CPU per rollout
    workers_ms: float  # its child processes' CPU per rollout
    rollouts: int
    server_ms: float = 0.0  # the instant inference server's CPU per rollout
    api_ms: float = 0.0  # run-api's CPU per rollout (serve)


@dataclass
class Case:
    mode: str
    turns: int
    rubric: str

    @property
    def label(self) -> str:
        return f"{self.mode} {self.turns}-turn {self.rubric}"


def env_cmd(which: str, case: Case, server: str, model: str, steps: int, extra: list[str]) -> list[str]:
    common = ["--env.tokenizer_name", model, "--openai.model_name", model, "--openai.base_url", server,
              "--env.group_size", str(GROUP), "--env.total_steps", str(steps),
              "--env.ensure_scores_are_not_same", "false", "--env.use_wandb", "false", *extra]  # fmt: skip
    prefix = os.environ.get("BENCH_ENV_PREFIX", "").split()  # e.g. a profiler: "py-spy record -o x --"
    common += os.environ.get("BENCH_ENV_ARGS", "").split()  # e.g. "--env.max_concurrent_groups 64"
    if which == "rlvr-envs":
        kind = "single" if case.turns == 1 else "multi"
        return [*prefix, sys.executable, str(ROOT / "benchmarks" / "overhead_envs.py"), kind, case.mode, *common,
                "--env.max_tokens", str(TOKENS), "--env.rubric_kind", case.rubric,
                "--env.max_turns", str(case.turns)]  # fmt: skip
    return [*prefix, sys.executable, str(ROOT / "benchmarks" / "atropos_baseline_env.py"), case.mode, *common,
            "--env.max_token_length", str(TOKENS), "--openai.api_key", "x"]  # fmt: skip


def environ(which: str, case: Case) -> dict[str, str]:
    env = dict(os.environ, PYTHONPATH=str(ROOT), WANDB_MODE="disabled", HF_HUB_OFFLINE="1")
    if which != "rlvr-envs":
        env.update(ATROPOS_BASELINE_TURNS=str(case.turns), ATROPOS_BASELINE_RUBRIC=case.rubric)
        if which != OUR_CLIENT:
            env["ATROPOS_BASELINE_CLIENT"] = "atroposlib"
    return env


def stop(*procs: subprocess.Popen | None) -> None:
    """Stop each process, then whatever it started that is still alive (a profiler's child)."""
    for proc in procs:
        kids = descendants(proc.pid) if proc is not None else []
        if proc is not None and proc.poll() is None:
            # a profiler (BENCH_ENV_PREFIX) writes its output on SIGINT, dies without it on SIGTERM
            proc.send_signal(signal.SIGINT if os.environ.get("BENCH_ENV_PREFIX") else signal.SIGTERM)
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        for kid in kids:
            try:
                os.kill(kid, signal.SIGTERM)
            except ProcessLookupError:
                pass


def run_serve(
    which: str, case: Case, server: str, model: str, rollouts: int, tmp: Path, server_pid: int
) -> Result:
    batches = max(3, rollouts // BATCH)
    api_proc, api = start_run_api(tmp / f"run-api-{which.replace('/', '-')}.log")
    log = tmp / f"serve-{which.replace('/', '-')}.log"
    env_proc = None
    try:
        httpx.post(api + "/register", timeout=10, json={
            "wandb_group": "", "wandb_project": "", "batch_size": BATCH, "max_token_len": 4096,
            "checkpoint_dir": str(tmp / "ckpt"), "save_checkpoint_interval": 1000, "starting_step": 0,
            "num_steps": batches + 50}).raise_for_status()  # fmt: skip
        httpx.get(api + "/batch", timeout=10)  # the trainer's first poll marks it started
        cmd = env_cmd(which, case, server, model, batches + 50, ["--env.rollout_server_url", api])
        env_proc = subprocess.Popen(cmd, stdout=log.open("w"), stderr=subprocess.STDOUT, env=environ(which, case),
                                    cwd=ROOT)  # fmt: skip
        marks: list[
            tuple[float, float, float, int, float, float]
        ] = []  # (time, env, children, rollouts, server, api)
        deadline = time.monotonic() + 900
        with httpx.Client(timeout=30) as client:
            while len(marks) < batches + 1:
                batch = client.get(api + "/batch").json().get("batch")
                if batch:
                    cpu, kids = cpu_pair(env_proc.pid)
                    n = sum(len(g["tokens"]) for g in batch)
                    marks.append(
                        (time.monotonic(), cpu, kids, n, proc_cpu(server_pid), cpu_pair(api_proc.pid)[0])
                    )
                    continue
                if env_proc.poll() is not None or time.monotonic() > deadline:
                    raise SystemExit(f"{which} serve stopped early:\n{log.read_text()[-3000:]}")
                time.sleep(0.01)  # a trainer polls /batch
    finally:
        stop(env_proc, api_proc)
    (t0, c0, k0, _, s0, a0), (t1, c1, k1, _, s1, a1) = marks[0], marks[-1]
    n = sum(m[3] for m in marks[1:])
    return Result(
        n / (t1 - t0), (c1 - c0) / n * 1e3, (k1 - k0) / n * 1e3, n, (s1 - s0) / n * 1e3, (a1 - a0) / n * 1e3
    )


def run_process(
    which: str, case: Case, server: str, model: str, rollouts: int, tmp: Path, server_pid: int
) -> Result:
    groups = max(4, rollouts // GROUP)
    out = tmp / f"{which.replace('/', '-')}-{case.label.replace(' ', '-')}-{time.monotonic_ns()}.jsonl"
    log = out.with_suffix(".log")
    cmd = env_cmd(which, case, server, model, groups, ["--env.data_path_to_save_groups", str(out)])
    proc = subprocess.Popen(
        cmd, stdout=log.open("w"), stderr=subprocess.STDOUT, env=environ(which, case), cwd=ROOT
    )
    samples: list[tuple[float, float, float, int, float]] = []  # (time, env, children, output bytes, server)

    def poll() -> None:
        while proc.poll() is None:
            size = out.stat().st_size if out.exists() else 0
            cpu, kids = cpu_pair(proc.pid)
            samples.append((time.monotonic(), cpu, kids, size, proc_cpu(server_pid)))
            time.sleep(0.02)

    poller = threading.Thread(target=poll, daemon=True)
    poller.start()
    try:
        proc.wait(timeout=900)
    finally:
        stop(proc)
        poller.join()
    if proc.returncode != 0:
        raise SystemExit(f"{which} process failed:\n{log.read_text()[-3000:]}")
    final = out.stat().st_size
    lo = next(s for s in samples if s[3] >= 0.1 * final)
    hi = next(s for s in samples if s[3] >= 0.9 * final)
    n = (hi[3] - lo[3]) / final * groups * GROUP  # output bytes are proportional to rollouts
    if n <= 0 or hi[0] <= lo[0]:
        raise SystemExit(f"{which} process: too few rollouts to measure a window ({groups} groups)")
    return Result(n / (hi[0] - lo[0]), (hi[1] - lo[1]) / n * 1e3, (hi[2] - lo[2]) / n * 1e3, round(n),
                  (hi[4] - lo[4]) / n * 1e3)  # fmt: skip


def start_instant_server(model: str, tmp: Path) -> tuple[subprocess.Popen, str]:
    from environments.atropos_runtime.local_model import free_port

    port = free_port()
    proc = subprocess.Popen([sys.executable, str(ROOT / "benchmarks" / "instant_server.py"), str(port), model,
                             "--tokens", str(TOKENS)], stdout=subprocess.PIPE, stderr=(tmp / "instant.log").open("w"),
                            text=True)  # fmt: skip
    if proc.stdout.readline().strip() != "ready":
        raise SystemExit("instant server did not start:\n" + (tmp / "instant.log").read_text()[-2000:])
    return proc, f"http://127.0.0.1:{port}/v1"


def loadavg() -> str:
    return Path("/proc/loadavg").read_text().split()[0]


def run_cases(cases: list[Case], rollouts: int, repeats: int, model: str, tmp: Path,
              envs: tuple[str, ...] = ENVS) -> tuple[dict[tuple[str, str], list[Result]], list[str]]:  # fmt: skip
    """Every case `repeats` times for each env, alternating which goes first; (results, load averages)."""
    from atropos_baseline_env import use_task_prompts

    from environments.math_env import MathEnv

    use_task_prompts(MathEnv, tmp)  # the baseline serves math_env's own prompts and golds
    server, url = start_instant_server(model, tmp)
    results: dict[tuple[str, str], list[Result]] = {}
    loads = [loadavg()]
    try:
        for r in range(repeats):
            for case in cases:
                order = list(envs) if r % 2 == 0 else list(reversed(envs))
                for which in order:
                    run = run_serve if case.mode == "serve" else run_process
                    res = run(which, case, url, model, rollouts, tmp, server.pid)
                    results.setdefault((case.label, which), []).append(res)
                    loads.append(loadavg())
                    print(f"  {case.label:28} {which:10} {res.rollouts_s:8.1f} rollouts/s  env {res.env_ms:6.3f} ms"
                          f"/rollout  +workers {res.workers_ms:6.3f} ms  server {res.server_ms:6.3f} ms  run-api {res.api_ms:6.3f} ms"
                          f"  (load {loads[-1]})", flush=True)  # fmt: skip
    finally:
        stop(server)
    return results, loads


def report(cases: list[Case], results: dict[tuple[str, str], list[Result]], loads: list[str], args,
           envs: tuple[str, ...]) -> None:  # fmt: skip
    print(f"\nenv overhead: instant vLLM-format server, group {GROUP}, {TOKENS} tokens/turn, ~{args.rollouts} "
          f"rollouts per run, {args.repeats} runs per env (alternated); {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}; "
          f"1-min load average during the runs: {min(loads, key=float)}-{max(loads, key=float)}\n")  # fmt: skip
    head = (f"{'case':26} {'env':11} {'rollouts/s (median; runs)':32} {'env CPU ms/rollout':19} {'+workers ms':11} "
            f"{'server ms':9} {'run-api ms':10}")  # fmt: skip
    print(head)
    for case in cases:
        for which in envs:
            rows = results.get((case.label, which), [])
            if not rows:
                continue
            rates = " ".join(f"{r.rollouts_s:.0f}" for r in rows)
            med = statistics.median(r.rollouts_s for r in rows)
            print(f"{case.label:26} {which:11} {med:8.1f} ({rates}){'':{max(0, 21 - len(rates))}} "
                  f"{statistics.median(r.env_ms for r in rows):10.3f}{'':9} "
                  f"{statistics.median(r.workers_ms for r in rows):8.3f}    "
                  f"{statistics.median(r.server_ms for r in rows):8.3f}  {statistics.median(r.api_ms for r in rows):8.3f}")  # fmt: skip
        ours, theirs = results.get((case.label, "rlvr-envs")), results.get((case.label, "atroposlib"))
        if ours and theirs:
            ratios = [o.rollouts_s / t.rollouts_s for o, t in zip(ours, theirs, strict=True)]
            print(f"{'':26} ratio rollouts/s per run: {', '.join(f'{x:.1f}x' for x in ratios)} "
                  f"(median {statistics.median(ratios):.1f}x; target >= 5x)")  # fmt: skip
    for mode in {c.mode for c in cases}:
        one = results.get((f"{mode} 1-turn trivial", "rlvr-envs"))
        three = results.get((f"{mode} 3-turn trivial", "rlvr-envs"))
        if one and three:
            c1 = statistics.median(r.env_ms for r in one)
            c3 = statistics.median(r.env_ms for r in three)
            print(f"\nrlvr-envs {mode}: env CPU per single-turn rollout (trivial rubric) {c1:.3f} ms (target <= 0.3), "
                  f"per extra turn {(c3 - c1) / 2:.3f} ms (target <= 0.3)")  # fmt: skip


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--modes", default="serve,process")
    p.add_argument("--turns", default="1,3")
    p.add_argument("--rubrics", default="trivial,math")
    p.add_argument("--rollouts", type=int, default=1024, help="rollouts per run (rounded to batches/groups)")
    p.add_argument("--repeats", type=int, default=2)
    p.add_argument("--envs", default=",".join(ENVS))
    p.add_argument("--model", default=os.environ.get("RLVR_TINY_MODEL"))
    args = p.parse_args()
    from environments.atropos_runtime.local_model import build_tiny_model

    model = args.model or str(build_tiny_model(ROOT / ".cache" / "tiny-model"))
    cases = [Case(m, int(t), r) for m in args.modes.split(",") for t in args.turns.split(",")
             for r in args.rubrics.split(",")]  # fmt: skip
    with tempfile.TemporaryDirectory() as tmp:
        envs = tuple(args.envs.split(","))
        results, loads = run_cases(cases, args.rollouts, args.repeats, model, Path(tmp), envs)
    report(cases, results, loads, args, envs)


if __name__ == "__main__":
    main()
