"""Checks run INSIDE a matrix venv by scripts/verifiers_matrix.py (the venv's own python, no checkout
on sys.path). Each prints one JSON line on success and exits 1 with the reason on stderr otherwise.

    python matrix_probe.py installed '["qa", ...]'     what prime installed, from the files on disk
    python matrix_probe.py load '["qa", ...]'          every env through each API this verifiers has
    python matrix_probe.py harness-deps                the v1 chat harness's uv-script dependencies
"""

from __future__ import annotations

import importlib
import importlib.metadata as md
import itertools
import json
import re
import sys
import typing
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def fail(message: str) -> None:
    print(message, file=sys.stderr)
    sys.exit(1)


def installed(envs: list[str]) -> dict:
    try:
        core = md.distribution("rlvr-envs")
    except md.PackageNotFoundError:
        fail("rlvr-envs is not installed (prime/uv did not resolve it from the local wheel)")
    if core.read_text("direct_url.json") and '"editable": true' in core.read_text("direct_url.json"):
        fail("rlvr-envs is an editable install; expected the wheel")
    files = {str(f) for f in core.files or []}
    data = sorted(f for f in files if f.startswith("environments/data/") and f.endswith(".jsonl"))
    if not data or not all(Path(core.locate_file(f)).is_file() for f in data):
        fail(f"rlvr-envs installed without its data files: {data}")
    import environments

    if Path(sys.prefix).resolve() not in Path(environments.__file__).resolve().parents:
        fail(f"`environments` imports from {environments.__file__}, not from this venv's installed wheel")
    hubs = {}
    for name in envs:
        try:
            dist = md.distribution(f"rlvr-{name.replace('_', '-')}")
        except md.PackageNotFoundError:
            fail(f"rlvr-{name.replace('_', '-')} is not installed")
        url = json.loads(dist.read_text("direct_url.json") or "{}")
        want = (ROOT / "environments" / f"rlvr_{name}").as_uri()
        if url.get("url") != want or not url.get("dir_info", {}).get("editable"):
            fail(f"rlvr-{name}: expected an editable install of {want}, found {url}")
        hubs[name] = dist.version
    return {"verifiers": md.version("verifiers"), "rlvr-envs": core.version, "data": len(data), "hubs": hubs}


def load(envs: list[str]) -> dict:
    from environments.vf_bridge import compat as vf_compat

    info = vf_compat.detect()
    result: dict = {"kind": info.kind, "classic": {}, "v1": {}}
    for name in envs:
        module = importlib.import_module(f"rlvr_{name}")
        tasksets = [n for n in module.__all__ if n.endswith("Taskset")]
        classic_only = bool(getattr(module, "V1_NOT_OFFERED", None))  # e.g. tool envs: no v1 Taskset
        if bool(tasksets) != (info.v1 and not classic_only):
            fail(f"rlvr_{name}.__all__ = {module.__all__} on a verifiers with v1={info.v1}")
        if info.classic:
            import verifiers as vf

            env = vf.load_environment(f"rlvr-{name}")
            result["classic"][name] = len(env.get_eval_dataset())
        else:
            try:
                module.load_environment()
            except vf_compat.VerifiersAPIError as exc:
                if "has no classic API" not in str(exc):
                    fail(f"unexpected classic error: {exc}")
            else:
                fail("load_environment() worked on a verifiers without the classic API")
        if info.v1 and not classic_only:
            from verifiers.v1.utils.loaders import taskset_class

            cls = taskset_class(f"rlvr-{name}")
            config_cls = typing.get_args(cls.__orig_bases__[0])[1]
            tasks = list(itertools.islice(iter(cls(config_cls(id=f"rlvr-{name}"))), 3))
            if len(tasks) != 3 or not all(t.data.answer and t.data.prompt for t in tasks):
                fail(f"rlvr-{name}: v1 taskset gave {tasks}")
            result["v1"][name] = [t.data.uid for t in tasks]
        elif not info.v1:
            try:
                vf_compat.require("v1")
            except vf_compat.VerifiersAPIError:
                pass
            else:
                fail("require('v1') worked on a verifiers without v1")
    return result


def harness_deps() -> list[str]:
    import verifiers.v1.harnesses as harnesses

    base = Path(harnesses.__file__).parent
    deps: set[str] = set()
    for path in [*base.glob("null/*.py"), *base.glob("utils/*.py")]:
        for match in re.finditer(r"dependencies = \[([^\]]*)\]", path.read_text()):
            deps |= set(re.findall(r'\\?"([^"\\]+)\\?"', match.group(1)))
    if not deps:
        fail("no uv-script dependencies found in verifiers.v1.harnesses (null / utils)")
    return sorted(deps)


if __name__ == "__main__":
    command, *args = sys.argv[1:]
    if command == "installed":
        out = installed(json.loads(args[0]))
    elif command == "load":
        out = load(json.loads(args[0]))
    elif command == "harness-deps":
        out = harness_deps()
    else:
        fail(f"unknown command {command!r}")
    print(json.dumps(out))
