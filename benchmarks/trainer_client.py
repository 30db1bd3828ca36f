"""The trainer's side of atroposlib's run-api, as benchmarks and end-to-end tests drive it: start a
run-api on loopback, register as the trainer, pull `/batch` as a trainer polls it."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import httpx


def start_run_api(log: Path) -> tuple[subprocess.Popen, str]:
    """atroposlib's `run-api` on a free loopback port, once it answers; (process, URL)."""
    from environments.atropos_runtime.local_model import free_port

    port = free_port()
    exe = Path(sys.executable).with_name("run-api")
    proc = subprocess.Popen([str(exe), "--host", "127.0.0.1", "--port", str(port)],
                            stdout=log.open("wb"), stderr=subprocess.STDOUT)  # fmt: skip
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 60
    while True:
        try:
            httpx.get(url + "/status", timeout=1)
            return proc, url
        except httpx.HTTPError:
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"run-api did not start:\n{log.read_text()[-2000:]}") from None
            time.sleep(0.2)  # readiness poll of a child process


def register_trainer(url: str, batch_size: int, max_token_len: int = 512, steps: int = 2) -> None:
    """Register as the trainer (what lets envs in); run-api has no batch for it yet."""
    body = {"wandb_group": "", "wandb_project": "", "batch_size": batch_size, "max_token_len": max_token_len,
            "checkpoint_dir": "", "save_checkpoint_interval": -1, "starting_step": 0, "num_steps": steps}  # fmt: skip
    httpx.post(url + "/register", json=body, timeout=10).raise_for_status()
    assert httpx.get(url + "/batch", timeout=10).json() == {"batch": None}


def take_batches(run_api: str, n: int, proc: subprocess.Popen, timeout_s: float) -> list:
    """Up to `n` batches from run-api's `/batch`, as a trainer polls for them. The env may finish
    (exit) before the trainer has read its batches: they stay queued in run-api, so after the env
    exits one more poll drains what is left."""
    batches, deadline = [], time.monotonic() + timeout_s
    while len(batches) < n and time.monotonic() < deadline:
        exited = proc.poll() is not None
        batch = httpx.get(run_api + "/batch", timeout=30).json()["batch"]
        if batch:
            batches.append(batch)
        elif exited:
            break
        else:
            time.sleep(0.5)  # the trainer's own protocol is to poll /batch
    return batches
