"""Every environment imports with only the core dependencies: the extras' packages (torch: prm, ray,
fastapi/uvicorn/prometheus: server, verifiers) are hidden by a meta-path finder in a subprocess, as on an
install of plain `rlvr-envs` (a hub package such as rlvr-code brings nothing else)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
EXTRAS_ONLY = ["torch", "ray", "fastapi", "uvicorn", "prometheus_client", "verifiers", "vllm", "trl"]
ENVS = sorted(p.stem for p in (ROOT / "environments").glob("*_env.py"))

CODE = """
import importlib, sys
HIDDEN = {hidden!r}
class Hide:
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in HIDDEN:
            raise ModuleNotFoundError(f"No module named {{name!r}} (hidden: an extra's package)", name=name)
        return None
sys.meta_path.insert(0, Hide())
for name in {envs!r}:
    importlib.import_module("environments." + name)
print("imported", len({envs!r}))
"""


def test_every_environment_imports_without_the_extras():
    assert "code_env" in ENVS and "math_env" in ENVS
    out = subprocess.run(
        [sys.executable, "-c", CODE.format(hidden=EXTRAS_ONLY, envs=ENVS)],
        capture_output=True, text=True, cwd=ROOT, timeout=300,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr[-3000:]
    assert out.stdout.split() == ["imported", str(len(ENVS))]
