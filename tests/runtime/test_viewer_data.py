"""What the output files carry for judging a sample, and what the viewer reads from them (no browser:
tests/runtime/test_viewer_in_browser.py drives the page itself).

A real multi-turn run: the guess-a-number env on a scripted loopback policy, whose environment fails
at turn 2, so samples not solved at turn 1 are unverified and groups with none solved are dropped.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import get_type_hints

import httpx
import pytest
from atroposlib.envs.base import ScoredDataGroup
from transformers import AutoTokenizer

from environments.atropos_runtime.cli import main as rlvr
from environments.atropos_runtime.local_model import build_tiny_model
from environments.atropos_runtime.output import GroupWriter
from environments.atropos_runtime.viewer import load_run, page_json, write_viewer
from tests.runtime.guess_env import binary_search_policy
from tests.runtime.scripted_policy import ScriptedPolicy
from tests.runtime.test_episodes import make_env

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def tiny() -> Path:
    return build_tiny_model(os.environ.get("RLVR_TINY_MODEL") or ROOT / ".cache" / "tiny-model")


@pytest.fixture
def policy(tiny):
    with ScriptedPolicy(AutoTokenizer.from_pretrained(tiny), binary_search_policy) as server:
        yield server


def jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


async def test_process_and_evaluate_write_what_judges_a_sample_and_the_viewer_reads_it(
    tiny, policy, tmp_path
):
    from environments.atropos_runtime.modes import run_evaluate, run_process

    out = tmp_path / "run" / "groups.jsonl"
    env = make_env(
        tiny, policy, max_turns=3, total_steps=8, fail_on_turn=2, data_path_to_save_groups=str(out)
    )
    summary = await run_process(env)
    items = {item.uid: item for item in env.train_items}
    groups, rejected = jsonl(out), jsonl(out.with_suffix(".dropped.jsonl"))
    for g in groups:
        item = items[g["item_uid"]]
        assert g["prompt"] == item.prompt and g["answer"] == item.answer
        assert g["generation_params"]["temperature"] == 1.0 and g["generation_params"]["max_tokens"]
        for j, (masks, ep) in enumerate(zip(g["masks"], g["episodes"], strict=True)):
            assert g["prompt_tokens"][j] == masks.index(next(m for m in masks if m != -100))
            assert g["completion_tokens"][j] == sum(len(t["tokens"]) for t in ep["turns"])
            assert ep["stop_reason"] == "solved" and g["finish_reasons"][j] == "stop"
            assert set(g["rewards"][j]) == {"score", "status", "components", "feedback", "reason"}
    # nothing unverified in the output; every left-out sample in the dropped file with its reason
    assert all(r["status"] == "ok" for g in groups for r in g["rewards"])
    by_uid = {g["uid"]: g for g in groups}
    assert {r["reason"] for r in rejected} == {"error", "unverified"}
    for r in rejected:
        assert r["prompt"] == items[r["item_uid"]].prompt and r["answer"] == items[r["item_uid"]].answer
        assert all(s["reward"]["score"] is None and s["reward"]["status"] == "error" for s in r["samples"])
        assert all("environment backend is down" in s["reward"]["reason"] for s in r["samples"])
        assert all(len(s["episode"]["turns"]) == 2 for s in r["samples"])  # the failed turn is recorded
        kept = len(by_uid[r["uid"]]["scores"]) if r["reason"] == "unverified" else 0
        assert r["uid"] in by_uid if r["reason"] == "unverified" else r["uid"] not in by_uid
        assert kept + len(r["samples"]) == 4
    assert summary["dropped"] == {"error": sum(r["reason"] == "error" for r in rejected)}
    assert (
        summary["env"] == "guess"
        and summary["model"] == "scripted"
        and summary["settings"]["group_size"] == 4
    )

    # what serve sends a trainer: atroposlib's ScoredDataGroup fields only
    env = make_env(tiny, policy, max_turns=3)
    await env.setup()
    sent, _ = await env.collect_trajectories(env.train_items[0])
    assert sent is not None and set(sent) <= set(get_type_hints(ScoredDataGroup)), set(sent)
    await env.aclose()

    env = make_env(tiny, policy, max_turns=3, data_dir_to_save_evals=str(tmp_path / "run" / "eval"))
    await env.setup()
    await run_evaluate(env)
    await env.aclose()
    samples = jsonl(tmp_path / "run" / "eval" / "samples.jsonl")
    eval_items = {item.uid: item for item in env.eval_items}
    for s in samples:
        assert (
            s["answer"] == s["gold"] == eval_items[s["uid"]].answer
            and s["prompt"] == eval_items[s["uid"]].prompt
        )
        assert {"feedback", "components", "finish_reason", "generation_params", "prompt_tokens"} <= set(s)
        assert s["completion_tokens"] == sum(len(t["tokens"]) for t in s["episode"]["turns"])

    run = load_run(tmp_path / "run")
    kinds = [s["kind"] for s in run["samples"]]
    n_unverified = sum(len(r["samples"]) for r in rejected if r["reason"] == "unverified")
    assert kinds.count("kept") == sum(len(g["scores"]) for g in groups)
    assert kinds.count("unverified") == n_unverified and kinds.count("eval") == len(samples)
    assert kinds.count("dropped") == sum(len(r["samples"]) for r in rejected if r["reason"] == "error")
    assert run["header"]["env"] == "guess" and run["header"]["model"] == "scripted"
    for s in run["samples"]:
        group = run["groups"][s["g"]]
        # the prompt is the item's two messages, never earlier turns of an episode
        assert [m["role"] for m in group["prompt"]] == ["system", "user"]
        assert s["turns"] and s["turns"][0]["r"] == "assistant"
    multi = [s for s in run["samples"] if sum(t["r"] == "assistant" for t in s["turns"]) >= 2]
    assert multi and all([t["r"] for t in s["turns"][:3]] == ["assistant", "env", "assistant"] for s in multi)


def test_page_json_cannot_end_its_script_block_and_round_trips():
    hostile = {
        "a</script><script>x()</script>": "</SCRIPT ><!-- <![CDATA[ ]]> & &amp; \u2028\u2029",
        "c": "\x00\x01\x1b[31m\x7f\x85\x9f \ud800 lone surrogate",
        "n": [float("nan"), float("inf"), 1.5],
    }
    text = page_json(hostile)
    assert "<" not in text and ">" not in text and "&" not in text
    assert not any(ch in text for ch in "\x00\x01\x1b\x7f\x85\x9f\u2028\u2029\ud800")
    back = json.loads(text)
    assert back["c"] == hostile["c"] and back["n"] == ["nan", "inf", 1.5]
    assert back["a</script><script>x()</script>"] == hostile["a</script><script>x()</script>"]


def test_rlvr_view_builds_a_page_or_says_why_not(tmp_path, capsys):
    assert rlvr(["view", str(tmp_path / "missing"), "--no-open"]) == 2
    assert "no such file or folder" in capsys.readouterr().err
    (tmp_path / "notes.jsonl").write_text('{"hello": 1}\n')
    assert rlvr(["view", str(tmp_path), "--no-open"]) == 2
    assert "no process, evaluate or dropped JSONL" in capsys.readouterr().err
    run = tmp_path / "run"
    run.mkdir()
    (run / "samples.jsonl").write_text(
        json.dumps(
            {
                "uid": "u",
                "messages": [{"role": "user", "content": "q"}, {"role": "assistant", "content": "a"}],
                "score": None,
                "status": "timeout",
                "reason": "inference timed out",
            }
        )
        + "\n"  # fmt: skip
    )
    assert rlvr(["view", str(run), "--no-open", "--out", str(tmp_path / "page.html")]) == 0
    page = (tmp_path / "page.html").read_text()
    assert "<title>rlvr · run</title>" in page and "inference timed out" in page
    loaded = load_run(run)["samples"]
    assert loaded[0]["status"] == "timeout" and loaded[0]["turns"][0]["c"] == "a"
    # a drop that a resumed run has since written is not shown as dropped
    (run / "groups.jsonl").write_text(json.dumps({"uid": "g#0", "scores": [1.0], "messages": [[]]}) + "\n")
    drops = [{"uid": "g#0", "reason": "timeout", "samples": []}, {"uid": "g#0", "reason": "unverified", "samples": []},
             {"uid": "h#0", "reason": "timeout", "samples": []}]  # fmt: skip
    (run / "groups.dropped.jsonl").write_text("".join(json.dumps(d) + "\n" for d in drops))
    resumed = load_run(run)
    assert [(g["uid"], g["drop"]) for g in resumed["groups"]] == [
        ("g#0", None),
        ("u", None),
        ("g#0", "unverified"),
        ("h#0", "timeout"),
    ]
    assert resumed["notes"] == [
        "groups.dropped.jsonl: 1 drop(s) skipped: a resumed run wrote those groups since"
    ]
    # records of the wrong shape are skipped and said so; the rest still shows
    odd = [{"uid": "bad", "scores": 5}, {"uid": "odd", "scores": [1.0], "messages": "text", "rewards": [None]},
           {"uid": "ok", "scores": [0.5], "messages": [[{"role": "user", "content": "q"}, "not a message"]]}]  # fmt: skip
    (tmp_path / "odd.jsonl").write_text("".join(json.dumps(r) + "\n" for r in odd) + "{torn")
    shown = load_run(tmp_path / "odd.jsonl")
    assert [g["uid"] for g in shown["groups"]] == ["odd", "ok"] and shown["notes"] == [
        "odd.jsonl: 1 malformed record(s) skipped"
    ]
    assert shown["samples"][1]["turns"] == [{"r": "env", "role": "?", "c": "not a message"}]


def test_the_page_file_holds_no_raw_control_character_and_rlvr_view_serves_it(tmp_path):
    with GroupWriter(tmp_path / "groups.jsonl") as writer:
        evil = "".join(chr(c) for c in [*range(0, 32), *range(127, 160)]) + "\u2028\u2029\ufeff</script>"
        writer.write({"uid": evil, "prompt": [{"role": evil, "content": evil}], "answer": evil, "scores": [0.0],
                      "messages": [[{"role": evil, "content": evil}, {"role": "assistant", "content": evil}]],
                      "rewards": [{"score": 0.0, "status": evil, "reason": evil, "feedback": evil}]})  # fmt: skip
    (tmp_path / "groups.summary.json").write_text(json.dumps({"env": evil, "model": evil}))
    page = write_viewer(tmp_path / "groups.jsonl").read_text(encoding="utf-8")
    raw = {ch for ch in page if (ord(ch) < 32 and ch not in "\n") or 127 <= ord(ch) < 160}
    assert not raw and page.count("</script>") == 2, raw  # the viewer's own two blocks only
    proc = subprocess.Popen(
        [sys.executable, "-m", "environments.atropos_runtime.cli", "view", str(tmp_path), "--serve", "--port", "0"],
        stdout=subprocess.PIPE, text=True, cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)},
    )  # fmt: skip
    try:
        assert proc.stdout is not None
        url = next(line for line in proc.stdout if "serving on" in line).split()[2]
        assert url.startswith("http://127.0.0.1:")
        served = httpx.get(url + "anything/../at/all", timeout=30).text  # the page, whatever the path
        assert served == (tmp_path / "view.html").read_text(encoding="utf-8")
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def test_view_without_a_browser_says_where_the_page_is_and_how_to_serve_it(tmp_path, monkeypatch, capsys):
    import webbrowser

    from environments.atropos_runtime.cli import main as rlvr

    run = tmp_path / "run"
    run.mkdir()
    (run / "groups.jsonl").write_text(json.dumps({"uid": "g#0", "scores": [1.0], "messages": [[]]}) + "\n")
    monkeypatch.setattr(webbrowser, "open", lambda url: False)  # what it returns where no browser exists
    assert rlvr(["view", str(run)]) == 0
    out = capsys.readouterr().out
    assert "no browser could be opened here" in out and "file://" in out and f"rlvr view {run} --serve" in out
    monkeypatch.setattr(webbrowser, "open", lambda url: True)
    assert rlvr(["view", str(run)]) == 0 and "no browser" not in capsys.readouterr().out
