"""The rlvr-math hub folder builds as a wheel offline and `vf.load_environment('rlvr-math')` loads it."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_math_hub_package_builds_and_loads(tmp_path):
    pip = [sys.executable, "-m", "pip", "--disable-pip-version-check", "-q"]
    hub = ROOT / "environments" / "hub" / "rlvr_math"
    subprocess.run(
        [*pip, "wheel", "--no-build-isolation", "--no-deps", "-w", str(tmp_path), str(hub)], check=True
    )
    wheel = next(tmp_path.glob("rlvr_math-*.whl"))
    subprocess.run([*pip, "install", "--no-deps", "--target", str(tmp_path / "site"), str(wheel)], check=True)
    code = (
        "import verifiers as vf; env = vf.load_environment('rlvr-math', rg_train_size=10, rg_eval_size=5); "
        "print(type(env).__name__, len(env.get_eval_dataset()))"
    )
    env = dict(os.environ, PYTHONPATH=f"{tmp_path / 'site'}{os.pathsep}{ROOT}")
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env, cwd=tmp_path, timeout=300
    )
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.split()[-2:] == ["SingleTurnEnv", "5"]
