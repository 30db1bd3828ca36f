"""Resumable JSONL, the escaped HTML viewer, vLLM response validation and server-class choice."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from atroposlib.envs.server_handling.openai_server import OpenAIServer
from atroposlib.envs.server_handling.vllm_server import VLLMServer

from environments.atropos_runtime.output import GroupWriter, read_groups, write_html
from environments.atropos_runtime.servers import VLLMTokenServer, server_class_for
from environments.atropos_runtime.token_completions import InferenceError, parse_token_completions
from environments.atropos_runtime.viewer import load_run

ROOT = Path(__file__).resolve().parents[2]


def test_writer_resumes_without_duplicates_and_repairs_a_torn_line(tmp_path):
    path = tmp_path / "g.jsonl"
    with GroupWriter(path) as w:
        w.write({"uid": "a", "scores": [1.0]})
        w.write({"uid": "a", "scores": [9.0]})
        w.write({"uid": "b", "scores": [0.0]})
    with open(path, "a") as f:
        f.write('{"uid": "c", "sco')  # crash mid-write
    with GroupWriter(path) as w:
        assert w.done == {"a", "b"}
        w.write({"uid": "c", "scores": [0.5]})
    assert [g["uid"] for g in read_groups(path)] == ["a", "b", "c"]
    assert all(json.loads(line) for line in path.read_text().splitlines())


def test_a_killed_run_keeps_every_group_it_wrote(tmp_path):
    """Lines reach the OS as they are written (fsync is only periodic): a process killed without
    closing its writer loses none of them, and the next run resumes after them."""
    path = tmp_path / "g.jsonl"
    script = (
        "import os, signal, sys; from environments.atropos_runtime.output import GroupWriter\n"
        f"w = GroupWriter({str(path)!r}, fsync_every_s=3600)\n"
        "for uid in 'abc': w.write({'uid': uid, 'scores': [1.0]})\n"
        "os.kill(os.getpid(), signal.SIGKILL)\n"
    )
    proc = subprocess.run([sys.executable, "-c", script], cwd=ROOT, capture_output=True, timeout=60)
    assert proc.returncode == -signal.SIGKILL, proc.stderr
    with GroupWriter(path) as w:
        assert w.done == {"a", "b", "c"}


def test_html_viewer_escapes_model_text(tmp_path):
    path = tmp_path / "g.jsonl"
    evil = "<script>alert(1)</script>"
    with GroupWriter(path) as w:
        w.write(
            {
                "uid": "x",
                "scores": [1.0],
                "messages": [[{"role": "assistant", "content": evil}]],
                "rewards": [{"score": 1.0, "status": "ok", "reason": "match"}],
            }
        )
    html = write_html(path).read_text()
    data = html.split('id="rlvr-data">')[1].split("</script>")[0]
    assert "<" not in data and "\\u003cscript\\u003ealert(1)" in data and '"status":"ok"' in data
    assert load_run(path)["samples"][0]["turns"][-1]["c"] == evil  # the text itself is kept exactly


def payload(ids=(5, 6), lps=(-0.1, -0.2), prompt=(1, 2), n=1):
    choice = {
        "index": 0,
        "token_ids": list(ids),
        "prompt_token_ids": list(prompt),
        "logprobs": {"token_logprobs": list(lps)},
        "finish_reason": "length",
    }
    return {"choices": [dict(choice, index=i) for i in range(n)]}


def test_token_completion_parsing_and_validation():
    ((ids, lps, reasons),) = parse_token_completions(payload(n=2), [[1, 2]], 2)
    assert ids == [[5, 6], [5, 6]] and lps[0] == [-0.1, -0.2] and reasons == ["length", "length"]
    with pytest.raises(InferenceError, match="n=3"):
        parse_token_completions(payload(n=2), [[1, 2]], 3)
    with pytest.raises(InferenceError, match="different prompt"):
        parse_token_completions(payload(prompt=(9,)), [[1, 2]], 1)
    with pytest.raises(InferenceError, match="logprobs"):
        parse_token_completions(payload(lps=(-0.1,)), [[1, 2]], 1)
    with pytest.raises(InferenceError, match="token_ids"):
        parse_token_completions({"choices": [{"index": 0, "text": "hi"}]}, [[1, 2]], 1)


def test_server_class_choice():
    assert server_class_for("vllm", "openai") is VLLMTokenServer
    assert server_class_for("vllm", "generate") is VLLMServer
    assert server_class_for("openai", "openai") is OpenAIServer
    with pytest.raises(ValueError):
        server_class_for("tgi", "openai")


def test_html_viewer_shows_a_shared_prompt_once(tmp_path):
    path = tmp_path / "g.jsonl"
    prompt = [{"role": "user", "content": "PROMPT-TEXT"}]
    convs = [[*prompt, {"role": "assistant", "content": f"answer-{i}"}] for i in range(3)]
    with GroupWriter(path) as w:
        w.write({"uid": "x", "scores": [1.0, 0.0, 0.0], "messages": convs})
    html = write_html(path).read_text()
    assert html.count("PROMPT-TEXT") == 1 and all(f"answer-{i}" in html for i in range(3))
    run = load_run(path)
    assert [t["c"] for t in run["groups"][0]["prompt"]] == ["PROMPT-TEXT"]
    assert [[t["c"] for t in s["turns"]] for s in run["samples"]] == [[f"answer-{i}"] for i in range(3)]


def test_logprobs_convention_is_read_from_the_temperature_dependence():
    from environments.atropos_runtime.servers import logprobs_mode_of

    raw = {"a": -1.0, "b": -2.0, "c": -3.5}
    assert logprobs_mode_of(raw, dict(raw)) == "raw"
    assert logprobs_mode_of(raw, {"a": -1.2, "b": -1.7, "d": -2.0}) == "processed"
    with pytest.raises(InferenceError, match="no common top tokens"):
        logprobs_mode_of({"a": -1.0}, {"b": -1.0})
