#!/usr/bin/env python3
r"""In-process CPU per `/score` request: our app vs the naive inline server, no sockets, no uvicorn.

    python benchmarks/server_asgi_bench.py [--requests 3000] [--concurrency 64] [--rounds 5]
                                           [--checker math|exact] [--base DIR]

Each app runs in its own fresh process (the naive one is `server_bench.NAIVE`, ours is
`rubrics.server.cli.app_from_env` with the command's defaults for `--rubric math`) and is driven
through ASGI directly: `--concurrency` tasks post the same distinct math items as `server_bench.py`
(each under its own prompt id, so our result cache never hits) back to back. Reported per app:
the CPU microseconds per request of the app's process (event loop + threads; the driver's share is
the same for both) and of its CAS workers, and the wall time. This is the part of
`server_bench.py`'s "server" column that the HTTP server (uvicorn) does not add, and is far less
noisy on a shared machine than the socket benchmark; ratios are against the naive app of the
same round, and their medians over the rounds are printed last. `--checker exact` swaps the math
checker for an exact string match in both apps (ours: `ExactMatchRubric`), leaving the cost of the
servers themselves (HTTP framework, parsing, bookkeeping, response). `--base DIR` adds the app of
another checkout (e.g. `git worktree add /tmp/base main`), measured the same way, for before/after.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import pathlib
import statistics
import subprocess
import sys
import time

ROOT = pathlib.Path(os.environ.get("RLVR_BENCH_ROOT") or pathlib.Path(__file__).resolve().parents[1])
sys.path.insert(0, str(ROOT))


async def _lifespan(app) -> tuple[asyncio.Queue, asyncio.Task]:
    inbox: asyncio.Queue = asyncio.Queue()
    outbox: asyncio.Queue = asyncio.Queue()
    task = asyncio.create_task(app({"type": "lifespan", "asgi": {"version": "3.0"}}, inbox.get, outbox.put))
    await inbox.put({"type": "lifespan.startup"})
    msg = await outbox.get()
    assert msg["type"] == "lifespan.startup.complete", msg
    return inbox, task


async def post(app, path: str, body: bytes) -> tuple[int, bytes]:
    """One request through the ASGI app: (status, body)."""
    scope = {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": "POST",
        "scheme": "http",
        "path": path,
        "raw_path": path.encode(),
        "query_string": b"",
        "root_path": "",
        "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())],
        "client": ("127.0.0.1", 40000),
        "server": ("127.0.0.1", 8008),
    }
    sent = False

    async def receive():
        nonlocal sent
        if sent:
            await asyncio.Event().wait()
        sent = True
        return {"type": "http.request", "body": body, "more_body": False}

    status, chunks = 0, []

    async def send(msg):
        nonlocal status
        if msg["type"] == "http.response.start":
            status = msg["status"]
        elif msg["type"] == "http.response.body":
            chunks.append(msg.get("body", b""))

    await app(scope, receive, send)
    return status, b"".join(chunks)


async def drive(app, bodies: list[bytes], concurrency: int) -> float:
    """Post every body (`concurrency` at a time); the wall seconds it took. Asserts 200s."""
    it = iter(bodies)

    async def worker():
        for body in it:
            status, out = await post(app, "/score", body)
            assert status == 200, out

    t0 = time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(concurrency)))
    return time.perf_counter() - t0


def _exact(completion: str, answer: str) -> object:
    from rubrics.math import Verdict

    ok = completion.strip() == answer.strip()
    return Verdict(ok, "match_string" if ok else "mismatch")


def child(kind: str, checker: str, n: int, concurrency: int) -> None:
    from benchmarks.server_bench import NAIVE, bodies, cpu_s

    if kind == "naive":
        ns: dict = {}
        exec(compile(NAIVE, "naive_server", "exec"), ns)
        app = ns["app"]
        if checker == "exact":
            ns["verify"] = _exact  # the route's checker, looked up when called
    else:
        spec = "math" if checker == "math" else "math=rubrics.core:ExactMatchRubric"
        os.environ["RLVR_REWARD_RUBRICS"] = spec
        os.environ["RLVR_REWARD_OPTIONS"] = json.dumps({"math_workers": 2})
        os.environ["RLVR_REWARD_CONFIG"] = json.dumps({"rubric_inflight": {"math": 12}})
        from rubrics.server.cli import app_from_env

        app = app_from_env()
    work = bodies(n + 500)

    async def main() -> dict:
        lifespan = None
        if kind != "naive":
            lifespan = await _lifespan(app)
            while not app.state.readiness["ready"]:
                await asyncio.sleep(0.05)
        elif checker == "math":
            from rubrics.math import verify

            verify("\\boxed{x+1}", "1+x")  # start the CAS pool, as its /readyz does
        await drive(app, work[n:], 8)  # warm-up
        cpu0, cas0 = cpu_s(os.getpid())
        wall = await drive(app, work[:n], concurrency)
        cpu1, cas1 = cpu_s(os.getpid())
        if lifespan is not None:
            await lifespan[0].put({"type": "lifespan.shutdown"})
        return {"app_us": 1e6 * (cpu1 - cpu0) / n, "cas_us": 1e6 * (cas1 - cas0) / n, "wall": wall}

    print(json.dumps(asyncio.run(main())))
    os._exit(0)  # the naive app's process-wide pool has no shutdown hook


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--requests", type=int, default=3000)
    ap.add_argument("--concurrency", type=int, default=64)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--base", help="another checkout of the project: its app too, as 'base'")
    ap.add_argument("--checker", choices=["math", "exact"], default="math", help="exact: server cost only")
    ap.add_argument("--child", choices=["naive", "ours"])
    args = ap.parse_args()
    if args.child:
        child(args.child, args.checker, args.requests, args.concurrency)
        return
    apps = {"naive": ("naive", ROOT), "ours": ("ours", ROOT)}
    if args.base:
        apps["base"] = ("ours", pathlib.Path(args.base).resolve())
    print(
        f"{args.requests} requests per app and round, concurrency {args.concurrency}, "
        f"checker {args.checker}, cpus {os.cpu_count()}"
    )
    print(f"{'round':>5} {'app':<6} {'app us/req':>10} {'CAS us/req':>10} {'req/s':>7} {'x app us':>8}  load")
    ratios: dict[str, list[float]] = {name: [] for name in apps}
    for rnd in range(1, args.rounds + 1):
        rows = {}
        load0 = open("/proc/loadavg").read().split()[0]
        for name, (kind, root) in apps.items():
            env = {
                **os.environ,
                "PYTHONPATH": str(root),
                "RLVR_MATH_WORKERS": "2",
                "RLVR_BENCH_ROOT": str(root),
            }
            cmd = [sys.executable, __file__, "--child", kind, "--requests", str(args.requests)]
            cmd += ["--concurrency", str(args.concurrency), "--checker", args.checker]
            out = subprocess.run(cmd, env=env, capture_output=True, text=True, check=True).stdout
            rows[name] = json.loads(out.strip().splitlines()[-1])
        load1 = open("/proc/loadavg").read().split()[0]
        for name, r in rows.items():
            ratios[name].append(r["app_us"] / rows["naive"]["app_us"])
            print(
                f"{rnd:>5} {name:<6} {r['app_us']:>10.0f} {r['cas_us']:>10.0f} {args.requests / r['wall']:>7.0f} "
                f"{ratios[name][-1]:>8.2f}  {load0}->{load1}"
            )
    print("median x app us: " + ", ".join(f"{n} {statistics.median(r):.2f}" for n, r in ratios.items()))


if __name__ == "__main__":
    main()
