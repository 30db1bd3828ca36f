"""Which bridge runs a Verifiers id: the classic one (`load_environment`) or the v1 one (a Taskset).

Kept apart from both bridges so that choosing costs nothing: with no id (`--help`) neither verifiers
nor the v1 bridge's endpoint (FastAPI) is imported.
"""

from __future__ import annotations

import importlib
import sys

from environments.vf_bridge.compat import VerifiersV1Error, detect


def bridge_for(classic_env: type, argv: list[str] | None = None) -> type:
    """The bridge class for the id on the command line: `VerifiersV1Env` for a v1 Taskset, else the
    classic `classic_env`; exits with one line when the id's API is missing from this verifiers."""
    argv = sys.argv[1:] if argv is None else argv
    name = next((a.split("=", 1)[1] if "=" in a else (argv[i + 1] if i + 1 < len(argv) else "")
                 for i, a in enumerate(argv) if a.startswith("--env.vf_env_name")), "")  # fmt: skip
    try:
        api = env_api(name)
    except VerifiersV1Error as exc:
        raise SystemExit(f"verifiers bridge: error: {exc}") from None
    if api != "v1":
        return classic_env
    from environments.vf_bridge.v1_env import VerifiersV1Env  # its endpoint imports FastAPI: only now

    return VerifiersV1Env


def env_api(name: str) -> str:
    """ "v1" when `name` is a v1 Taskset module (exports a Taskset subclass in `__all__`), "classic"
    when it has `load_environment`; a `VerifiersV1Error` when this verifiers lacks that API."""
    if not name:
        return "classic"  # e.g. --help: nothing to load (and verifiers stays unimported)
    found = detect()
    if found.kind == "none":
        return "classic"  # the classic bridge says what is missing
    if found.kind == "classic":
        try:
            importlib.import_module(name.rsplit("/", 1)[-1].split("@", 1)[0].replace("-", "_"))
        except ModuleNotFoundError as exc:
            if (exc.name or "").startswith("verifiers.v1"):
                raise VerifiersV1Error(
                    f"{name} is a verifiers v1 Taskset (it imports verifiers.v1): {found.problem('v1')}"
                ) from None
        return "classic"
    from verifiers.v1.utils.loaders import import_taskset

    try:
        module = import_taskset(name)
    except ModuleNotFoundError:
        try:  # a dotted module path: v1 cannot load it, a classic `load_environment` id can be one
            module = importlib.import_module(name)
        except ImportError:
            return "v1" if found.kind == "v1" else "classic"  # the loader's own message follows
    import verifiers.v1 as vf

    exported = [getattr(module, n, None) for n in getattr(module, "__all__", None) or []]
    if any(isinstance(c, type) and issubclass(c, vf.Taskset) for c in exported):
        return "v1"
    if found.kind == "v1" and hasattr(module, "load_environment"):
        raise VerifiersV1Error(
            f"{name} is a classic Verifiers environment (load_environment, no v1 Taskset in __all__), "
            f"but verifiers {found.version} has only the v1 API: "
            f"{found.problem('classic')}"
        )
    return "v1" if found.kind == "v1" else "classic"
