"""The test harness (the package `sandbox/runner/`, inside the sandbox `rlvr_runner/`) as a sandbox
job, and how a warm pool recognises one.

`harness_job(spec, limits)` builds a portable job: the package's sources (`sandbox.staging`, the one
list of what the sandbox holds), an unchecked-hash .pyc of each (so a fresh interpreter skips
compiling them), a 4-line `run.py` and `spec.json`; any backend runs it as `python3 run.py` with
the result channel on fd 3.

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
from sandbox.runner.wire import PACKAGE, SPEC_FILE, STUB_FILE

# the harness package's modules (name -> source), as the sandbox gets them
RUNNER_SOURCES = {
    name.split("/", 1)[1]: data.decode("utf-8")
    for name, data in staging.payload().items()
    if name.startswith(f"{staging.RUNNER_PACKAGE}/")
}
RUNNER_MODULES = tuple(RUNNER_SOURCES)
STUB = (
    "import os, sys\n"
    "sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))\n"
    f"import {PACKAGE}\n"
    f"sys.exit({PACKAGE}.main())\n"
)


@functools.cache
def runner_files() -> dict[str, str | bytes]:
    """The harness as job files: `run.py`, the package's sources, plus an unchecked-hash .pyc of each
    when this host's interpreter can compile one (an interpreter with another cache tag just
    compiles the sources).

    The bytes are the same in every process of this interpreter (a .pyc names its module as
    `rlvr_runner/<module>.py`, not the temporary path it was compiled in), so a job built in one
    process (a Ray driver, a client) is still recognised as a harness job by a pool in another
    (`harness_spec`)."""
    files: dict[str, str | bytes] = {STUB_FILE: STUB}
    files.update({f"{PACKAGE}/{name}": text for name, text in RUNNER_SOURCES.items()})
    with tempfile.TemporaryDirectory() as tmp:
        for name, text in RUNNER_SOURCES.items():
            src = Path(tmp, name)
            src.write_text(text, encoding="utf-8")
            try:
                pyc = py_compile.compile(
                    str(src),
                    cfile=str(Path(tmp, name + "c")),
                    dfile=f"{PACKAGE}/{name}",  # not the temp path: the bytes must match in every process
                    doraise=True,
                    invalidation_mode=py_compile.PycInvalidationMode.UNCHECKED_HASH,
                )
            except py_compile.PyCompileError:
                continue
            stem = name[: -len(".py")]
            files[f"{PACKAGE}/__pycache__/{stem}.{sys.implementation.cache_tag}.pyc"] = Path(pyc).read_bytes()
    return files


def harness_job(spec_json: str, limits: Limits, python: str = "python3") -> Job:
    """One job that runs the harness on `spec_json` (the runner's spec, already serialised)."""
    files = {**runner_files(), SPEC_FILE: spec_json}
    return Job(command=(python, STUB_FILE), files=files, limits=limits, channel=True)


def harness_spec(job: Job, pythons: frozenset[str] | set[str]) -> str | None:
    """The spec text if `job` is exactly a `harness_job` (same runner bytes, command `python run.py`,
    no stdin, channel on) for an interpreter named in `pythons`; None otherwise."""
    if not job.channel or job.stdin or len(job.command) != 2 or job.command[1] != STUB_FILE:
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
