"""What the output files carry for judging a sample, and what the viewer reads from them (no browser:
tests/runtime/test_viewer_in_browser.py drives the page itself).

A real multi-turn run: the guess-a-number env on a scripted loopback policy, whose environment fails
at turn 2, so samples not solved at turn 1 are unverified and groups with none solved are dropped.
"""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace
from typing import get_type_hints

import httpx
import pytest
from atroposlib.envs.base import ScoredDataGroup
from transformers import AutoTokenizer

from environments.atropos_runtime.cli import main as rlvr
from environments.atropos_runtime.local_model import build_tiny_model
from environments.atropos_runtime.output import GroupWriter, rejected_record
from environments.atropos_runtime.viewer import load_run, page_json, write_viewer
from rubrics.core import TestRecord
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
    scored = env.rollout_and_score

    async def with_what_was_seen(item, n, split):  # as a math / code rubric reports it
        rollouts, results = await scored(item, n, split=split)
        saw = {"seen": {"answer": f"read {item.uid}"}, "tests": (TestRecord(0, "stdio", "failed", "wrong"),)}
        return rollouts, [dataclasses.replace(r, **saw) for r in results]

    env.rollout_and_score = with_what_was_seen
    await run_evaluate(env)
    await env.aclose()
    samples = jsonl(tmp_path / "run" / "eval" / "samples.jsonl")
    eval_items = {item.uid: item for item in env.eval_items}
    for s in samples:
        assert s["seen"] == {"answer": f"read {s['uid']}"}
        assert s["tests"] == [{"index": 0, "kind": "stdio", "outcome": "failed", "detail": "wrong"}]
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
        stdout=subprocess.PIPE, text=True, cwd=ROOT,  # a pipe, buffered: the line must be flushed
        env={**{k: v for k, v in os.environ.items() if k != "PYTHONUNBUFFERED"}, "PYTHONPATH": str(ROOT)},
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


def _rollout(text: str, masks: list[int] | None = None) -> SimpleNamespace:
    return SimpleNamespace(text=text, finish_reason="stop", masks=masks, episode=None)


def test_what_the_rubric_saw_reaches_the_viewer_from_every_writer_and_old_files_still_load(tmp_path):
    from rubrics.core import RewardResult, Status, TestRecord

    math = RewardResult(score=0.0, reason="mismatch", seen={"answer": "41", "rule": "boxed"})
    code = RewardResult(score=0.5, components={"pass_rate": 0.5}, reason="1/2 tests", tests=(
        TestRecord(0, "stdio", "passed"), TestRecord(1, "call", "failed", "wrong answer")))  # fmt: skip
    judge = RewardResult(score=0.7, seen={"judge.reply": "good <score>7</score>"})
    lost = RewardResult(score=None, status=Status.TIMEOUT, reason="cas timeout", seen={"answer": "x^2"})
    with GroupWriter(tmp_path / "groups.jsonl") as writer:
        writer.write({"uid": "g#0", "item_uid": "g", "answer": "42", "scores": [0.0, 0.5, 0.7],
                      "messages": [[{"role": "user", "content": "q"}, {"role": "assistant", "content": t}] for t in "abc"],
                      "rewards": [math.to_dict(), code.to_dict(), judge.to_dict()]})  # fmt: skip
        item = SimpleNamespace(uid="g", prompt=[{"role": "user", "content": "q"}], answer="42")
        rejected = rejected_record(item, None, "", [_rollout("d"), _rollout("e")], [math, lost])
        assert rejected is not None
        (tmp_path / "groups.dropped.jsonl").write_text(json.dumps({"uid": "g#0", **rejected}) + "\n")
    eval_sample = {"uid": "e", "messages": [{"role": "user", "content": "q"}, {"role": "assistant", "content": "f"}], "score": 0.5, "status": "ok",
                   "tests": code.to_dict()["tests"], "seen": {"answer": "7"}}  # fmt: skip
    (tmp_path / "ev").mkdir()
    (tmp_path / "ev" / "samples.jsonl").write_text(json.dumps(eval_sample) + "\n")
    run = load_run(tmp_path)
    by_text = {s["turns"][-1]["c"] if s["turns"] else s["kind"]: s for s in run["samples"]}
    assert by_text["a"]["seen"] == {"answer": "41", "rule": "boxed"} and by_text["a"]["tests"] == []
    assert by_text["b"]["tests"] == [[0, "stdio", "passed", ""], [1, "call", "failed", "wrong answer"]]
    assert by_text["c"]["seen"] == {"judge.reply": "good <score>7</score>"}
    assert by_text["e"]["kind"] == "unverified" and by_text["e"]["seen"] == {"answer": "x^2"}
    assert by_text["f"]["seen"] == {"answer": "7"} and by_text["f"]["tests"][1][2] == "failed"
    # an old file (rewards without tests or seen, no rewards at all) shows empty ones
    old = tmp_path / "old"
    old.mkdir()
    (old / "groups.jsonl").write_text(json.dumps({"uid": "o", "scores": [1.0, 0.0], "messages": [[], []],
                                                  "rewards": [{"score": 1.0, "status": "ok"}]}) + "\n")  # fmt: skip
    assert [(s["tests"], s["seen"]) for s in load_run(old)["samples"]] == [([], {}), ([], {})]


def test_runs_are_told_apart_unverified_samples_point_at_their_group_and_token_gaps_say_why(tmp_path):
    rows = lambda n: [list(range(100, 100 + n))]  # noqa: E731
    for name, env, n in (("a", "math", 30), ("b", "code", 30)):
        (tmp_path / name).mkdir()
        (tmp_path / name / "groups.jsonl").write_text(
            json.dumps({"uid": "g#0", "scores": [1.0], "messages": [[]], "tokens": rows(n), "masks": rows(n)}) + "\n"
            + json.dumps({"uid": "h#0", "scores": [0.0], "messages": [[]]}) + "\n"
        )  # fmt: skip
        (tmp_path / name / "groups.summary.json").write_text(json.dumps({"env": env, "model": "m"}))
    drops = [{"uid": "g#0", "reason": "unverified", "samples": [{"text": "u"}]},
             {"uid": "z#0", "reason": "timeout", "detail": "slow", "samples": []}]  # fmt: skip
    (tmp_path / "b" / "groups.dropped.jsonl").write_text("".join(json.dumps(d) + "\n" for d in drops))
    run = load_run(tmp_path, token_budget=40)
    assert [(r["name"], r["env"]) for r in run["runs"]] == [("a", "math"), ("b", "code")]
    assert run["header"]["env"] == "math, code" and run["header"]["model"] == "m"
    assert [(g["uid"], g["run"], g["drop"]) for g in run["groups"]] == [
        ("g#0", 0, None), ("h#0", 0, None), ("g#0", 1, None), ("h#0", 1, None),
        ("g#0", 1, "unverified"), ("z#0", 1, "timeout"),
    ]  # fmt: skip
    # b's kept g#0 and its unverified sample point at each other; a's g#0 (another run) does not
    assert (
        run["groups"][2]["peer"] == 4 and run["groups"][4]["peer"] == 2 and run["groups"][0]["peer"] is None
    )
    assert run["groups"][5]["peer"] is None and run["samples"][-1]["ph"] is True
    # a's 30 ids fit the 40-id budget, b's do not; samples without ids say so
    assert [(s["tok"] is not None, s.get("tokwhy")) for s in run["samples"][:4]] == [
        (True, None),
        (False, "none"),
        (False, "budget"),
        (False, "none"),
    ]
    assert "token view omitted for 1 samples" in run["notes"][0]
    assert "<title>rlvr · math, code · m</title>" in write_viewer(tmp_path).read_text()


def test_the_token_texts_come_from_tokenizer_json_without_importing_transformers(tiny, tmp_path):
    """(`environments` puts a stand-in for `transformers` in sys.modules: only the real one counts.)"""
    from environments.atropos_runtime.viewer_vocab import vocab

    tok = AutoTokenizer.from_pretrained(tiny)
    text = tok.apply_chat_template([{"role": "user", "content": "Hi there, naïve café 42\n"}], tokenize=False)
    ids = list(tok(text)["input_ids"])
    expected = {str(i): tok.decode([i]) for i in sorted(set(ids))}
    probe = (
        "import sys, time; from environments.atropos_runtime.viewer_vocab import vocab; t = time.time(); "
        f"v, note = vocab({str(tiny)!r}, set({ids!r})); "
        "real = type(sys.modules.get('transformers')).__name__ not in ('NoneType', '_StandIn'); "
        "import json; print(json.dumps([v, note, real, time.time() - t]))"
    )
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, cwd=ROOT, check=True)
    texts, note, imported, seconds = json.loads(out.stdout)
    assert texts == expected and note == "" and not imported, (note, imported)
    assert "<|im_start|>" in texts.values() and seconds < 5
    # no tokenizer.json: transformers reads the folder; nothing loadable: ids only, and why
    (tmp_path / "empty").mkdir()
    assert vocab(tmp_path / "empty", {1})[1].startswith("token view shows ids only: tokenizer")
