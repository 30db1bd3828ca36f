"""Environments: what the policy sees and does.

Three parts:
* here, the environments themselves (`<name>_env.py`: run as `python environments/<name>_env.py
  serve|process|evaluate`, or copy one to write your own), `task.py` (what an environment defines),
  `data_sources.py`, `data/` and the hub packages `rlvr_<name>/`;
* `atropos_runtime/`: the Atropos runtime that turns a Task into training groups;
* `vf_bridge/`: Verifiers front doors (`load_environment`, v1 Tasksets) and the Verifiers bridge.

`RLVR_ENVS` marks this as rlvr-envs' own `environments` package: the hub packages (`rlvr_<name>`) check
it, so a user project's own `environments` package ahead on `sys.path` (a common name) is reported as
such instead of failing later with "cannot import name ... from 'environments'". For the same reason
importing this package checks that `rubrics` and `sandbox` are rlvr-envs' own, installed beside it.
"""

import importlib.util as _util
import os as _os

from environments.atropos_runtime.lazy_imports import install as _install_lazy_imports

RLVR_ENVS = True


class ShadowedPackageError(ImportError):
    """Another package of the same top-level name comes first on `sys.path` (message: which, and the fix)."""


def shadow_message(name: str, found: str, needed_by: str) -> str:
    """One line: `needed_by` needs rlvr-envs' package `name`, but `import name` finds `found` first."""
    return (
        f"{needed_by} needs rlvr-envs' `{name}` package, but `import {name}` finds {found} first on "
        f"sys.path (another package of that name, e.g. your project's own); rename that package, or run "
        f"from a directory that does not put it on sys.path (python puts the script's directory, or the "
        f"current one for -c / -m, first)"
    )


def _check_siblings() -> None:
    """rubrics/ and sandbox/ must be the ones installed beside this package (cheap: finds, imports nothing)."""
    here = _os.path.dirname(_os.path.dirname(_os.path.realpath(__file__)))
    for name in ("rubrics", "sandbox"):
        try:
            spec = _util.find_spec(name)
        except (ImportError, ValueError):
            continue
        origin = getattr(spec, "origin", None)
        if not origin or not _os.path.isabs(origin):  # namespace package, frozen or zip: nothing to compare
            continue
        if _os.path.basename(origin) == "__init__.py":
            origin = _os.path.dirname(origin)
        if _os.path.dirname(_os.path.realpath(origin)) != here:
            raise ShadowedPackageError(shadow_message(name, origin, "`environments` (rlvr-envs)"))


_check_siblings()
_install_lazy_imports()  # before anything imports atroposlib: see atropos_runtime/lazy_imports.py
