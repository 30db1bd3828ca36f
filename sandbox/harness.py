"""The test harness (`sandbox/runner.py`) as a sandbox job, and how a warm pool recognises one.

`harness_job(spec, limits)` builds a portable job: the runner source, an unchecked-hash .pyc of it
(so a fresh interpreter skips compiling it), a 4-line `run.py` and `spec.json`; any backend runs
it as `python3 run.py` with the result channel on fd 3.

Warm pools (bwrap, Docker) run the same harness without a second interpreter: their worker (PID 1
of the sandbox) has the trusted runner pre-imported from a read-only mount and, for a job that
`harness_spec` recognises, runs the runner's supervision loop itself and forks one child per test
session (the only process that runs untrusted code). Recognition is by exact content: the files must
be byte-identical to what `harness_job` ships, so the pool runs exactly the code the job names.
"""

from __future__ import annotations

import functools
import py_compile
import sys
import tempfile
from pathlib import Path

from sandbox import staging
from sandbox.core import Job, Limits

RUNNER_SRC = str(staging.PACKAGE_DIR / staging.IN_SANDBOX["runner.py"])
RUNNER = staging.payload()["runner.py"].decode("utf-8")
STUB = (
    "import os, sys\n"
    "sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))\n"
    "import rlvr_runner\n"
    "sys.exit(rlvr_runner.main())\n"
)
SPEC_FILE = "spec.json"


@functools.cache
def runner_files() -> dict[str, str | bytes]:
    """The harness as job files: source, `run.py`, plus an unchecked-hash .pyc when this host's
    interpreter can compile one (an interpreter with another cache tag just compiles the source).

    The bytes are the same in every process of this interpreter (the .pyc names `rlvr_runner.py`,
    not the temporary path it was compiled in), so a job built in one process (a Ray driver, a
    client) is still recognised as a harness job by a pool in another (`harness_spec`)."""
    files: dict[str, str | bytes] = {"run.py": STUB, "rlvr_runner.py": RUNNER}
    with tempfile.TemporaryDirectory() as tmp:
        src = Path(tmp, "rlvr_runner.py")
        src.write_text(RUNNER, encoding="utf-8")
        try:
            pyc = py_compile.compile(
                str(src),
                cfile=str(Path(tmp, "out.pyc")),
                dfile="rlvr_runner.py",  # not the temp path: the bytes must match in every process
                doraise=True,
                invalidation_mode=py_compile.PycInvalidationMode.UNCHECKED_HASH,
            )
        except py_compile.PyCompileError:
            return files
        files[f"__pycache__/rlvr_runner.{sys.implementation.cache_tag}.pyc"] = Path(pyc).read_bytes()
    return files


def harness_job(spec_json: str, limits: Limits, python: str = "python3") -> Job:
    """One job that runs the harness on `spec_json` (the runner's spec, already serialised)."""
    files = {**runner_files(), SPEC_FILE: spec_json}
    return Job(command=(python, "run.py"), files=files, limits=limits, channel=True)


def harness_spec(job: Job, pythons: frozenset[str] | set[str]) -> str | None:
    """The spec text if `job` is exactly a `harness_job` (same runner bytes, command `python run.py`,
    no stdin, channel on) for an interpreter named in `pythons`; None otherwise."""
    if not job.channel or job.stdin or len(job.command) != 2 or job.command[1] != "run.py":
        return None
    if job.command[0] not in pythons:
        return None
    shipped = runner_files()
    if len(job.files) != len(shipped) + 1:
        return None
    for name, content in shipped.items():
        got = job.files.get(name)
        if got is not content and got != content:
            return None
    spec = job.files.get(SPEC_FILE)
    return spec if isinstance(spec, str) else None
