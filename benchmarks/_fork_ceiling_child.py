"""One process of `fork_ceiling.ForkCeiling` (stdlib only; run as `python3 -I THIS WORKER RUNNER PRELOAD`).

It builds the warm worker's image (the preloaded modules, the trusted harness, `_settle`) and then, for
each request line on stdin (`{"programs": [...], "expect": str|null}`), forks one child per program
that runs it as `__main__` with stdout on a pipe, and answers one line on its own descriptor:
`{"lat_ms": [...], "ok": n}`. No isolation, no control protocol, no harness: the least a
fork-per-job design can do per job.
"""

import builtins
import importlib.util
import json
import os
import sys
import time


def _load(name: str, path: str):
    """The module at `path`, or the package whose directory `path` is, imported as `name`."""
    if os.path.isdir(path):
        spec = importlib.util.spec_from_file_location(
            name, os.path.join(path, "__init__.py"), submodule_search_locations=[path]
        )
    else:
        spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def _run(source: str, expect: bytes | None) -> tuple[float, bool]:
    start = time.perf_counter()
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            os.close(r)
            os.dup2(w, 1)
            os.close(w)
            exec(compile(source, "<job>", "exec"), {"__name__": "__main__", "__builtins__": builtins})
            sys.stdout.flush()
            code = 0
        finally:
            os._exit(code)
    os.close(w)
    chunks = []
    while True:
        data = os.read(r, 1 << 16)
        if not data:
            break
        chunks.append(data)
    os.close(r)
    _, status, _ = os.wait4(pid, 0)
    ok = status == 0 and (expect is None or b"".join(chunks) == expect)
    return (time.perf_counter() - start) * 1000, ok


def main(argv: list[str]) -> int:
    worker_src, runner_src, preload = argv[1], argv[2], argv[3]
    for name in filter(None, preload.split(",")):
        try:
            __import__(name)
        except ImportError:
            pass
    _load("rlvr_runner", runner_src)
    worker = _load("rlvr_worker", worker_src)
    reply = os.dup(1)  # answers go here; fd 1 itself is each job's stdout
    null = os.open(os.devnull, os.O_WRONLY)
    os.dup2(null, 1)
    os.close(null)
    worker._settle()
    os.write(reply, b"ready\n")
    for line in sys.stdin:
        request = json.loads(line)
        expect = request["expect"].encode() if request["expect"] is not None else None
        lat, ok = [], 0
        for source in request["programs"]:
            ms, good = _run(source, expect)
            lat.append(ms)
            ok += good
        os.write(reply, json.dumps({"lat_ms": lat, "ok": ok}).encode() + b"\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
