"""Every hub environment, installed with the real prime CLI into a venv per Verifiers version
(0.1.9.post2, 0.3.1, 0.4.0), loads and evaluates with that version's vf-eval: see
scripts/verifiers_matrix.py. Builds (or reuses, keyed by requirements) its venvs under .cache/; a
missing venv is built here, never skipped. Needs PyPI the first time (or a warm .cache/uv).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.slow
@pytest.mark.timeout(3000)
def test_prime_installs_and_vf_eval_scores_on_every_verifiers_version(vllm_server):
    out = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "verifiers_matrix.py"),
         "--vllm-url", vllm_server.base_url, "--vllm-model", vllm_server.model],
        capture_output=True, text=True, cwd=ROOT, timeout=2900,
    )  # fmt: skip
    print(out.stdout)
    assert out.returncode == 0, out.stdout[-4000:] + out.stderr[-6000:]
    reports = [json.loads(line) for line in out.stdout.splitlines() if line.startswith("{")]
    by_version = {r["version"]: r for r in reports if "version" in r}
    assert sorted(by_version) == ["0.1.9.post2", "0.3.1", "0.4.0"]
    assert by_version["0.4.0"]["v1:judge@scripted"]["rewards"].count(None) == 1
    assert by_version["0.1.9.post2"]["classic:judge@scripted"]["rewards"].count(None) == 1
    assert reports[-1]["failures"] == 0


@pytest.mark.slow
@pytest.mark.parametrize("version", ["0.1.9.post2", "0.3.1", "0.4.0"])
def test_bridge_on_each_verifiers_version(tiny_model, version):
    """The Verifiers bridge in each matrix venv (built by the test above, never skipped): classic
    versions run every fixture with rewards on their own tokens; 0.4 (v1 only) is refused with one
    message."""
    venvs = sorted((ROOT / ".cache" / "verifiers-matrix").glob(f"venv-{version}-*/bin/python"))
    if not venvs:
        pytest.fail(f"no verifiers-matrix venv for {version}: the matrix test above builds them")
    smoke = ROOT / "tests" / "verifiers_bridge" / "bridge_smoke.py"
    done = subprocess.run(
        [str(venvs[-1]), str(smoke), str(tiny_model)],
        capture_output=True, text=True, timeout=300, cwd=ROOT, env=dict(os.environ, PYTHONPATH=str(ROOT)),
    )  # fmt: skip
    if version.startswith("0.4"):
        assert done.returncode != 0 and "has no classic API" in done.stderr, done.stderr[-3000:]
    else:
        assert done.returncode == 0, done.stderr[-3000:]
        assert done.stdout.count("rewards on their own tokens") == 3
        # the tool env runs where vLLM's tool parsers import, else it is refused saying so
        assert re.search(r"vf_tools: (3 groups, tool calls ran|refused loudly)", done.stdout), done.stdout
