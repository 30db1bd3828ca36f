"""atroposlib's own server type still works: `--env.vllm_api generate` against its custom /generate server."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.integration.test_modes_on_vllm import QA, run_env

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def generate_server(tiny_model: Path, tmp_path_factory: pytest.TempPathFactory):
    from environments.atropos_runtime.local_model import VLLMServer

    log_path = tmp_path_factory.mktemp("generate") / "server.log"
    with VLLMServer(
        tiny_model, log_path=log_path, module="environments.atropos_runtime.atropos_generate_server"
    ) as server:
        yield type("Endpoint", (), {"base_url": server.base_url, "model": str(tiny_model)})()


def test_process_through_atropos_generate_server(generate_server, tmp_path):
    out = tmp_path / "g.jsonl"
    result = run_env(QA, "process", generate_server, "--env.vllm_api", "generate", "--env.total_steps", "2",
                     "--env.group_size", "2", "--env.data_path_to_save_groups", str(out))  # fmt: skip
    assert result.returncode == 0, result.stderr[-2000:]
    groups = [json.loads(line) for line in out.read_text().splitlines()]
    assert len(groups) == 2
    for g in groups:
        assert g["tokens_exact"] is True
        for masks, lps in zip(g["masks"], g["inference_logprobs"], strict=True):
            trained = [lp for m, lp in zip(masks, lps, strict=True) if m != -100]
            assert len(trained) == 16 and all(lp <= 0 for lp in trained)
