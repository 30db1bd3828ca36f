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
    info = next((tmp_path / "site").glob(f"rlvr_{name}-*.dist-info"))
    meta = (info / "METADATA").read_text()
    assert "Requires-Dist: rlvr-envs>=" in meta and "Requires-Python: >=3.11" in meta
    assert (info / "licenses" / "LICENSE").read_text() == (ROOT / "LICENSE").read_text()
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
    assert kind in ("SingleTurnEnv", "TaskMultiTurnEnv") and int(n_eval) > 0  # multi-turn tasks: episodes
    assert exports == "load_environment"  # classic-only verifiers: no v1 Taskset exported


@pytest.mark.parametrize(
    ("shadow", "error"),
    [
        ("environments/__init__.py", "ImportError: rlvr_math needs rlvr-envs' `environments` package"),
        ("environments.py", "ImportError: rlvr_math needs rlvr-envs' `environments` package"),
        ("sandbox/__init__.py", "environments.ShadowedPackageError: `environments` (rlvr-envs) needs rlvr-envs' `sandbox`"),
        ("rubrics.py", "environments.ShadowedPackageError: `environments` (rlvr-envs) needs rlvr-envs' `rubrics`"),
    ],
)  # fmt: skip
def test_a_user_package_that_shadows_ours_is_named_in_one_line(tmp_path, shadow, error):
    """A user project with its own `environments` (or `sandbox`, `rubrics`) ahead on sys.path: importing a hub
    package says which file shadows ours and what to do, instead of "cannot import name 'vf_compat'"."""
    path = tmp_path / shadow
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("")
    env = dict(os.environ, PYTHONPATH=f"{ROOT / 'environments' / 'rlvr_math'}{os.pathsep}{ROOT}")
    out = subprocess.run(
        [sys.executable, "-c", "import rlvr_math"], capture_output=True, text=True, env=env, cwd=tmp_path, timeout=300
    )  # fmt: skip
    assert out.returncode == 1
    last = out.stderr.strip().splitlines()[-1]
    found = str(path) if path.name != "__init__.py" else str(path.parent)
    assert last.startswith(error) and found in last and "rename that package" in last, out.stderr[-2000:]
    assert "During handling" not in out.stderr and "cannot import name" not in out.stderr
