"""`environments.vf_bridge.compat` detects the Verifiers API by feature and explains impossible requests.

The shared venv holds a classic verifiers (0.1.9.x); the none / broken cases run in a subprocess whose
import system hides or breaks `verifiers` (a meta-path finder), so detection runs for real there.
The v1 side is exercised in the verifiers matrix (tests/packaging/test_verifiers_matrix.py).
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from environments.vf_bridge import compat as vf_compat

ROOT = Path(__file__).resolve().parents[2]

HIDE = """
import importlib.machinery, sys
class Broken:
    def create_module(self, spec):
        return None
    def exec_module(self, module):
        raise ImportError("cannot import name X from openai (simulated mismatch)")
class Block:
    def find_spec(self, name, path=None, target=None):
        if name == "verifiers" or name.startswith("verifiers."):
            {action}
        return None
sys.meta_path.insert(0, Block())
from environments.vf_bridge import compat as vf_compat
info = vf_compat.detect()
print(info.kind, info.version, sorted(info.errors))
try:
    from environments.qa_env import load_environment
    load_environment()
except ImportError as exc:
    print("ERROR", type(exc).__name__, exc)
"""


def run_with(action: str) -> list[str]:
    out = subprocess.run(
        [sys.executable, "-c", HIDE.format(action=action)],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=300,
    )
    assert out.returncode == 0, out.stderr[-2000:]
    return out.stdout.strip().splitlines()


def test_classic_install_is_classic_only():
    info = vf_compat.detect()
    assert info.kind == "classic" and info.apis == ("classic",) and info.version.startswith("0.1.")
    assert vf_compat.require("classic").SingleTurnEnv
    assert not vf_compat.has_v1()
    with pytest.raises(vf_compat.VerifiersAPIError, match=r"verifiers 0\.1\.\S+ has no v1 API.*verifiers-v1"):
        vf_compat.require("v1")


def test_no_verifiers_is_none_and_the_classic_door_says_how_to_install():
    lines = run_with("raise ModuleNotFoundError(name)")
    assert lines[0].startswith("none")
    assert lines[1].startswith("ERROR VerifiersAPIError") and "verifiers-classic" in lines[1]


def test_a_verifiers_that_fails_to_import_is_reported_with_its_error():
    lines = run_with("return importlib.machinery.ModuleSpec(name, Broken())")
    assert lines[0].split()[0] == "none" and "classic" in lines[0]
    assert "fails to import" in lines[1] and "simulated mismatch" in lines[1] and "pip check" in lines[1]


def test_classic_client_wraps_only_where_the_version_needs_it():
    from openai import AsyncOpenAI

    vf = vf_compat.require("classic")
    client = AsyncOpenAI(base_url="http://127.0.0.1:9/v1", api_key="x")
    wrapped = vf_compat.classic_client(client)
    assert (wrapped is client) == (not hasattr(vf, "OpenAIChatCompletionsClient"))
