"""The rlvr-envs wheel and sdist are complete (data files, no hub folders) and `twine check` clean."""

from __future__ import annotations

import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DATA = sorted(p.name for p in (ROOT / "environments" / "data").glob("*.jsonl"))


def test_wheel_and_sdist_ship_the_data_files_and_pass_twine(tmp_path):
    assert DATA, "environments/data/*.jsonl is where the offline defaults live"
    subprocess.run(
        [sys.executable, "-m", "build", "--no-isolation", "--outdir", str(tmp_path), str(ROOT)],
        check=True, capture_output=True,
    )  # fmt: skip
    wheel = next(tmp_path.glob("rlvr_envs-*.whl"))
    sdist = next(tmp_path.glob("rlvr_envs-*.tar.gz"))
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
    meta = zipfile.ZipFile(wheel).read(next(n for n in names if n.endswith("METADATA"))).decode()
    requires = [line for line in meta.splitlines() if line.startswith("Requires-Dist: verifiers")]
    assert requires and all("extra ==" in line for line in requires), requires  # verifiers only via extras
    out = subprocess.run(
        [sys.executable, "-m", "twine", "check", "--strict", str(wheel), str(sdist)],
        capture_output=True,
        text=True,
    )
    assert out.returncode == 0 and out.stdout.count("PASSED") == 2, out.stdout + out.stderr
