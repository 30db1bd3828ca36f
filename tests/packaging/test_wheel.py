"""The rlvr-envs wheel and sdist are complete (data files, LICENSE, no hub folders), their metadata is true
(Python floor, licence, no placeholder URLs), `twine check` is clean, and the installed `rlvr demo` works
as a user meets it: without torch it says what to install in one line and writes nothing."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DATA = sorted(p.name for p in (ROOT / "environments" / "data").glob("*.jsonl"))


@pytest.fixture(scope="module")
def dist(tmp_path_factory) -> tuple[Path, Path]:
    """(wheel, sdist) built from this checkout, once per module."""
    out = tmp_path_factory.mktemp("dist")
    subprocess.run(
        [sys.executable, "-m", "build", "--no-isolation", "--outdir", str(out), str(ROOT)],
        check=True, capture_output=True,
    )  # fmt: skip
    return next(out.glob("rlvr_envs-*.whl")), next(out.glob("rlvr_envs-*.tar.gz"))


def metadata(wheel: Path) -> str:
    with zipfile.ZipFile(wheel) as z:
        return z.read(next(n for n in z.namelist() if n.endswith(".dist-info/METADATA"))).decode()


def test_wheel_and_sdist_ship_the_data_files_and_pass_twine(dist):
    wheel, sdist = dist
    assert DATA, "environments/data/*.jsonl is where the offline defaults live"
    names = zipfile.ZipFile(wheel).namelist()
    assert [n for n in names if n.startswith("environments/data/")] == [
        f"environments/data/{d}" for d in DATA
    ]
    assert not [n for n in names if n.startswith("environments/rlvr_")]  # hub packages ship separately
    assert {
        "environments/vf_bridge/compat.py",
        "environments/vf_bridge/v1_front.py",
        "rubrics/core.py",
    } <= set(names)
    # what the sandbox runs inside (sandbox.staging) and the Dockerfile `build-image --dockerfile` prints
    from sandbox import staging

    in_sandbox = {f"sandbox/{src}" for src in staging.IN_SANDBOX.values()} | {"sandbox/Dockerfile"}
    assert in_sandbox <= set(names), in_sandbox - set(names)
    members = tarfile.open(sdist).getnames()
    assert all(any(m.endswith(n) for m in members) for n in in_sandbox)
    assert all(any(m.endswith(f"environments/data/{d}") for m in members) for d in DATA)
    requires = [line for line in metadata(wheel).splitlines() if line.startswith("Requires-Dist: verifiers")]
    assert requires and all("extra ==" in line for line in requires), requires  # verifiers only via extras
    out = subprocess.run(
        [sys.executable, "-m", "twine", "check", "--strict", str(wheel), str(sdist)],
        capture_output=True,
        text=True,
    )
    assert out.returncode == 0 and out.stdout.count("PASSED") == 2, out.stdout + out.stderr


def test_license_python_floor_and_urls_are_true(dist):
    """The Apache-2.0 text ships in both; Requires-Python and the classifiers are the floor every extra
    installs on (verifiers-v1 needs 3.11); a Project-URL, if any, is a real https address, no placeholder."""
    wheel, sdist = dist
    text = (ROOT / "LICENSE").read_text()
    assert "Apache License" in text and "Version 2.0, January 2004" in text
    with zipfile.ZipFile(wheel) as z:
        assert (
            z.read(next(n for n in z.namelist() if n.endswith(".dist-info/licenses/LICENSE"))).decode()
            == text
        )
    with tarfile.open(sdist) as t:
        assert (
            t.extractfile(next(m for m in t.getmembers() if m.name.endswith("/LICENSE"))).read().decode()
            == text
        )
    meta = metadata(wheel)
    assert "License-Expression: Apache-2.0" in meta and "License-File: LICENSE" in meta
    assert "Requires-Python: >=3.11" in meta
    versions = re.findall(r"^Classifier: Programming Language :: Python :: (3\.\d+)$", meta, re.M)
    assert versions and min(versions, key=lambda v: int(v.split(".")[1])) == "3.11", versions
    for line in re.findall(r"^Project-URL: (.*)$", meta, re.M):
        url = line.split(", ", 1)[1]
        assert url.startswith("https://") and not re.search(
            r"example\.|placeholder|todo|localhost", url, re.I
        ), line


def test_installed_demo_without_torch_names_the_install_in_one_line(dist, tmp_path):
    """`rlvr demo` from the wheel in a fresh venv without torch or vLLM (installed with --no-deps: the check
    runs before anything else is imported, so the dependencies do not change what is tested): exit 2, one
    line on stderr naming what to install, no traceback, and nothing written anywhere."""
    wheel, _ = dist
    venv, home, cwd = tmp_path / "venv", tmp_path / "home", tmp_path / "run"
    home.mkdir()
    cwd.mkdir()
    # no PYTHONPATH & co.: this checkout (and its build's egg-info) must not be what the venv sees
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTHON", "RLVR_", "VIRTUAL_ENV"))}
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, env=env)
    py = venv / "bin" / "python"
    subprocess.run(
        [sys.executable, "-m", "pip", "--python", str(py), "install", "-q", "--no-deps", "--no-index", str(wheel)],
        check=True, env=env,
    )  # fmt: skip
    site = Path(subprocess.run([str(py), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                               check=True, capture_output=True, text=True, env=env).stdout.strip())  # fmt: skip
    assert (site / "environments" / "atropos_runtime" / "demo.py").is_file()

    def files() -> set[Path]:  # Python's own bytecode caches aside
        return {p for p in site.rglob("*") if "__pycache__" not in p.parts}

    before = files()
    env["HOME"] = str(home)
    out = subprocess.run(
        [str(venv / "bin" / "rlvr"), "demo"], capture_output=True, text=True, cwd=cwd, env=env, timeout=120
    )
    assert out.returncode == 2, out.stdout + out.stderr
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in out.stderr, out.stderr
    assert (
        "needs torch and vllm" in lines[0]
        and "pip install torch vllm" in lines[0]
        and "--base-url" in lines[0]
    )
    assert files() == before
    assert not any(home.iterdir()) and not any(cwd.iterdir())
