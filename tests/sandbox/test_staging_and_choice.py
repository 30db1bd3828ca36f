"""How the sandbox gets its own files (`sandbox.staging`), which backend "auto" picks and why,
what `python -m sandbox check` says, and `python -m sandbox build-image` (offline image)."""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from sandbox import SandboxUnavailable, get_sandbox, registry, run_sync, staging
from sandbox.core import Job, default_slots

REPO = Path(__file__).resolve().parents[2]
PY = [sys.executable, "-c"]
ENV = {**os.environ, "PYTHONPATH": str(REPO)}
needs_bwrap = pytest.mark.skipif(shutil.which("bwrap") is None, reason="bubblewrap not installed")


def _docker_client():
    try:
        import docker

        client = docker.from_env()
        client.ping()
        return client
    except Exception as e:
        pytest.skip(f"no Docker engine: {e}")


# ------------------------------------------------------------------------------ staging


def test_concurrent_processes_stage_one_readable_copy(tmp_path):
    """Four processes with umask 077 stage at once: one directory, 0755 with 0644 files, the exact
    bytes of every in-sandbox file, no temporary left over."""
    code = f"import os; os.umask(0o077); from sandbox import staging; print(staging.staged_dir({str(tmp_path)!r}))"
    procs = [subprocess.Popen([*PY, code], env=ENV, stdout=subprocess.PIPE, text=True) for _ in range(4)]
    paths = {p.communicate(timeout=120)[0].strip() for p in procs}
    assert all(p.returncode == 0 for p in procs)
    assert len(paths) == 1
    staged = Path(paths.pop())
    base = staged.parent
    assert sorted(os.listdir(base)) == [staged.name]  # no .stage-* left behind
    assert stat.S_IMODE(base.stat().st_mode) == 0o755 and stat.S_IMODE(staged.stat().st_mode) == 0o755
    assert sorted(str(f.relative_to(staged)) for f in staged.rglob("*") if f.is_file()) == sorted(
        staging.IN_SANDBOX
    )
    assert all(
        stat.S_IMODE(d.stat().st_mode) == 0o755 for d in staged.rglob("*") if d.is_dir()
    )  # the package
    for name, src in staging.IN_SANDBOX.items():
        assert stat.S_IMODE((staged / name).stat().st_mode) == 0o644
        assert (staged / name).read_bytes() == (REPO / "sandbox" / src).read_bytes()


def test_a_damaged_copy_is_replaced_and_a_foreign_staging_dir_refused(tmp_path):
    staged = Path(staging.staged_dir(str(tmp_path)))
    (staged / "worker.py").chmod(0o644)
    (staged / "worker.py").write_bytes(b"print('not the worker')")
    assert Path(staging.staged_dir(str(tmp_path))) == staged
    assert (staged / "worker.py").read_bytes() == staging.payload()["worker.py"]

    other = tmp_path / "other"
    other.mkdir()
    (other / f"rlvr-sandbox-{os.geteuid()}").symlink_to(tmp_path)  # not a real directory of ours
    with pytest.raises(SandboxUnavailable, match="not a directory owned by"):
        staging.staged_dir(str(other))


def test_in_sandbox_files_are_one_list():
    """The warm worker's mounts and the harness both come from `IN_SANDBOX`."""
    from sandbox import harness, pool

    assert pool.WORKER_DST == staging.dest("worker.py")
    shipped = {f"rlvr_runner/{name}": text.encode() for name, text in harness.RUNNER_SOURCES.items()}
    assert shipped == {k: v for k, v in staging.payload().items() if k.startswith("rlvr_runner/")}
    assert set(harness.RUNNER_MODULES) == {p.name for p in (staging.PACKAGE_DIR / "runner").glob("*.py")}
    assert all((staging.PACKAGE_DIR / src).is_file() for src in staging.IN_SANDBOX.values())


# ------------------------------------------------------------------------------ interpreter


@needs_bwrap
@pytest.mark.parametrize(
    ("python", "words"),
    [("/opt/venv/bin/python3", "outside the host dirs"), ("/usr/bin/python-absent", "does not exist")],
)
def test_an_interpreter_the_sandbox_cannot_run_is_one_line_with_the_fix(python, words):
    with pytest.raises(SandboxUnavailable) as err:
        get_sandbox("bwrap", slots=1, python=python)
    msg = str(err.value)
    assert words in msg and "apt-get install -y python3" in msg and "\n" not in msg


# ------------------------------------------------------------------------------ auto


@needs_bwrap
def test_auto_probes_once_caches_and_says_why(monkeypatch):
    """ "auto" = the first backend that runs a job: a bwrap that cannot start is skipped with its
    reason; the answer is cached per option set, so the next call tries only the chosen one."""
    _docker_client()
    monkeypatch.setattr(registry, "_AUTO", {})
    made: list[str] = []
    real_make = registry._make

    def counting(name, **kw):
        made.append(name)
        return real_make(name, **kw)

    monkeypatch.setattr(registry, "_make", counting)
    for cached in (False, True):
        sb = get_sandbox("auto", slots=1, bwrap="/nonexistent/bwrap")
        try:
            assert sb.name == "docker"
            assert run_sync(sb, Job(command=("python3", "-c", "print(6*7)"))).stdout == b"42\n"
            note = sb.describe()
            assert "auto: chose docker" in note and "skipped bwrap: bubblewrap not found" in note
            assert ("(cached)" in note) is cached
        finally:
            sb.close_sync()
    assert made == ["bwrap", "docker", "docker"]
    sb = get_sandbox("auto", slots=1)  # other options: probed afresh, and bwrap works here
    try:
        assert sb.name == "bwrap" and "auto: chose bwrap" in sb.describe()
    finally:
        sb.close_sync()


# ------------------------------------------------------------------------------ check


@needs_bwrap
def test_check_reports_the_pools_slot_count_with_progress_one_line_each():
    proc = subprocess.run(
        [sys.executable, "-m", "sandbox", "check"], env=ENV, capture_output=True, text=True, timeout=300
    )
    assert proc.stderr.splitlines()[:2] == ["probing bwrap ...", "probing docker ..."]
    lines = proc.stdout.splitlines()
    assert [line.split()[0] for line in lines] == list(registry.BACKENDS)  # one line per backend
    assert lines[0].startswith("bwrap   ok:") and f"slots={default_slots()}," in lines[0]


# ------------------------------------------------------------------------------ build-image


@pytest.mark.slow
@pytest.mark.docker
def test_build_image_from_the_package_alone_offline(tmp_path):
    """`python -m sandbox build-image` builds a working image from an installed copy of the package
    (no repository script, no Dockerfile, no registry); the docker backend runs a job in it."""
    client = _docker_client()
    tag = f"rlvr-sandbox:test-build-{os.getpid()}"
    installed = tmp_path / "site"
    shutil.copytree(REPO / "sandbox", installed / "sandbox", ignore=shutil.ignore_patterns("__pycache__"))
    env = {**os.environ, "PYTHONPATH": str(installed)}
    try:
        out = subprocess.run(
            [sys.executable, "-m", "sandbox", "build-image", "--tag", tag],
            env=env,
            cwd=tmp_path,
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert out.returncode == 0, out.stderr
        assert (
            out.stdout.split()[0] == tag and client.images.get(tag).attrs["Config"]["User"] == "65534:65534"
        )
        sb = get_sandbox("docker", slots=1, image=tag)
        try:
            assert run_sync(sb, Job(command=("python3", "-c", "print(6*7)"))).stdout == b"42\n"
        finally:
            sb.close_sync()
        dockerfile = subprocess.run(
            [sys.executable, "-m", "sandbox", "build-image", "--dockerfile"],
            env=env,
            cwd=tmp_path,
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert "FROM " in dockerfile.stdout and "USER 65534:65534" in dockerfile.stdout
    finally:
        try:
            client.images.remove(tag, force=True)
        except Exception:
            pass


def test_a_missing_image_names_the_build_command():
    client = _docker_client()
    del client
    with pytest.raises(
        SandboxUnavailable, match=r"fix: python -m sandbox build-image --tag rlvr-sandbox:absent"
    ):
        get_sandbox("docker", slots=1, image="rlvr-sandbox:absent")


@needs_bwrap
def test_a_bubblewrap_without_bind_data_mounts_the_staged_copy(monkeypatch, tmp_path):
    """bubblewrap < 0.5 has no --ro-bind-data: the worker comes from the staged copy, which must be
    in a directory every user can enter when the sandbox drops to another uid."""
    from sandbox import bwrap

    monkeypatch.setattr(bwrap, "_has_bind_data", lambda _: False)
    public = Path(tempfile.mkdtemp(dir="/tmp"))  # every ancestor open to other users
    public.chmod(0o755)
    monkeypatch.setattr(staging.tempfile, "tempdir", str(public))
    try:
        sb = get_sandbox("bwrap", slots=1)
        try:
            assert run_sync(sb, Job(command=("python3", "-c", "print(6*7)"))).stdout == b"42\n"
        finally:
            sb.close_sync()
        assert os.listdir(public) == [f"rlvr-sandbox-{os.geteuid()}"]
    finally:
        shutil.rmtree(public)
    if os.geteuid() == 0:
        private = tmp_path / "private"
        private.mkdir(mode=0o700)
        monkeypatch.setattr(staging.tempfile, "tempdir", str(private))
        with pytest.raises(SandboxUnavailable, match="other users cannot enter; fix: set TMPDIR=/tmp"):
            get_sandbox("bwrap", slots=1)


@pytest.mark.parametrize(
    ("said", "fix"),
    [
        (
            "bwrap: Creating new namespace failed: Resource temporarily unavailable",
            "task limit (RLIMIT_NPROC",
        ),
        (
            "bwrap: Creating new namespace failed: Operation not permitted",
            "enable unprivileged user namespaces",
        ),
        ("bwrap: setting up uid map: Permission denied", "enable unprivileged user namespaces"),
    ],
)
def test_bubblewraps_namespace_failures_name_their_own_fix(said, fix):
    """EAGAIN from clone is the uid's task limit, not missing user namespaces: the fix says so."""
    from sandbox.bwrap import _with_fix

    line = _with_fix(said)
    assert fix in line and "\n" not in line
    assert ("user namespaces" in line) == ("Resource temporarily" not in said)
