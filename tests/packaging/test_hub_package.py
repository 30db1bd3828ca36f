"""Hub packages (environments/rlvr_<name>/, prime's layout): generated, build offline, load by env id."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "scripts"))
import make_hub_package  # noqa: E402

HUB = sorted(make_hub_package.ENVS)


def test_every_hub_folder_is_generated_and_up_to_date():
    folders = sorted(
        p.name.removeprefix("rlvr_") for p in (ROOT / "environments").glob("rlvr_*") if p.is_dir()
    )
    assert folders == HUB
    assert make_hub_package.main(["--check"]) == 0


@pytest.mark.parametrize("name", HUB)
def test_hub_package_builds_and_loads(tmp_path, name):
    """hatchling builds it without the network; classic `vf.load_environment('rlvr-<name>')` finds it."""
    pip = [sys.executable, "-m", "pip", "--disable-pip-version-check", "-q"]
    hub = ROOT / "environments" / f"rlvr_{name}"
    subprocess.run(
        [*pip, "wheel", "--no-build-isolation", "--no-deps", "-w", str(tmp_path / "w"), str(hub)], check=True
    )
    wheel = next((tmp_path / "w").glob(f"rlvr_{name}-*.whl"))
    subprocess.run([*pip, "install", "--no-deps", "--target", str(tmp_path / "site"), str(wheel)], check=True)
    meta = next((tmp_path / "site").glob(f"rlvr_{name}-*.dist-info")) / "METADATA"
    assert "Requires-Dist: rlvr-envs>=" in meta.read_text()
    code = (
        f"import verifiers as vf, rlvr_{name} as m; env = vf.load_environment('rlvr-{name}');"
        "print(type(env).__name__, len(env.get_eval_dataset()), ','.join(m.__all__))"
    )
    env = dict(os.environ, PYTHONPATH=f"{tmp_path / 'site'}{os.pathsep}{ROOT}")
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env, cwd=tmp_path, timeout=300
    )
    assert out.returncode == 0, out.stderr[-2000:]
    kind, n_eval, exports = out.stdout.split()[-3:]
    assert kind == "SingleTurnEnv" and int(n_eval) > 0
    assert exports == "load_environment"  # classic-only verifiers: no v1 Taskset exported
