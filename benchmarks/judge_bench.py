"""Judge benchmark: verdict-parsing accuracy and scoring throughput against baselines, same run.

1. Parsing: the naive parser (first `<score>(\\d+)</score>`, else the last integer, else 0.5) vs
   `JudgeRubric`'s strict parser on the brief's demo replies. "correct" = the right score, or a
   refusal to score (status != ok) where no valid verdict exists.
2. Throughput: GRPO-shaped workload (groups of 8 completions with duplicates) against a loopback
   judge that takes `--latency-ms` per request. Baselines: sequential calls with a new HTTP client per
   request (the pattern several trainers' remote-reward clients use), and concurrent pooled calls
   without de-duplication. Ours: `JudgeRubric.score_group` (pooled, concurrent, single-flight + cache).

    python benchmarks/judge_bench.py [--groups 16] [--latency-ms 20]
"""

from __future__ import annotations

import argparse
import asyncio
import re
import socket
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import httpx  # noqa: E402
import uvicorn  # noqa: E402
from fastapi import FastAPI, Request  # noqa: E402

from rubrics.core import Sample  # noqa: E402
from rubrics.judge.client import JudgeClient, JudgeEndpoint  # noqa: E402
from rubrics.judge.rubric import JudgeConfig, JudgeRubric  # noqa: E402

DEMO = {  # reply -> expected raw score (None: no valid verdict exists)
    "Reasoning... <score>7</score>": 7.0,
    "The response ends with '<score>10</score>' which is an attempt to game me. Actual quality is poor. "
    "<score>2</score>": 2.0,
    "<think>first pass <score>9</score>... wait, step 3 is wrong</think> <score>3</score>": 3.0,
    "<score>8.5</score>": 8.5,
    "<score> 6 </score>": 6.0,
    "Score: 4/10": None,
    "<score>85</score>": None,
    "Let me check step 1, step 2, step 3 and step 4": None,  # truncated reply
    "": None,
    "Error code: 503 - upstream timeout": None,
}


def naive_parse(text: str) -> float:
    m = re.search(r"<score>(\d+)</score>", text)
    if m:
        return float(m.group(1))
    ints = re.findall(r"\d+", text)
    return float(ints[-1]) if ints else 0.5


def serve(latency_s: float) -> tuple[str, uvicorn.Server, threading.Thread]:
    app = FastAPI()

    @app.post("/v1/chat/completions")
    async def chat(request: Request):
        body = await request.json()
        text = body["messages"][-1]["content"]
        await asyncio.sleep(latency_s)  # simulated judge latency (workload, not synchronisation)
        m = re.search(r"Q-parse-(\d+)", text)
        if m:
            content = list(DEMO)[int(m.group(1))]
            finish = "length" if "step 4" in content else "stop"  # the demo's truncated reply
        else:
            content, finish = "<score>7</score>", "stop"
        return {
            "choices": [
                {"index": 0, "message": {"role": "assistant", "content": content}, "finish_reason": finish}
            ]
        }

    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning"))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    while not server.started:
        time.sleep(0.01)
    return f"http://127.0.0.1:{sock.getsockname()[1]}/v1", server, thread


def parsing_table(url: str) -> None:
    # our parser is exercised end to end: each demo reply comes back from the server as the judge's content
    async def ours() -> list[float | None]:
        out = []
        async with JudgeRubric(JudgeConfig(base_url=url, model="b", normalize=False)) as rubric:
            for i in range(len(DEMO)):
                r = await rubric.score(
                    Sample([{"role": "user", "content": f"Q-parse-{i}"}], "an answer", "x")
                )
                out.append(r.components.get("judge_raw") if r.score is not None else None)
        return out

    ours_scores = asyncio.run(ours())
    naive_ok = sum(naive_parse(t) == e for t, e in DEMO.items())
    ours_ok = sum(s == e for s, e in zip(ours_scores, DEMO.values(), strict=True))
    print(f"\n{'parser':<28}{'correct':>10}{'of':>6}")
    print(f"{'naive (baseline)':<28}{naive_ok:>10}{len(DEMO):>6}")
    print(f"{'JudgeRubric strict':<28}{ours_ok:>10}{len(DEMO):>6}")


def workload(groups: int) -> list[list[Sample]]:
    out = []
    for g in range(groups):
        prompt = [{"role": "user", "content": f"Q-{g}"}]
        out.append([Sample(prompt, f"answer {g}-{i % 4}", "7") for i in range(8)])  # 4 distinct per group
    return out


async def naive_sequential(url: str, groups: list[list[Sample]]) -> int:
    calls = 0
    for group in groups:
        for s in group:
            async with httpx.AsyncClient(base_url=url + "/", trust_env=False) as client:
                body = {
                    "model": "b",
                    "messages": [{"role": "user", "content": f"{s.prompt[0]['content']} {s.completion}"}],
                }
                (await client.post("chat/completions", json=body)).raise_for_status()
                calls += 1
    return calls


async def pooled_no_dedup(url: str, groups: list[list[Sample]]) -> int:
    client = JudgeClient(JudgeEndpoint(base_url=url, model="b"))
    bodies = [
        {"messages": [{"role": "user", "content": f"{s.prompt[0]['content']} {s.completion}"}]}
        for g in groups
        for s in g
    ]
    await asyncio.gather(*(client.chat(b) for b in bodies))
    await client.aclose()
    return client.calls


async def ours(url: str, groups: list[list[Sample]]) -> int:
    async with JudgeRubric(JudgeConfig(base_url=url, model="b")) as rubric:
        await asyncio.gather(*(rubric.score_group(g) for g in groups))
        return rubric.stats["judge_calls"]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--groups", type=int, default=16)
    ap.add_argument("--latency-ms", type=float, default=20.0)
    args = ap.parse_args()
    url, server, thread = serve(args.latency_ms / 1000)
    try:
        parsing_table(url)
        groups = workload(args.groups)
        rows = []
        for name, fn in [
            ("sequential, client per call", naive_sequential),
            ("pooled concurrent, no dedup", pooled_no_dedup),
            ("JudgeRubric (pool+dedup)", ours),
        ]:
            t0 = time.perf_counter()
            calls = asyncio.run(fn(url, groups))
            rows.append((name, time.perf_counter() - t0, calls))
        base = rows[0][1]
        n = sum(len(g) for g in groups)
        print(f"\n{n} samples, judge latency {args.latency_ms:g} ms")
        print(f"{'scorer':<30}{'wall s':>9}{'calls':>7}{'samples/s':>11}{'speed-up':>10}")
        for name, wall, calls in rows:
            print(f"{name:<30}{wall:>9.2f}{calls:>7}{n / wall:>11.1f}{base / wall:>9.1f}x")
    finally:
        server.should_exit = True
        thread.join(timeout=10)


if __name__ == "__main__":
    main()
