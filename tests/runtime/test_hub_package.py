"""The hub folder builds as a wheel offline and `vf.load_environment` finds it by its env id."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


HUB = sorted(p.name.removeprefix("rlvr_") for p in (ROOT / "environments" / "hub").iterdir() if p.is_dir())


@pytest.mark.parametrize("name", HUB)
def test_hub_package_builds_and_loads(tmp_path, name):
    pip = [sys.executable, "-m", "pip", "--disable-pip-version-check", "-q"]
    hub = ROOT / "environments" / "hub" / f"rlvr_{name}"
    subprocess.run(
        [*pip, "wheel", "--no-build-isolation", "--no-deps", "-w", str(tmp_path / "w"), str(hub)], check=True
    )
    wheel = next((tmp_path / "w").glob(f"rlvr_{name}-*.whl"))
    subprocess.run([*pip, "install", "--no-deps", "--target", str(tmp_path / "site"), str(wheel)], check=True)
    code = f"import verifiers as vf; env = vf.load_environment('rlvr-{name}'); print(type(env).__name__, len(env.get_eval_dataset()))"
    env = dict(os.environ, PYTHONPATH=f"{tmp_path / 'site'}{os.pathsep}{ROOT}")
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env, cwd=tmp_path, timeout=300
    )
    assert out.returncode == 0, out.stderr[-2000:]
    kind, n_eval = out.stdout.split()[-2:]
    assert kind in ("SingleTurnEnv", "TaskMultiTurnEnv") and int(n_eval) > 0  # multi-turn tasks: episodes
