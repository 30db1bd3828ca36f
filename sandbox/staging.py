"""What a sandbox runs from this package, and how it gets there without the sandbox reading the
package's install path.

The sandbox runs as an unprivileged uid (65534 when the host process is root; Docker's container
user), which often cannot read where the package is installed: a checkout or venv under /root (mode
0700, the usual case in training containers), a 0750 home, files installed with umask 077. So no
backend bind-mounts from there (rule: nothing the sandbox runs is read from the install path by
the sandbox's uid; it is staged or handed over):

* bubblewrap: every file is handed over as a memfd (`--ro-bind-data FD DEST`), no path at all;
  a bubblewrap without that option (< 0.5) gets the staged copy below;
* Docker (the daemon mounts host paths): the files are staged once per content into
  `<tmp>/rlvr-sandbox-<euid>/<content hash>/`, directories 0755 and files 0644, owned by this
  process's uid and writable by nobody else. A copy is written into a temporary directory and
  renamed into place, so pools in concurrent processes share it without a race.

`IN_SANDBOX` is the one list of those files (name under `DEST` -> source path in this package): the
worker, and every module of the harness package `sandbox/runner/` (inside: the package
`rlvr_runner/`, which the worker imports from next to itself); both backends take it. A module the
worker needs is added there; a new module of the harness package is picked up by itself.
"""

from __future__ import annotations

import functools
import hashlib
import os
import shutil
import stat
import tempfile
from pathlib import Path

from sandbox import _proc
from sandbox.core import SandboxUnavailable
from sandbox.runner.wire import PACKAGE as RUNNER_PACKAGE  # its name inside the sandbox

DEST = "/run/rlvr"  # where the files appear inside the sandbox (read-only)
PACKAGE_DIR = Path(__file__).resolve().parent
IN_SANDBOX: dict[str, str] = {
    "worker.py": "_worker.py",  # the warm fork-server (PID 1 of a pool sandbox)
    # the trusted test harness, which the worker imports from next to itself
    **{
        f"{RUNNER_PACKAGE}/{p.name}": f"runner/{p.name}"
        for p in sorted((PACKAGE_DIR / "runner").glob("*.py"))
    },
}


def dest(name: str) -> str:
    """Where in-sandbox file `name` (a key of `IN_SANDBOX`) is inside the sandbox."""
    return f"{DEST}/{name}"


@functools.cache
def payload() -> dict[str, bytes]:
    """The in-sandbox files' bytes, read once by the host process (which can read its own package)."""
    return {name: (PACKAGE_DIR / src).read_bytes() for name, src in IN_SANDBOX.items()}


@functools.cache
def digest() -> str:
    """A content hash of every in-sandbox file (the staged directory's name)."""
    h = hashlib.sha256()
    for name, data in sorted(payload().items()):
        h.update(name.encode() + b"\0" + len(data).to_bytes(8, "big") + data)
    return h.hexdigest()[:20]


def bind_data_args(owned: list[int]) -> list[str]:
    """bwrap options that hand every in-sandbox file over as a memfd (`--ro-bind-data FD DEST`).
    The memfds are appended to `owned`: keep them open in the launcher, close them after spawn."""
    args: list[str] = []
    for name, data in payload().items():
        fd = _proc.memfd_with(data, name)
        owned.append(fd)
        args += ["--perms", "0444", "--ro-bind-data", str(fd), dest(name)]
    return args


def staged_dir(root: str | None = None) -> str:
    """A directory holding a copy of every in-sandbox file, readable by any uid (see module doc).
    Raises SandboxUnavailable (with the fix) when the staging area is not safely ours."""
    base = Path(root or tempfile.gettempdir()) / f"rlvr-sandbox-{os.geteuid()}"
    _own_dir(base)
    final = base / digest()
    for _ in range(2):
        if _complete(final):
            return str(final)
        tmp = Path(tempfile.mkdtemp(prefix=".stage-", dir=base))
        try:
            for name, data in payload().items():
                for parent in reversed((tmp / name).relative_to(tmp).parents[:-1]):
                    (tmp / parent).mkdir(exist_ok=True)
                    os.chmod(tmp / parent, 0o755)
                (tmp / name).write_bytes(data)
                os.chmod(tmp / name, 0o644)
            os.chmod(tmp, 0o755)
            os.rename(tmp, final)  # atomic; fails if another process put a copy there first
        except OSError:
            shutil.rmtree(tmp, ignore_errors=True)
            if not _complete(final) and final.exists() and not final.is_symlink():
                shutil.rmtree(final, ignore_errors=True)  # a damaged copy (ours: base is ours)
    if _complete(final):
        return str(final)
    raise SandboxUnavailable(
        f"cannot stage the sandbox's files in {final}; set TMPDIR to a writable local dir"
    )


def _own_dir(base: Path) -> None:
    """Create `base` 0755 if missing; refuse one that another uid owns or others may write."""
    try:
        base.mkdir(mode=0o755, exist_ok=True)
        st = os.lstat(base)
    except OSError as e:
        raise SandboxUnavailable(
            f"cannot create the sandbox staging dir {base} ({e}); set TMPDIR to a writable local dir"
        ) from e
    if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.geteuid():
        raise SandboxUnavailable(
            f"sandbox staging dir {base} is not a directory owned by uid {os.geteuid()}: remove it"
        )
    if stat.S_IMODE(st.st_mode) != 0o755:
        os.chmod(base, 0o755)  # ours; the umask may have made it 0700 (or it was group-writable)


def _complete(path: Path) -> bool:
    """`path` is our 0755 directory with exactly the in-sandbox files, 0644 and byte-identical."""
    try:
        st = os.lstat(path)
        if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.geteuid() or stat.S_IMODE(st.st_mode) != 0o755:
            return False
        for name, data in payload().items():
            for parent in (path / name).relative_to(path).parents[:-1]:
                dst = os.lstat(path / parent)
                if not stat.S_ISDIR(dst.st_mode) or stat.S_IMODE(dst.st_mode) != 0o755:
                    return False
            fst = os.lstat(path / name)
            if not stat.S_ISREG(fst.st_mode) or stat.S_IMODE(fst.st_mode) != 0o644:
                return False
            if fst.st_size != len(data) or (path / name).read_bytes() != data:
                return False
    except OSError:
        return False
    return True
