"""One clear message where an environment's API is missing from the installed verifiers: a v1
Taskset on the classic-only 0.1.9.post2 (this venv), a classic env on the v1-only 0.4.0 (the
matrix's venv, through the bridge's CLI)."""

from __future__ import annotations

import subprocess
import sys

import pytest

from environments.verifiers_env import VerifiersEnv
from environments.vf_bridge.compat import detect
from environments.vf_bridge.dispatch import bridge_for
from environments.vf_bridge.v1_env import VerifiersV1Env
from tests.verifiers_v1_bridge.test_v1_bridge import BRIDGE, FIXTURES, ROOT, v1_venv  # noqa: F401


@pytest.fixture
def fixtures_on_path():
    sys.path.insert(0, str(FIXTURES))
    yield
    sys.path.remove(str(FIXTURES))


@pytest.mark.skipif(detect().kind != "classic", reason="this venv's verifiers has a v1 API")
def test_a_v1_taskset_on_classic_verifiers_is_refused_in_one_line(fixtures_on_path):
    with pytest.raises(SystemExit) as exc:
        bridge_for(VerifiersEnv, ["process", "--env.vf_env_name", "vfv1_sum"])
    message = str(exc.value)
    assert (
        "vfv1_sum is a verifiers v1 Taskset" in message
        and f"verifiers {detect().version} has no v1 API" in message
    )
    assert (
        bridge_for(VerifiersEnv, ["process", "--env.vf_env_name=tests.verifiers_bridge.fixtures.vf_sum"])
        is VerifiersEnv
    )


@pytest.mark.slow
def test_a_classic_env_on_v1_only_verifiers_is_refused_in_one_line(v1_venv, tiny_model):  # noqa: F811
    venv, env = v1_venv
    done = subprocess.run(
        [str(venv / "bin" / "python"), str(BRIDGE), "process", "--env.vf_env_name",
         "tests.verifiers_bridge.fixtures.vf_sum", "--env.tokenizer_name", str(tiny_model)],
        capture_output=True, text=True, timeout=300, cwd=ROOT, env=env,
    )  # fmt: skip
    last = done.stderr.strip().splitlines()[-1]
    assert done.returncode == 1, done.stderr[-3000:]
    assert (
        "vf_sum is a classic Verifiers environment" in last and "verifiers 0.4.0 has only the v1 API" in last
    )
    assert VerifiersV1Env.name == "verifiers-v1"
