"""Which Verifiers API this interpreter has: the one place that decides (front doors, bridge, tests).

Verifiers is an optional dependency of rlvr-envs (extras `verifiers-classic` / `verifiers-v1`):

| installed verifiers  | classic (`import verifiers as vf`, `load_environment`) | v1 (`verifiers.v1`, `Taskset`) |
|----------------------|--------------------------------------------------------|--------------------------------|
| none                 | no                                                     | no                             |
| 0.1.9.post2 .. 0.1.x | yes                                                    | no                             |
| 0.2.x .. 0.3.x       | yes                                                    | yes                            |
| 0.4.x                | no (the package only sets `__version__`)               | yes                            |

Detection is by feature, never by version number: classic = the top-level package exposes
`SingleTurnEnv`, `Rubric` and `load_environment`; v1 = `verifiers.v1` imports and exposes `Taskset`,
`Task` and `reward`. `detect()` never raises; `require(api)` returns the module or raises
`VerifiersAPIError` (an ImportError) with one message naming the installed version, what is missing
and the install that fixes it; `missing_v1_exports` gives environment modules the same error for a v1
export (`MathTaskset`, ...) read where v1 is absent. A verifiers whose own import fails (e.g. 0.4 beside openai>=3, or 0.3
beside mcp>=2) is reported with that import error, not as "not installed".
"""

from __future__ import annotations

import functools
import importlib
import importlib.metadata
import importlib.util
import os
from collections.abc import Callable
from dataclasses import dataclass
from types import ModuleType
from typing import Any, Literal

API = Literal["classic", "v1"]

INSTALL_HINT = {
    "classic": "pip install 'rlvr-envs[verifiers-classic]'  (verifiers>=0.1.9.post2,<0.4)",
    "v1": "pip install 'rlvr-envs[verifiers-v1]'  (verifiers>=0.3.1,<0.5)",
}
DEPENDENCY_HINT = (
    "its dependencies do not match it (verifiers 0.4 needs openai<3 and mcp==2.0.0; 0.2-0.3 need "
    "openai>=2.9 and mcp<2): reinstall verifiers with its own pins and run `pip check`"
)


class VerifiersAPIError(ImportError):
    """The requested Verifiers API is not usable in this interpreter (message says why and the fix)."""


class VerifiersV1Error(ValueError):
    """The v1 Taskset cannot run through this bridge (the message says why)."""


@dataclass(frozen=True)
class Verifiers:
    """What `detect()` found. `errors[api]` holds why an API that is present failed to import."""

    version: str | None
    classic: bool
    v1: bool
    errors: dict[str, str]

    @property
    def apis(self) -> tuple[API, ...]:
        return tuple(api for api in ("classic", "v1") if getattr(self, api))

    @property
    def kind(self) -> Literal["classic", "v1", "both", "none"]:
        """One word for logs and reports: both = 0.2/0.3 (classic and v1 side by side)."""
        return {("classic", "v1"): "both", ("classic",): "classic", ("v1",): "v1"}.get(self.apis, "none")

    def problem(self, api: API) -> str | None:
        """None when `api` is usable, else the one-line explanation `require` raises."""
        if getattr(self, api):
            return None
        if self.version is None:
            return f"verifiers is not installed; the {api} front door needs it: {INSTALL_HINT[api]}"
        if api in self.errors:
            return f"verifiers {self.version} is installed but its {api} API fails to import ({self.errors[api]}); {DEPENDENCY_HINT}"
        other = {"classic": "v1", "v1": "classic"}[api]
        use = (
            f"; this install has the {other} API: "
            + ("`vf-eval <env-id> ...` loads the v1 Taskset" if other == "v1" else "use `load_environment()`")
            if getattr(self, other)
            else ""
        )
        return f"verifiers {self.version} has no {api} API{use}; for {api}: {INSTALL_HINT[api]}"


def _version() -> str | None:
    try:
        return importlib.metadata.version("verifiers")
    except importlib.metadata.PackageNotFoundError:
        return None


def _find(name: str) -> Any:
    """`find_spec` of a top-level module, None when it is absent (a finder may raise for a hidden one)."""
    try:
        return importlib.util.find_spec(name)
    except (ImportError, ValueError):
        return None


def _has_subpackage(parent: str, child: str) -> bool:
    """`parent.child` exists on disk, found without importing `parent` (cheap for classic installs)."""
    spec = _find(parent)
    locations = getattr(spec, "submodule_search_locations", None) or []
    return any(
        os.path.isdir(os.path.join(loc, child)) or os.path.isfile(os.path.join(loc, child + ".py"))
        for loc in locations
    )


def _probe(module: str, names: tuple[str, ...]) -> tuple[bool, str | None]:
    try:
        mod = importlib.import_module(module)
    except Exception as exc:  # a broken dependency raises anything, not only ImportError
        return False, f"{type(exc).__name__}: {exc}"
    return all(hasattr(mod, n) for n in names), None


@functools.cache
def detect() -> Verifiers:
    """Feature-detect the installed Verifiers (cached; never raises)."""
    if _find("verifiers") is None:
        return Verifiers(None, False, False, {})
    version, errors = _version(), {}
    v1 = False
    if _has_subpackage("verifiers", "v1"):
        v1, err = _probe("verifiers.v1", ("Taskset", "Task", "TaskData", "reward"))
        if err:
            errors["v1"] = err
    classic, err = _probe("verifiers", ("SingleTurnEnv", "Rubric", "load_environment"))
    if err:
        errors["classic"] = err
    return Verifiers(version, classic, v1, errors)


def has_v1() -> bool:
    """True when the v1 front door (`verifiers.v1` Tasksets) can be offered."""
    return _has_subpackage("verifiers", "v1") and detect().v1


def missing_v1_exports(module: str, names: tuple[str, ...] | list[str]) -> Callable[[str], Any]:
    """A module `__getattr__` for a module whose v1 exports `names` could not be built (no usable
    `verifiers.v1`): reading one raises `VerifiersAPIError` with `require("v1")`'s reason (installed
    version, the fix) instead of a bare AttributeError; any other missing name is an AttributeError.
    The error is an ImportError, so `from <module> import <name>` keeps the message too."""
    wanted = frozenset(names)

    def __getattr__(name: str) -> Any:
        if name in wanted:
            problem = detect().problem("v1") or "verifiers.v1 was not usable when the module was imported"
            raise VerifiersAPIError(f"{module}.{name} is the verifiers v1 front door, but {problem}")
        raise AttributeError(f"module {module!r} has no attribute {name!r}")

    return __getattr__


def require(api: API) -> ModuleType:
    """The API's module (`verifiers` for classic, `verifiers.v1` for v1), or `VerifiersAPIError`."""
    problem = detect().problem(api)
    if problem:
        raise VerifiersAPIError(problem)
    return importlib.import_module("verifiers" if api == "classic" else "verifiers.v1")


def classic_client(client: Any) -> Any:
    """An `AsyncOpenAI` as the classic `evaluate()`/`generate()` client of this version.

    0.1.9 takes the AsyncOpenAI itself; 0.2+ rejects it ("Unsupported client type") and wants
    `vf.OpenAIChatCompletionsClient(client)`.
    """
    vf = require("classic")
    wrapper = getattr(vf, "OpenAIChatCompletionsClient", None)
    return client if wrapper is None or isinstance(client, wrapper) else wrapper(client)


def v1_runner_problem() -> str | None:
    """None when this `verifiers.v1` can run episodes in process the way the v1 bridge does
    (`Env.serving()` + `Env.slots()` + `Env.run_slot()`, `clients.ModelContext`: 0.3.1 .. 0.4.x),
    else the one-line reason (e.g. 0.2.x, whose v1 preview has another runner)."""
    v1 = require("v1")
    missing = [n for n in ("serving", "slots", "run_slot") if not hasattr(v1.Env, n)]
    try:
        importlib.import_module("verifiers.v1.clients").ModelContext  # noqa: B018
    except (ImportError, AttributeError):
        missing.append("clients.ModelContext")
    if missing:
        return (
            f"verifiers {detect().version}'s v1 API lacks {', '.join(missing)}: the v1 bridge needs "
            f"verifiers>=0.3.1 ({INSTALL_HINT['v1']})"
        )
    return None
