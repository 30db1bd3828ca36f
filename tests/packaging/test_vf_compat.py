"""`environments.vf_bridge.compat` detects the Verifiers API by feature and explains impossible requests.

The shared venv holds a classic verifiers (0.1.9.x); the none / broken cases run in a subprocess whose
import system hides or breaks `verifiers` (a meta-path finder), so detection runs for real there.
The v1 side is exercised in the verifiers matrix (tests/packaging/test_verifiers_matrix.py).
"""

from __future__ import annotations

import os
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


V1_NAMES = [
    (module, name) for module, names in (
        ("environments.math_env", ("MathTaskset",)), ("environments.code_env", ("CodeTaskset",)),
        ("environments.qa_env", ("QATaskset",)), ("environments.judge_env", ("JudgeTaskset",)),
        ("environments.code_repair_env", ("CodeRepairTaskset", "CodeRepairEpisodeEnv")),
    ) for name in names
]  # fmt: skip


@pytest.mark.parametrize(("module", "name"), V1_NAMES)
def test_a_v1_name_on_classic_verifiers_says_which_verifiers_it_needs(module, name):
    """The v1 door on 0.1.9: a VerifiersAPIError naming the version and the fix, never a bare AttributeError,
    by attribute and by `from ... import`; other missing names stay AttributeErrors (hasattr works)."""
    import importlib

    mod = importlib.import_module(module)
    want = rf"{module}\.{name} is the verifiers v1 front door, but verifiers 0\.1\.\S+ has no v1 API.*verifiers-v1"
    with pytest.raises(vf_compat.VerifiersAPIError, match=want):
        getattr(mod, name)
    with pytest.raises(vf_compat.VerifiersAPIError, match=want):
        exec(f"from {module} import {name}", {})
    assert name not in mod.__all__ and not hasattr(mod, "NoSuchName")
    assert mod.load_environment  # the classic door is there


def test_the_hub_package_v1_door_on_classic_verifiers_is_the_same_named_error():
    code = "import rlvr_math\ntry:\n    rlvr_math.MathTaskset\nexcept ImportError as e:\n    print(type(e).__name__, e)"
    env = dict(os.environ, PYTHONPATH=f"{ROOT / 'environments' / 'rlvr_math'}{os.pathsep}{ROOT}")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.startswith(
        "VerifiersAPIError rlvr_math.MathTaskset is the verifiers v1 front door, but verifiers 0.1."
    )
    assert "pip install 'rlvr-envs[verifiers-v1]'" in out.stdout
