"""Every shell block of README.md and docs/*.md pastes as written. Each block is either run here,
exactly as pasted (bash -e, in a folder that has the checkout's files and venv), or listed in
`NOT_RUN` with where it is exercised instead; a new block that is neither fails
`test_every_docs_block_is_run_or_says_where_it_is_covered`.

The blocks run here start the real local model with vLLM on :9001, `process` / `evaluate` it, start
run-api on :8000 and `serve` into it; this test is the trainer that `serve` waits for: it registers
and takes one batch, then stops the block's whole process group."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import time
from pathlib import Path

import httpx
import pytest

from benchmarks.trainer_client import register_trainer

ROOT = Path(__file__).resolve().parents[2]
DOCS = ["README.md", *sorted(str(p.relative_to(ROOT)) for p in (ROOT / "docs").glob("*.md"))]
RUN_API = "http://127.0.0.1:8000"
# (file, first line of the block) -> where the block is exercised, when it is not run here
NOT_RUN = {
    (
        "README.md",
        "make demo    # the main job",
    ): "CI runs `make test`; the demo's pieces: tests/runtime/test_cli.py, "
    "test_real_model.py, tests/integration/test_real_model_stack.py; the stranger check runs `make demo`",
    ("README.md", "make learn                 # code_repair_env"): "tests/code/test_rlef_learning.py trains "
    "through the same serve + run-api code (train_arm)",
    (
        "README.md",
        "make learn-lm               # GRPO",
    ): "~45 min; tests/code/test_lm_learning.py covers its parts",
    (
        "README.md",
        "scripts/install_env.sh math ~/venvs/rlvr",
    ): "needs PyPI and a model server; the same prime install: tests/packaging/test_verifiers_matrix.py",
    ("docs/guide.md", "python examples/reverse_env.py process"): "MODEL is a placeholder; the same run: "
    "tests/layout/test_example_env.py",
    (
        "docs/prime.md",
        "scripts/install_env.sh math /path/to/venv",
    ): "a placeholder path; see the README entry",
    ("docs/prime.md", "python3.11 -m venv ~/venvs/rlvr"): "needs PyPI; the same steps: "
    "tests/packaging/test_verifiers_matrix.py",
    ("docs/prime.md", "# needs a model server on :9001"): "tests/packaging/test_verifiers_matrix.py",
    (
        "docs/prime.md",
        "vf-eval rlvr-code --env.agent.harness.id null",
    ): "tests/packaging/test_verifiers_matrix.py",
    (
        "docs/ray.md",
        "# every node: the same install",
    ): "several machines; tests/remote/ runs a Ray cluster on loopback",
    (
        "docs/viewer.md",
        "source .venv/bin/activate",
    ): "reads `make demo`'s output; tests/runtime/test_viewer*.py",
}
RUN_HERE = {("README.md", "source .venv/bin/activate"), ("docs/running.md", "source .venv/bin/activate")}


def shell_blocks() -> list[tuple[str, str, str]]:
    """(file, first line, text) of every ```bash / ```sh block."""
    found = []
    for name in DOCS:
        for block in re.findall(r"```(?:bash|sh|shell)\n(.*?)```", (ROOT / name).read_text(), re.S):
            found.append((name, block.splitlines()[0], block))
    return found


def _key(name: str, first: str, keys) -> tuple[str, str] | None:
    return next((k for k in keys if k[0] == name and first.startswith(k[1])), None)


def test_every_docs_block_is_run_or_says_where_it_is_covered():
    blocks = shell_blocks()
    assert len(blocks) >= 10
    unclaimed = [(n, f) for n, f, _ in blocks if not _key(n, f, NOT_RUN) and not _key(n, f, RUN_HERE)]
    assert unclaimed == [], "a docs block nobody runs: run it in this file or say where it is covered"
    stale = [k for k in NOT_RUN if not any(n == k[0] and f.startswith(k[1]) for n, f, _ in blocks)]
    assert stale == [], "NOT_RUN names blocks the docs no longer have"
    assert len([1 for n, f, _ in blocks if _key(n, f, RUN_HERE)]) == len(RUN_HERE)


def _workdir(tmp_path: Path) -> Path:
    """A folder with the checkout's files (links) and venv, as a user's clone has them."""
    work = tmp_path / "clone"
    work.mkdir()
    for entry in ROOT.iterdir():
        if entry.name not in ("out", ".git", "vllm.log"):
            (work / entry.name).symlink_to(entry)
    return work


def _stop(proc: subprocess.Popen) -> None:
    for sig, wait in ((signal.SIGTERM, 30), (signal.SIGKILL, 10)):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            return
        try:
            proc.wait(timeout=wait)
            time.sleep(0)  # the group may outlive its leader: the next signal round reaches it
        except subprocess.TimeoutExpired:
            continue


def _one_batch(proc: subprocess.Popen, log: Path, timeout_s: float) -> list[dict]:
    """Be the trainer `serve` waits for: once run-api answers, register and take one batch."""
    deadline = time.monotonic() + timeout_s
    while True:
        if proc.poll() is not None:
            raise AssertionError(f"the block exited ({proc.returncode}) before serve had a trainer:\n"
                                 + log.read_text()[-4000:])  # fmt: skip
        try:
            httpx.get(RUN_API + "/status", timeout=1)
            break
        except httpx.HTTPError:
            assert time.monotonic() < deadline, "run-api never answered:\n" + log.read_text()[-4000:]
            time.sleep(1)  # readiness poll: the block starts run-api after vLLM and process
    register_trainer(RUN_API, batch_size=8, max_token_len=2048)
    while time.monotonic() < deadline:
        batch = httpx.get(RUN_API + "/batch", timeout=30).json()["batch"]
        if batch:
            return batch
        assert proc.poll() is None, "serve stopped:\n" + log.read_text()[-4000:]
        time.sleep(1)  # a trainer polls /batch
    raise AssertionError("no batch from serve:\n" + log.read_text()[-4000:])


@pytest.mark.slow
@pytest.mark.timeout(1500)
@pytest.mark.parametrize("doc", sorted(d for d, _ in RUN_HERE))
def test_docs_block_runs_as_pasted(doc, tmp_path):
    """The block, pasted into bash (-e: any failing line fails it): vLLM on the real model, process
    (and evaluate) write their outputs with rewards, serve hands a trainer a batch of exact tokens."""
    for port in (8000, 9001):
        with pytest.raises(httpx.HTTPError):  # the block's fixed ports must be free
            httpx.get(f"http://127.0.0.1:{port}/", timeout=1)
    block = next(text for name, first, text in shell_blocks() if name == doc and _key(name, first, RUN_HERE))
    servers = [line for line in block.splitlines() if "api_server" in line or line.startswith("run-api")]
    assert len(servers) == 2 and all("--host 127.0.0.1" in line for line in servers)  # loopback only
    work, log = _workdir(tmp_path), tmp_path / "block.log"
    with log.open("wb") as out:
        proc = subprocess.Popen(["bash", "-e", "-c", block], cwd=work, stdout=out, stderr=subprocess.STDOUT,
                                start_new_session=True)  # fmt: skip
    try:
        batch = _one_batch(proc, log, timeout_s=1200)
    finally:
        _stop(proc)
    for group in batch:
        assert len(group["tokens"]) == len(group["masks"]) == len(group["scores"]) == 8
        assert all(len(t) == len(m) for t, m in zip(group["tokens"], group["masks"], strict=True))
        assert len(set(group["scores"])) > 1  # serve sends groups with a signal to train on
    summary = json.loads((work / "out" / "math.summary.json").read_text())
    assert summary["groups_in_file"] > 0 and summary["mean_score"] > 0, summary  # the real model scores
    if doc == "docs/running.md":
        metrics = json.loads((work / "out" / "math-eval" / "metrics.json").read_text())
        samples = (work / "out" / "math-eval" / "samples.jsonl").read_text().splitlines()
        assert len(samples) == 20 and metrics, metrics
