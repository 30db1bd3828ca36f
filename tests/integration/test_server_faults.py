"""The runtime under faults, on real servers it owns: a vLLM that is killed (and restarted) or hangs
(SIGSTOP), and a run-api that is not there yet, has no trainer, or dies and comes back.

Every server here is started by the test on a free loopback port; the shared one is never touched.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from environments.atropos_runtime.local_model import VLLMServer, free_port
from tests.integration.test_modes_on_vllm import QA, ROOT, VARIED, register_trainer, run_env

pytestmark = pytest.mark.slow
DETECT_S = 20  # "within seconds": one probe period + the 5 s probe timeout, with slack for a loaded CI


@pytest.fixture(scope="module")
def own_vllm(tiny_model: Path, tmp_path_factory: pytest.TempPathFactory):
    """A vLLM of this module's own (it gets killed and stopped), returning stock vLLM's raw logprobs."""
    log_path = tmp_path_factory.mktemp("faulty-vllm") / "vllm.log"
    server = VLLMServer(tiny_model, log_path=log_path, extra_args=["--logprobs-mode", "raw_logprobs"])
    with server:
        yield server


def suspend(server: VLLMServer) -> None:
    os.killpg(server.proc.pid, signal.SIGSTOP)


def resume(server: VLLMServer) -> None:
    os.killpg(server.proc.pid, signal.SIGCONT)


class Log:
    """The growing output of a child process, searched with a bound."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def text(self) -> str:
        return self.path.read_text(errors="replace").replace("\r", "\n") if self.path.exists() else ""

    def wait_for(self, pattern: str, timeout_s: float, proc: subprocess.Popen | None = None) -> float:
        """Seconds until `pattern` appears; fails with the log tail after `timeout_s`."""
        start = time.monotonic()
        while time.monotonic() - start < timeout_s:
            if re.search(pattern, self.text()):
                return time.monotonic() - start
            if proc is not None and proc.poll() is not None and not re.search(pattern, self.text()):
                break
            time.sleep(0.2)  # polling a child's log
        raise AssertionError(f"{pattern!r} not seen within {timeout_s}s:\n{self.text()[-3000:]}")


def spawn(script: Path, mode: str, vllm: VLLMServer, log_path: Path, *flags: str) -> subprocess.Popen:
    cmd = [sys.executable, str(script), mode, "--env.tokenizer_name", vllm.model,
           "--openai.model_name", vllm.model, "--openai.base_url", vllm.base_url,
           "--env.max_tokens", "16", *flags]  # fmt: skip
    out = open(log_path, "wb")  # noqa: SIM115 - owned by the child
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, env=env, cwd=ROOT)
    out.close()
    return proc


def lines(path: Path) -> int:
    return len(path.read_text().splitlines()) if path.exists() else 0


def test_raw_logprobs_at_temperature_are_refused_unless_asked_for(own_vllm, tmp_path):
    out = tmp_path / "g.jsonl"
    flags = ("--env.total_steps", "1", "--env.group_size", "2", "--env.temperature", "0.7",
             "--env.data_path_to_save_groups", str(out))  # fmt: skip
    refused = run_env(QA, "process", own_vllm, *flags, timeout=120)
    last = refused.stderr.strip().splitlines()[-1]
    assert refused.returncode != 0 and "returns raw (unscaled) logprobs" in last, last
    assert "--logprobs-mode processed_logprobs" in last and "--env.logprobs_mode raw" in last
    raw = run_env(QA, "process", own_vllm, *flags, "--env.logprobs_mode", "raw", timeout=120)
    assert raw.returncode == 0, raw.stderr[-2000:]
    (group,) = map(json.loads, out.read_text().splitlines())
    assert group["generation_params"]["logprobs_mode"] == "raw"


GROUPS = 400


def test_process_waits_for_a_killed_server_and_resumes_when_it_is_back(own_vllm, tmp_path):
    out, log_path = tmp_path / "g.jsonl", tmp_path / "process.log"
    # enough groups that the run is still sampling when the server is killed: 10 took 0.3 s once the
    # env got faster, and the run ended before the outage it is here to see
    proc = spawn(QA, "process", own_vllm, log_path, "--env.total_steps", str(GROUPS), "--env.group_size", "2",
                 "--env.max_concurrent_groups", "2", "--env.data_path_to_save_groups", str(out))  # fmt: skip
    log = Log(log_path)
    try:
        deadline = time.monotonic() + 180
        while lines(out) < 2 and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.2)  # wait until groups are flowing
        assert lines(out) >= 2 and proc.poll() is None, log.text()[-3000:]
        os.killpg(own_vllm.proc.pid, signal.SIGKILL)
        own_vllm.proc.wait(timeout=30)
        url = re.escape(own_vllm.base_url)
        log.wait_for(rf"inference server {url} is down \(.+\); waiting for it to come back", DETECT_S)
        own_vllm.start()  # same port
        log.wait_for(rf"inference server {url} is back after \d+s; resuming", 120)
        assert proc.wait(timeout=240) == 0, log.text()[-3000:]
    finally:
        if proc.poll() is None:
            proc.kill()
        if own_vllm.proc.poll() is not None:
            own_vllm.start()  # the next tests share this server
    summary = json.loads(out.with_suffix(".summary.json").read_text())
    assert summary["groups_in_file"] == GROUPS and summary["dropped"] == {}, summary
    assert "took longer than" not in log.text()
    assert log.text().count("is down (") == 1  # one line for the outage, not one per request


def test_evaluate_stops_cleanly_on_a_hung_server_when_asked(own_vllm, tmp_path):
    log_path = tmp_path / "evaluate.log"
    proc = spawn(QA, "evaluate", own_vllm, log_path, "--env.data_dir_to_save_evals", str(tmp_path / "ev"),
                 "--env.max_tokens", "400", "--env.on_server_down", "stop")  # fmt: skip
    vllm_log = Log(own_vllm.log_path)
    before = vllm_log.text().count("GET /v1/models")
    try:
        start = time.monotonic()
        while vllm_log.text().count("GET /v1/models") == before and time.monotonic() - start < 120:
            time.sleep(0.05)  # wait for evaluate's start-up reachability probe
        # hang the server right after it answered that probe: the evaluation then runs into a hung
        # server whatever the speed of this machine (generating first raced a fast evaluation)
        suspend(own_vllm)
        rc = proc.wait(timeout=DETECT_S + 30)
    finally:
        resume(own_vllm)
        if proc.poll() is None:
            proc.kill()
    last = Log(log_path).text().strip().splitlines()[-1]
    assert rc != 0 and f"inference server {own_vllm.base_url} is down (no answer within 5s)" in last, last


def test_serve_through_run_api_and_inference_faults(own_vllm, tmp_path):
    """serve before run-api exists → run-api without a trainer → batches → inference hang and back →
    run-api killed and restarted (re-registration) → batches again; quiet logs all along."""
    port = free_port()
    api_url = f"http://127.0.0.1:{port}"
    log_path = tmp_path / "serve.log"
    proc = spawn(VARIED, "serve", own_vllm, log_path, "--env.rollout_server_url", api_url,
                 "--env.group_size", "4", "--env.total_steps", "1000", "--env.status_every_s", "5",
                 "--env.trainer_wait_s", "300")  # fmt: skip
    log = Log(log_path)
    api = None
    try:
        log.wait_for(rf"run-api \(the trajectory API\) at {api_url} is not answering \(.+\); waiting for it to start",
                     60, proc)  # fmt: skip
        api = start_run_api(port, tmp_path / "api1.log")
        log.wait_for(rf"run-api at {api_url} is up but takes no environment yet", 30, proc)
        register_trainer(api_url, batch_size=4)
        wait_for_batch(api_url, proc, log)

        suspend(own_vllm)
        try:
            log.wait_for(rf"inference server {re.escape(own_vllm.base_url)} is down", DETECT_S, proc)
        finally:
            resume(own_vllm)
        log.wait_for(rf"inference server {re.escape(own_vllm.base_url)} is back", 30, proc)

        api.terminate()
        api.wait(timeout=30)
        log.wait_for(rf"run-api \(the trajectory API\) at {api_url} is not answering .*rollouts pause", DETECT_S, proc)  # fmt: skip
        api = start_run_api(port, tmp_path / "api2.log")
        log.wait_for(r"no longer knows env \d+ \(restarted\?\); registering again", 60, proc)
        register_trainer(api_url, batch_size=4)
        wait_for_batch(api_url, proc, log)
        assert proc.poll() is None, log.text()[-3000:]
    finally:
        proc.terminate()
        proc.wait(timeout=30)
        if api is not None:
            api.terminate()
            api.wait(timeout=30)
    text = log.text()
    assert "env_manager: Status dict" not in text and "max_num_workers:" not in text  # quiet by default
    assert re.search(r"serve: step \d+/1000 · trainer queue", text)
    assert "RetryError" not in text and "Traceback" not in text, text[-3000:]


def start_run_api(port: int, log_path: Path) -> subprocess.Popen:
    exe = Path(sys.executable).with_name("run-api")
    out = open(log_path, "wb")  # noqa: SIM115 - owned by the child
    proc = subprocess.Popen([str(exe), "--host", "127.0.0.1", "--port", str(port)], stdout=out, stderr=out)
    out.close()
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            httpx.get(f"http://127.0.0.1:{port}/status", timeout=1)
            return proc
        except httpx.HTTPError:
            time.sleep(0.2)  # readiness poll of a child process
    raise RuntimeError(log_path.read_text())


def wait_for_batch(api_url: str, proc: subprocess.Popen, log: Log, timeout_s: float = 180) -> list:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline and proc.poll() is None:
        batch = httpx.get(api_url + "/batch", timeout=10).json().get("batch")
        if batch:
            return batch
        time.sleep(0.5)  # the trainer's own protocol is to poll /batch
    raise AssertionError(f"no batch within {timeout_s}s:\n{log.text()[-3000:]}")
