"""Install every hub environment with the real prime CLI into one venv per Verifiers version, then load
and evaluate them with that version's own `vf-eval` (loopback only). Exit 1 on any mismatch.

    python scripts/verifiers_matrix.py --vllm-url http://127.0.0.1:PORT/v1 --vllm-model PATH

| verifiers   | APIs checked | eval command                                                                  |
|-------------|--------------|-------------------------------------------------------------------------------|
| 0.1.9.post2 | classic      | `vf-eval rlvr-<env> -b URL -m MODEL -n 3 -s`                                  |
| 0.3.1       | classic      | same (0.3's vf-eval is still classic)                                        |
| 0.4.0       | v1           | `vf-eval rlvr-<env> --env.agent.harness.id null --env.agent.runtime.type subprocess --no-push` |

Per version: a cached venv (`.cache/verifiers-matrix/venv-<version>-<hash>`, keyed by the version and
rlvr-envs' requirements) with verifiers and the dependencies, but never our packages: they are
removed, then `prime env install rlvr-code rlvr-judge rlvr-math rlvr-qa` installs them offline
(`UV_OFFLINE=1`, `UV_FIND_LINKS` = the rlvr-envs wheel built from this checkout + hatchling), and the
installed files are checked (prime's exit code is not: it is 0 on failure). Then
* every environment loads through the version's API(s) (and the other API fails with vf_compat's message);
* `rlvr-judge` against the scripted server (policy and judge): rows scripted correct / wrong /
  unverifiable must score 1 / 0 / not-a-number (classic NaN; v1 reward None, trace ok=False);
* `rlvr-qa` against the tiny model on vLLM: 3 rows, each verified (a finite number);
* `rlvr-code-repair` (multi-turn RLEF, where installed) against the scripted server on 0.1.9.post2 classic
  and 0.4.0 v1: fixed after the feedback → 1 in 2 turns, never fixed → 0 after the 3-turn budget.
Rewards are read from the output files (`results.jsonl` / `traces.jsonl`), never from exit codes.
v1 harnesses resolve a uv script on every run: `UV_DEFAULT_INDEX` points at a local index of its
dependencies (built once with pip into the cache), so the evals need no package index.
"""

from __future__ import annotations

import argparse
import hashlib
import html
import json
import math
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import tomllib

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
CACHE = ROOT / ".cache" / "verifiers-matrix"
# version: (what vf_compat.detect().kind must say, the APIs whose vf-eval is run)
MATRIX = {"0.1.9.post2": ("classic", ("classic",)), "0.3.1": ("both", ("classic",)), "0.4.0": ("v1", ("v1",))}
# 0.3's classic vf-eval re-imports the env in env-server worker processes by default (checked by hand:
# same rewards); in-process saves a minute of CPU per eval on 2 cores
CLASSIC_FLAGS = {"0.3.1": ["--disable-env-server"]}
# where the multi-turn RLEF env is evaluated too: its classic MultiTurnEnv on the project's pin, its v1 EpisodeEnv
REPAIR_ON = {("0.1.9.post2", "classic"), ("0.4.0", "v1")}
TOOLS = ["prime==0.18.0", "uv==0.13.9"]
# verifiers 0.3.1 caps nothing, so it gets openai 3.x, whose client (on httpx2) breaks its v1 harness
# programs: `AsyncOpenAI(timeout=httpx.Timeout(...))` fails with AttributeError in the harness's uv env
# (0.4.0 itself pins openai below 3). The matrix's venvs and harness indexes stay below it.
PINS = ["openai<3"]
BUILD_DEPS = ["hatchling>=1.26", "editables~=0.3"]  # what `uv pip install -e` of a hub package builds with
ENVS = sorted(p.name.removeprefix("rlvr_") for p in (ROOT / "environments").glob("rlvr_*") if p.is_dir())
IDS = [
    f"rlvr-{n.replace('_', '-')}" for n in ENVS
]  # env ids = distribution names (prime: - → _ for the folder)
KEY_VAR = "RLVR_MATRIX_API_KEY"
LABELS = ("correct", "wrong", "unverifiable")
EXPECTED = {"correct": 1.0, "wrong": 0.0, "unverifiable": None}


class Mismatch(AssertionError):
    pass


def run(cmd: list[str], log: Path, **kw) -> subprocess.CompletedProcess:
    """Run `cmd`, appending its output to `log`; raise with the log tail when it exits non-zero."""
    with log.open("a") as f:
        f.write(f"\n$ {' '.join(map(str, cmd))}\n")
        f.flush()
        proc = subprocess.run(cmd, stdout=f, stderr=subprocess.STDOUT, timeout=kw.pop("timeout", 900), **kw)
    if proc.returncode != 0:
        raise Mismatch(f"{cmd[0]} exited {proc.returncode}; see {log}:\n{log.read_text()[-3000:]}")
    return proc


def digest(*parts: object) -> str:
    return hashlib.sha256(json.dumps(parts, sort_keys=True, default=str).encode()).hexdigest()[:12]


def cached_dir(name: str, key: str, build) -> Path:
    """`CACHE/<name>-<key>`, built by `build(dir)` once; an unfinished or stale build is replaced."""
    final = CACHE / f"{name}-{key}"
    if (final / ".complete").exists():
        return final
    for stale in CACHE.glob(f"{name}-*"):
        shutil.rmtree(stale, ignore_errors=True)
    build(final)
    (final / ".complete").write_text(key)
    return final


def tools_venv(log: Path) -> Path:
    def build(d: Path) -> None:
        run([sys.executable, "-m", "venv", str(d)], log)
        run([str(d / "bin" / "python"), "-m", "pip", "install", "-q", *TOOLS], log)

    return cached_dir("tools", digest(TOOLS, sys.version), build)


def wheelhouse(tools: Path, log: Path) -> Path:
    """This checkout's rlvr-envs wheel + sdist (rebuilt every run) beside cached hatchling wheels."""
    deps = cached_dir(
        "build-deps",
        digest(BUILD_DEPS),
        lambda d: run(
            [str(tools / "bin" / "python"), "-m", "pip", "download", "-q", "-d", str(d), *BUILD_DEPS], log
        ),
    )
    out = CACHE / "wheels"
    shutil.rmtree(out, ignore_errors=True)
    run([sys.executable, "-m", "build", "--no-isolation", "--outdir", str(out), str(ROOT)], log)
    for wheel in deps.glob("*.whl"):
        shutil.copy(wheel, out)
    return out


def version_venv(version: str, tools: Path, wheels: Path, env: dict[str, str], log: Path) -> Path:
    """A venv with verifiers==version and rlvr-envs' dependencies, without any rlvr package."""
    requires = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    uv = str(tools / "bin" / "uv")

    def build(d: Path) -> None:
        run([uv, "venv", "-q", "-p", sys.executable, str(d)], log, env=env)
        wheel = next(wheels.glob("rlvr_envs-*.whl"))
        run([uv, "pip", "install", "-q", "--python", str(d / "bin" / "python"), f"verifiers=={version}", str(wheel),
             *PINS], log, env=env)  # fmt: skip

    venv = cached_dir(f"venv-{version}", digest(version, requires, TOOLS, PINS, sys.version), build)
    installed = ["rlvr-envs", *IDS]
    run([uv, "pip", "uninstall", "-q", "--python", str(venv / "bin" / "python"), *installed], log, env=env)
    return venv


def prime_install(venv: Path, tools: Path, wheels: Path, env: dict[str, str], log: Path) -> dict:
    env = dict(
        env, VIRTUAL_ENV=str(venv), UV_OFFLINE="1", UV_FIND_LINKS=str(wheels), PRIME_DISABLE_VERSION_CHECK="1"
    )
    env["PATH"] = f"{tools / 'bin'}{os.pathsep}{env['PATH']}"
    # the wheel's file name does not change with the code: drop uv's cached copy so this build is used
    run([str(tools / "bin" / "uv"), "cache", "clean", "rlvr-envs"], log, env=env)
    run(
        [str(tools / "bin" / "prime"), "env", "install", *IDS, "--plain"],
        log,
        cwd=ROOT,
        env=env,
    )
    # prime exits 0 even when uv failed: judge the install by what is on disk
    probe = subprocess.run([str(venv / "bin" / "python"), str(ROOT / "scripts" / "matrix_probe.py"), "installed",
                            json.dumps(ENVS)], capture_output=True, text=True, cwd=tempfile.gettempdir(), env=env,
                           timeout=300)  # fmt: skip
    if probe.returncode != 0:
        raise Mismatch(f"after prime env install: {probe.stderr[-3000:]}")
    return json.loads(probe.stdout.strip().splitlines()[-1])


def harness_index(venv: Path, tools: Path, log: Path, name: str = "harness-index") -> Path:
    """A PEP 503 index of the v1 chat harness's uv-script dependencies (read from the installed verifiers).
    `name`: the cache entry (a stale entry of the same name is replaced, so one name per verifiers)."""
    out = subprocess.run([str(venv / "bin" / "python"), str(ROOT / "scripts" / "matrix_probe.py"), "harness-deps"],
                         capture_output=True, text=True, check=True, timeout=300)  # fmt: skip
    deps = json.loads(out.stdout.strip().splitlines()[-1])

    def build(d: Path) -> None:
        raw = d / "raw"
        run([str(tools / "bin" / "python"), "-m", "pip", "download", "-q", "-d", str(raw), *deps, *PINS], log)
        projects: dict[str, list[Path]] = {}
        for f in raw.iterdir():
            name = re.split(r"-\d", f.name, maxsplit=1)[0]
            projects.setdefault(re.sub(r"[-_.]+", "-", name).lower(), []).append(f)
        for project, files in projects.items():
            (d / project).mkdir(parents=True)
            links = "".join(
                f'<a href="../raw/{html.escape(f.name)}">{html.escape(f.name)}</a><br/>' for f in files
            )
            (d / project / "index.html").write_text(f"<html><body>{links}</body></html>")
        (d / "index.html").write_text("".join(f'<a href="{p}/">{p}</a><br/>' for p in projects))

    return cached_dir(name, digest(deps, PINS, sys.version), build)


def v1_bridge_venv(version: str = "0.4.0") -> tuple[Path, dict[str, str]]:
    """The matrix's venv of a v1 `version` (built here when missing) and the environment that runs the
    v1 bridge from this checkout in it offline: PYTHONPATH = this checkout, `uv` on PATH, the v1
    harness's uv script resolved from the local harness index (`UV_DEFAULT_INDEX`)."""
    (CACHE / "logs").mkdir(parents=True, exist_ok=True)
    log = CACHE / "logs" / "v1-bridge.log"
    env = dict(os.environ, UV_CACHE_DIR=str(ROOT / ".cache" / "uv"), PIP_DISABLE_PIP_VERSION_CHECK="1")
    env.pop("VIRTUAL_ENV", None)
    env.pop("PYTHONPATH", None)
    tools = tools_venv(log)
    requires = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    key = digest(version, requires, TOOLS, PINS, sys.version)
    cached = CACHE / f"venv-{version}-{key}"
    if (cached / ".complete").exists():
        venv = cached  # rlvr-envs itself comes from PYTHONPATH, so no wheel is needed
        run([str(tools / "bin" / "uv"), "pip", "uninstall", "-q", "--python", str(venv / "bin" / "python"),
             "rlvr-envs", *IDS], log, env=env)  # fmt: skip
    else:
        venv = version_venv(version, tools, wheelhouse(tools, log), env, log)
    # 0.4.0 shares the matrix's index; another version gets its own entry (its harness pins differ)
    index = harness_index(venv, tools, log, "harness-index" if version == "0.4.0" else f"v1index-{version}")
    env.update(PATH=f"{venv / 'bin'}{os.pathsep}{tools / 'bin'}{os.pathsep}{env['PATH']}", PRIME_RUNS_MODE="disabled",
               UV_DEFAULT_INDEX=f"file://{index}", PYTHONPATH=str(ROOT))  # fmt: skip
    return venv, env


def judge_script() -> tuple[dict, dict]:
    """Scripted answers (and judge verdicts) for every eval row of the judge env; question → reward."""
    from environments.judge_env import JudgeEnvConfig, JudgeTask

    items, _ = JudgeTask(JudgeEnvConfig()).items("eval")
    replies, expected = {}, {}
    for i, item in enumerate(items):
        question, label = item.prompt[-1]["content"], LABELS[i % 3]
        replies[question], expected[question] = f"SCRIPTED-{label}-answer-{i}", (EXPECTED[label], 1)
    verdicts = {"SCRIPTED-correct": "<score>10</score>", "SCRIPTED-wrong": "<score>0</score>",
                "SCRIPTED-unverifiable": "I will not grade this."}  # fmt: skip
    return {"replies": replies, "verdicts": verdicts}, expected


REPAIR_ARGS = {"dataset": "stdio", "eval_fraction": 0.5, "max_turns": 3}


def repair_script() -> tuple[dict, dict]:
    """RLEF code repair (multi-turn): every row's first answer fails; even rows are fixed after the
    feedback (reward 1 in 2 turns), odd rows resubmit the wrong program (reward 0 after 3 turns)."""
    from environments.code_repair_env import CodeRepairEnvConfig, CodeRepairTask

    task = CodeRepairTask(CodeRepairEnvConfig(**REPAIR_ARGS))
    replies, after, expected = {}, {}, {}
    wrong = "```python\nprint('wrong')\n```"
    for i, row in enumerate(task.rows("eval")):
        question = task.item(row, i).prompt[-1]["content"]
        replies[question] = wrong
        after[question] = f"```python\n{row['solution']}```" if i % 2 == 0 else wrong
        expected[question] = (1.0, 2) if i % 2 == 0 else (0.0, REPAIR_ARGS["max_turns"])
    return {"replies": replies, "after_feedback": after}, expected


def eval_cmd(api: str, venv: Path, env_id: str, url: str, model: str, out: Path, args: dict) -> list[str]:
    exe = str(venv / "bin" / "vf-eval")
    if api == "classic":
        return [exe, env_id, "-m", model, "-b", url, "-k", KEY_VAR, "-n", "3", "-r", "1", "-t", "16", "-s",
                "-a", json.dumps(args)]  # fmt: skip
    flags = [f"--env.taskset.{k.replace('_', '-')}={v}" for k, v in args.items()]
    return [exe, env_id, *flags, "--env.agent.harness.id", "null", "--env.agent.runtime.type", "subprocess",
            "--client.base-url", url, "--client.api-key-var", KEY_VAR, "-m", model, "-n", "3", "-r", "1",
            "--sampling.max-tokens", "16", "--no-push", "--no-rich", "-o", str(out), "--run.name", "run"]  # fmt: skip


def read_rewards(api: str, out: Path) -> dict[str, tuple[float | None, int]]:
    """question → (reward (None = unverified), assistant turns) from the eval's output files."""
    rows: dict[str, tuple[float | None, int]] = {}
    if api == "classic":
        files = list(out.glob("**/results.jsonl"))
        if len(files) != 1:
            raise Mismatch(f"expected one results.jsonl under {out}, found {files}")
        for line in files[0].read_text().splitlines():
            r = json.loads(line)
            question = next(m["content"] for m in reversed(r["prompt"]) if m["role"] == "user")
            reward, turns = r["reward"], sum(m["role"] == "assistant" for m in r["completion"])
            rows[question] = (None if reward is None or math.isnan(reward) else float(reward), turns)
        return rows
    for line in (out / "run" / "traces.jsonl").read_text().splitlines():
        trace = json.loads(line)["traces"][0]
        reward = trace["rewards"].get("rubric_reward")
        if (reward is None) != bool(trace["errors"]):
            raise Mismatch(f"v1 trace with reward {reward} and errors {trace['errors']}")
        turns = sum(1 for node in trace["nodes"] if node.get("sampled"))
        rows[trace["task"]["data"]["prompt"]] = (None if reward is None else float(reward["score"]), turns)
    return rows


def evaluate(version: str, api: str, name: str, venv: Path, env: dict[str, str], ctx: dict) -> dict:
    """One `vf-eval` run; its rewards (and turns), checked against what the server was scripted to give."""
    scripted = (ctx["scripted"], "scripted")  # server URL, model name
    env_id, url, model, args = {
        "judge@scripted": ("rlvr-judge", *scripted,
                           {"judge_base_url": ctx["scripted"], "judge_model": "scripted", "judge_max_retries": 0}),
        "code_repair@scripted": ("rlvr-code-repair", *scripted, REPAIR_ARGS),
        "qa@vllm": ("rlvr-qa", ctx["vllm_url"], ctx["vllm_model"], {}),
    }[name]  # fmt: skip
    out = Path(tempfile.mkdtemp(prefix=f"{version}-{api}-{name.split('@')[0]}-", dir=CACHE / "runs"))
    t0 = time.monotonic()
    cmd = eval_cmd(api, venv, env_id, url, model, out, args)
    if api == "classic":
        cmd += CLASSIC_FLAGS.get(version, [])
    run(cmd, out / "eval.log", cwd=out, env=env)
    rows = read_rewards(api, out)
    rewards = {q: r for q, (r, _) in rows.items()}
    where = f"{version} {api} {name} (log {out / 'eval.log'})"
    if len(rows) != 3:
        raise Mismatch(f"{where}: {len(rows)} rows, expected 3: {rows}")
    if name.endswith("@scripted"):
        want = {q: ctx["expected"][q] for q in rows}
        if rows != want:
            raise Mismatch(f"{where}: (reward, turns) {rows} != scripted {want}")
    if name == "judge@scripted" and sorted(map(str, rewards.values())) != sorted(map(str, EXPECTED.values())):
        raise Mismatch(f"{where}: the 3 rows do not cover correct/wrong/unverifiable: {rewards}")
    if name == "qa@vllm" and not all(r is not None and 0.0 <= r <= 1.0 for r in rewards.values()):
        raise Mismatch(f"{where}: unverified or out-of-range rewards {rewards}")
    result = {"rewards": list(rewards.values()), "s": round(time.monotonic() - t0, 1)}
    if name == "code_repair@scripted":
        result["turns"] = [t for _, t in rows.values()]
    return result


def check_version(version: str, ctx: dict) -> dict:
    log = CACHE / "logs" / f"{version}.log"
    log.unlink(missing_ok=True)
    t0 = time.monotonic()
    venv = version_venv(version, ctx["tools"], ctx["wheels"], ctx["env"], log)
    report: dict = {"version": version, "venv_s": round(time.monotonic() - t0, 1)}
    t0 = time.monotonic()
    report["installed"] = prime_install(venv, ctx["tools"], ctx["wheels"], ctx["env"], log)
    report["prime_s"] = round(time.monotonic() - t0, 1)
    if report["installed"]["verifiers"] != version:
        raise Mismatch(f"prime's install changed verifiers {version} → {report['installed']['verifiers']}")
    env = dict(ctx["env"], PATH=f"{venv / 'bin'}{os.pathsep}{ctx['tools'] / 'bin'}{os.pathsep}{ctx['env']['PATH']}",
               PRIME_RUNS_MODE="disabled", **{KEY_VAR: "local"})  # fmt: skip
    kind, apis = MATRIX[version]
    loads = subprocess.run([str(venv / "bin" / "python"), str(ROOT / "scripts" / "matrix_probe.py"), "load",
                            json.dumps(ENVS)], capture_output=True, text=True, env=env,
                           cwd=tempfile.gettempdir(), timeout=600)  # fmt: skip
    if loads.returncode != 0:
        raise Mismatch(f"{version}: loading failed:\n{loads.stderr[-3000:]}")
    report["load"] = json.loads(loads.stdout.strip().splitlines()[-1])
    if report["load"]["kind"] != kind:
        raise Mismatch(f"{version}: vf_compat detected {report['load']['kind']!r}, expected {kind!r}")
    if "v1" in apis:
        env["UV_DEFAULT_INDEX"] = f"file://{harness_index(venv, ctx['tools'], log)}"
    jobs = [(api, name) for api in apis for name in ("judge@scripted", "qa@vllm")]
    if "code_repair" in ENVS and (version, apis[0]) in REPAIR_ON:
        jobs.append((apis[0], "code_repair@scripted"))
    with ThreadPoolExecutor(max_workers=len(jobs)) as pool:  # two evals at once: each waits on its servers
        done = list(pool.map(lambda job: evaluate(version, *job, venv, env, ctx), jobs))
    for (api, name), result in zip(jobs, done, strict=True):
        report[f"{api}:{name}"] = result
    return report


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--vllm-url", required=True, help="base URL of a vLLM serving the tiny model")
    parser.add_argument("--vllm-model", required=True, help="model name vLLM serves")
    parser.add_argument("--versions", nargs="*", default=list(MATRIX), help="subset of the matrix")
    parser.add_argument("--jobs", type=int, default=len(MATRIX), help="versions checked in parallel")
    args = parser.parse_args(argv)
    if sys.version_info < (3, 11):
        raise SystemExit("the matrix needs Python >= 3.11 (prime 0.18, verifiers >= 0.2)")
    from environments.atropos_runtime.local_model import free_port

    t_start = time.monotonic()
    (CACHE / "logs").mkdir(parents=True, exist_ok=True)
    (CACHE / "runs").mkdir(parents=True, exist_ok=True)
    shutil.rmtree(CACHE / "runs", ignore_errors=True)
    (CACHE / "runs").mkdir()
    log = CACHE / "logs" / "setup.log"
    log.unlink(missing_ok=True)
    env = dict(os.environ, UV_CACHE_DIR=str(ROOT / ".cache" / "uv"), PIP_DISABLE_PIP_VERSION_CHECK="1")
    env.pop("VIRTUAL_ENV", None)
    env.pop("PYTHONPATH", None)  # the venvs must use what prime installed, not this checkout
    tools = tools_venv(log)
    wheels = wheelhouse(tools, log)
    port = free_port()
    script, expected = judge_script()
    if "code_repair" in ENVS:
        repair, repair_expected = repair_script()
        script = {key: {**script.get(key, {}), **repair.get(key, {})} for key in {*script, *repair}}
        expected |= repair_expected
    script_path = CACHE / "scripted.json"
    script_path.write_text(json.dumps(script))
    server = subprocess.Popen([sys.executable, str(ROOT / "scripts" / "scripted_server.py"), str(port),
                               str(script_path), str(CACHE / "logs" / "scripted_requests.jsonl")])  # fmt: skip
    try:
        import httpx

        deadline = time.monotonic() + 60
        while True:
            try:
                httpx.get(f"http://127.0.0.1:{port}/v1/models", timeout=1).raise_for_status()
                break
            except httpx.HTTPError:
                if server.poll() is not None or time.monotonic() > deadline:
                    raise Mismatch("scripted server did not start") from None
                time.sleep(0.2)  # readiness poll of a child process
        ctx = dict(tools=tools, wheels=wheels, env=env, scripted=f"http://127.0.0.1:{port}/v1", expected=expected,
                   vllm_url=args.vllm_url, vllm_model=args.vllm_model)  # fmt: skip
        setup_s = round(time.monotonic() - t_start, 1)
        with ThreadPoolExecutor(max_workers=max(1, args.jobs)) as pool:
            futures = {v: pool.submit(check_version, v, ctx) for v in args.versions}
        failures = []
        for version, future in futures.items():
            try:
                print(json.dumps(future.result()))
            except Exception as exc:  # report every version, then fail
                failures.append(f"{version}: {exc}")
    finally:
        server.terminate()
        server.wait(timeout=30)
    print(json.dumps({"setup_s": setup_s, "total_s": round(time.monotonic() - t_start, 1),
                      "loadavg": Path("/proc/loadavg").read_text().split()[:3], "failures": len(failures)}))  # fmt: skip
    for line in failures:
        print("FAIL", line, file=sys.stderr)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
