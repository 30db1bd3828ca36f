"""`rlvr-reward-server`: the reward server as a command, and `app_from_env` as an app factory.

    rlvr-reward-server --rubric math --rubric exact --port 8008            # 127.0.0.1 by default
    rlvr-reward-server --rubric judge --judge-url http://127.0.0.1:9002/v1 --workers 2
    rlvr-reward-server --rubric mine=my_pkg.rewards:build_rubric          # any Rubric factory
    RLVR_REWARD_RUBRICS=math,exact uvicorn --factory rubrics.server.cli:app_from_env --port 8008

A rubric spec is a builtin name (`math`, `exact`, `code`, `judge`, built from the `--math-workers`,
`--sandbox`, `--judge-url`, `--judge-model` options) or `name=module:attr`, where `attr` is a Rubric
or a callable returning one (this is how other scorers, e.g. a Ray-backed one, plug in). The command
passes its settings to `app_from_env` through `RLVR_REWARD_RUBRICS` (comma-separated specs),
`RLVR_REWARD_OPTIONS` (JSON of the builtin options) and `RLVR_REWARD_CONFIG` (JSON `ServerConfig`),
so `--workers N` runs N processes, each with its own rubrics (pools, cache), sharing the port.
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import sys
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from fastapi import FastAPI

from rubrics.core import ExactMatchRubric, Rubric
from rubrics.judge.rubric import JudgeConfig
from rubrics.server.app import ServerConfig, create_app


class _Formatter(argparse.ArgumentDefaultsHelpFormatter, argparse.RawDescriptionHelpFormatter):
    """Defaults shown after every option; the epilog's layout kept."""


def _math(o: Mapping[str, Any]) -> Rubric:
    from rubrics.math import MathRubric

    return MathRubric(workers=int(o.get("math_workers", 2)))


def _code(o: Mapping[str, Any]) -> Rubric:
    from rubrics.code.rubric import CodeRubric

    return CodeRubric(str(o.get("sandbox", "auto")))


def _judge(o: Mapping[str, Any]) -> Rubric:
    from rubrics.judge.rubric import JudgeRubric

    return JudgeRubric(
        JudgeConfig(base_url=o.get("judge_url", JudgeConfig().base_url), model=o.get("judge_model", "judge"))
    )


BUILTINS: dict[str, Callable[[Mapping[str, Any]], Rubric]] = {
    "math": _math,
    "exact": lambda _o: ExactMatchRubric(),
    "code": _code,
    "judge": _judge,
}


def _specs(specs: Sequence[str]) -> list[tuple[str, str, Any]]:
    """(name, target, what it names) per spec: a built-in's factory (target "") or the imported
    object. Raises ValueError / ImportError / AttributeError for a spec that cannot build."""
    out = []
    for spec in (s.strip() for s in specs if s.strip()):
        name, _, target = spec.partition("=")
        if not target:
            if name not in BUILTINS:
                raise ValueError(
                    f"unknown built-in rubric {name!r}; built-ins: {', '.join(sorted(BUILTINS))}"
                )
            out.append((name, "", BUILTINS[name]))
            continue
        module, _, attr = target.partition(":")
        if not module or not attr:
            raise ValueError(f"rubric spec {spec!r}: expected name=module:attr")
        out.append((name, target, getattr(importlib.import_module(module), attr)))
    return out


def check_specs(specs: Sequence[str]) -> None:
    """Raise for a spec that cannot build, without building anything (the command checks before it
    starts server processes)."""
    _specs(specs)


def build_rubrics(specs: Sequence[str], options: Mapping[str, Any] | None = None) -> dict[str, Rubric]:
    """Rubrics by name from specs (see module doc). Raises ValueError for a malformed spec."""
    rubrics: dict[str, Rubric] = {}
    for name, target, obj in _specs(specs):
        rubric = obj(options or {}) if not target else obj if isinstance(obj, Rubric) else obj()
        if not isinstance(rubric, Rubric):
            raise ValueError(f"{target} gave {type(rubric).__name__}, not a Rubric")
        rubrics[name] = rubric
    if not rubrics:
        raise ValueError("no rubric to serve")
    return rubrics


def app_from_env() -> FastAPI:
    """The app described by `RLVR_REWARD_RUBRICS` / `_OPTIONS` / `_CONFIG` (for `uvicorn --factory`)."""
    specs = os.environ.get("RLVR_REWARD_RUBRICS", "").split(",")
    options = json.loads(os.environ.get("RLVR_REWARD_OPTIONS") or "{}")
    config = ServerConfig.model_validate_json(os.environ.get("RLVR_REWARD_CONFIG") or "{}")
    announce = os.environ.get("RLVR_REWARD_ANNOUNCE") or None
    return create_app(build_rubrics(specs, options), config, owns_rubrics=True, announce=announce)


EPILOG = """built-in rubrics (--rubric NAME):
  math    rubrics.math.MathRubric: answer in \\boxed{} (or marked) vs the gold; CAS workers: --math-workers
  exact   rubrics.core.ExactMatchRubric: normalised exact match (list golds: any of them)
  code    rubrics.code.CodeRubric: the gold is a test suite, run in the sandbox (--sandbox)
  judge   rubrics.judge.JudgeRubric: an LLM judge at --judge-url serving --judge-model
  NAME=module:attr  any Rubric, or a callable returning one

examples:
  rlvr-reward-server --rubric math --rubric exact
  rlvr-reward-server --rubric judge --judge-url http://127.0.0.1:9002/v1 --judge-model judge
  curl -s 127.0.0.1:8008/score -d '{"rubric": "exact", "completion": "Paris", "answer": "Paris"}'

routes: POST /score, /score_batch, /get_reward (OpenRLHF); GET /readyz, /healthz, /metrics, /docs"""


def main(argv: Sequence[str] | None = None) -> None:
    p = argparse.ArgumentParser(
        prog="rlvr-reward-server",
        description=__doc__.split("\n\n")[0],
        epilog=EPILOG,
        formatter_class=_Formatter,
    )
    p.add_argument(
        "--rubric",
        action="append",
        required=True,
        help="built-in name or name=module:attr (repeat it; required)",
        metavar="SPEC",
    )
    p.add_argument("--host", default="127.0.0.1", help="address to listen on")
    p.add_argument("--port", type=int, default=8008, help="port to listen on")
    p.add_argument("--workers", type=int, default=1, help="server processes sharing the port")
    p.add_argument("--math-workers", type=int, default=2, help="CAS worker processes per server process")
    p.add_argument("--sandbox", default="auto", help="code rubric's sandbox backend")
    p.add_argument("--judge-url", default=JudgeConfig().base_url, help="judge rubric's endpoint")
    p.add_argument("--judge-model", default="judge", help="judge rubric's model name")
    p.add_argument("--rubric-inflight", action="append", default=[], help="name=N: that rubric's window")
    for field, info in ServerConfig.model_fields.items():
        if field not in ("special_tokens", "rubric_inflight"):
            p.add_argument(
                f"--{field.replace('_', '-')}",
                type=type(info.default) if info.default is not None else str,
                default=argparse.SUPPRESS,
                help=f"{info.description or ''} (default: {info.default})".lstrip(),
            )
    args = p.parse_args(argv)
    options = {
        "math_workers": args.math_workers,
        "sandbox": args.sandbox,
        "judge_model": args.judge_model,
        "judge_url": args.judge_url,
    }
    try:
        check_specs(args.rubric)
    except (ValueError, ImportError, AttributeError) as exc:
        p.error(str(exc))
    overrides: dict[str, Any] = {
        f: getattr(args, f) for f in ServerConfig.model_fields if getattr(args, f, None) is not None
    }
    windows = dict(item.split("=", 1) for item in args.rubric_inflight)
    # the math rubric's window: enough to keep its CAS workers and the event loop busy, small enough
    # that cheap checks do not overtake CAS-bound ones without bound (see rubrics.server.app); 6 per CAS
    # worker gave the shortest tail at the same req/s (benchmarks/results/server_bench.md)
    windows.setdefault("math", 6 * args.math_workers)
    overrides["rubric_inflight"] = {k: int(v) for k, v in windows.items()}
    config = ServerConfig(**overrides)
    os.environ["RLVR_REWARD_RUBRICS"] = ",".join(args.rubric)
    os.environ["RLVR_REWARD_OPTIONS"] = json.dumps(options)
    os.environ["RLVR_REWARD_CONFIG"] = config.model_dump_json()
    url = f"http://{args.host}:{args.port}"
    os.environ["RLVR_REWARD_ANNOUNCE"] = url
    print(
        f"rlvr-reward-server: listening on {url} (rubrics: {', '.join(args.rubric)}; {args.workers} "
        f"process(es)); it says when ready, or GET {url}/readyz",
        file=sys.stderr,
        flush=True,
    )
    import uvicorn

    uvicorn.run(
        "rubrics.server.cli:app_from_env",
        factory=True,
        host=args.host,
        port=args.port,
        workers=args.workers,
        log_level="warning",
        access_log=False,
    )


if __name__ == "__main__":
    main()
