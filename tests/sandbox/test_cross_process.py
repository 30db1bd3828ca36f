"""Jobs and pools across process boundaries: a harness job built in another process (a Ray driver,
a client) is still recognised as one, and closing a pool leaves no cgroup directory behind."""

from __future__ import annotations

import os
import pickle
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from sandbox.cgroups import PREFIX, detect
from sandbox.core import Job, Limits
from sandbox.harness import harness_job, harness_spec, runner_files

ROOT = Path(__file__).resolve().parents[2]
BUILD = (
    "import pickle, sys\n"
    "from sandbox.core import Limits\n"
    "from sandbox.harness import harness_job\n"
    "sys.stdout.buffer.write(pickle.dumps(harness_job('{\"tests\": []}', Limits(wall_time_s=5))))\n"
)


@pytest.mark.parametrize("hash_seed", ["1", "4242"])
def test_a_job_built_in_another_process_is_a_harness_job(hash_seed):
    env = dict(os.environ, PYTHONPATH=str(ROOT), PYTHONHASHSEED=hash_seed, PYTHONDONTWRITEBYTECODE="1")
    out = subprocess.run([sys.executable, "-c", BUILD], capture_output=True, env=env, check=True, cwd=ROOT)
    job: Job = pickle.loads(out.stdout)
    assert {k: v for k, v in job.files.items() if k != "spec.json"} == runner_files()  # byte-identical
    assert harness_spec(job, {"python3"}) == '{"tests": []}'
    mine = harness_job('{"tests": []}', Limits(wall_time_s=5))
    assert pickle.dumps(job) == pickle.dumps(mine)


def test_closing_a_pool_removes_its_cgroups():
    if shutil.which("bwrap") is None or detect() == "none" or os.geteuid() != 0:
        pytest.skip("needs bubblewrap and writable cgroups (root)")
    from sandbox.bwrap import BwrapConfig, BwrapSandbox
    from sandbox.registry import run_sync

    def ours() -> set[str]:  # this process's sandbox cgroups (other tests' live pools included)
        return {str(p) for p in Path("/sys/fs/cgroup").glob(f"*/{PREFIX}{os.getpid()}-*")}

    before = ours()
    box = BwrapSandbox(BwrapConfig(slots=2))
    assert box.cgroups is not None
    made = list(box.cgroups.bases.values())
    res = run_sync(box, Job(command=("python3", "-c", "print(6*7)"), limits=Limits(wall_time_s=30)))
    assert res.stdout.strip() == b"42"
    box.close_sync()
    left = ours() - before
    assert made and not any(p.exists() for p in made) and left == set()
