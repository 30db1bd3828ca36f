"""Tool calls in the rollout viewer's data: each assistant turn's calls (name, pretty arguments, a
malformed call marked), each tool result matched to its call with its flags and time, the
per-sample tool use; from a group as our tool layer writes it (`environments/tools/task.py`: the
parsed assistant messages in `messages`, the sampled text, tool messages and per-turn `tool_*`
counts in `episodes`), from a Verifiers-bridge episode (tool messages without `name`, no counts),
from an evaluate sample, and from old files. The page itself: tests/runtime/test_viewer_in_browser.py.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from environments.atropos_runtime.output import GroupWriter
from environments.atropos_runtime.viewer_data import load_run
from tests.runtime import test_viewer_in_browser as in_browser
from tests.runtime.test_viewer_in_browser import (
    Canary,
    by_id,
    choose,
    detail,
    hostile_payloads,
    key,
    selected_row,
    shown,
    type_into,
    view,
)

browser = in_browser.browser  # the same headless Chromium fixture (one session for this module)
PROMPT = [
    {"role": "system", "content": "Use the python tool if it helps. Put the final answer in \\boxed{}."},
    {"role": "user", "content": "What is 6 times 7?"},
]
COUNTS = ("tool_calls", "tool_malformed", "tool_errors", "tool_timeouts", "tool_truncated", "tool_refused")


def hermes(name: str, args: Any) -> str:
    """A call as the Hermes template writes it (the sampled text)."""
    return f'<tool_call>\n{{"name": "{name}", "arguments": {json.dumps(args)}}}\n</tool_call>'


def call(cid: str, name: str, arguments: str) -> dict[str, Any]:
    return {"id": cid, "type": "function", "function": {"name": name, "arguments": arguments}}


def info(seconds: float = 0.0, **counts: int) -> dict[str, float]:
    """A turn's `info` as `ToolTask.env_step` records it (the ledger's growth in that turn)."""
    return {**{k: 0 for k in COUNTS}, **counts, "tool_seconds": seconds, "tool_output_bytes": 10}


def tool_episode(name: str = "python") -> tuple[list[dict], dict]:
    """(messages, episode) of one tool episode: a call that prints, a call with bad JSON, a call
    that hangs, two calls in one turn (one with huge output, one that raises), the final answer."""
    turns = [  # (sampled text, parsed assistant message, tool messages, info)
        (hermes(name, {"code": "print(6 * 7)"}),
         {"role": "assistant", "content": None, "tool_calls": [call("call_a", name, '{"code": "print(6 * 7)"}')]},
         [{"role": "tool", "tool_call_id": "call_a", "name": name, "content": "42\n"}],
         info(0.125, tool_calls=1)),
        ('Let me check.\n<tool_call>\n{"name": "python", "arguments": {"code": print(1)}\n</tool_call>',
         {"role": "assistant", "content": "Let me check.",
          "tool_calls": [call("call_b", "python", '{"name": "python", "arguments": {"code": print(1)}')]},
         [{"role": "tool", "tool_call_id": "call_b", "name": "",
           "content": "error: the tool call is not valid JSON; the tools are: python"}],
         info(0.0, tool_calls=1, tool_malformed=1)),
        (hermes(name, {"code": "while True: pass"}),
         {"role": "assistant", "content": None, "tool_calls": [call("call_c", name, '{"code": "while True: pass"}')]},
         [{"role": "tool", "tool_call_id": "call_c", "name": name,
           "content": "Traceback (most recent call last):\nCallTimeout: the call exceeded its wall time limit (10 s)"
                      "\n[tool call stopped: over its time limit of 10 s]"}],
         info(10.5, tool_calls=1, tool_errors=1, tool_timeouts=1)),
        (hermes(name, {"code": "print('x' * 9000)"}) + "\n" + hermes(name, {"code": "1 / 0"}),
         {"role": "assistant", "content": None, "tool_calls": [
             call("call_d", name, '{"code": "print(\'x\' * 9000)"}'), call("call_e", name, '{"code": "1 / 0"}')]},
         [{"role": "tool", "tool_call_id": "call_d", "name": name,
           "content": "x" * 100 + "\n[output truncated at 8192 bytes]\n"},
          {"role": "tool", "tool_call_id": "call_e", "name": name,
           "content": "Traceback (most recent call last):\nZeroDivisionError: division by zero"}],
         info(0.25, tool_calls=2, tool_errors=1, tool_truncated=1)),
        ("The product is \\boxed{42}.", {"role": "assistant", "content": "The product is \\boxed{42}."}, [], {}),
    ]  # fmt: skip
    messages = [*PROMPT]
    records = []
    for text, message, tool_messages, turn_info in turns:
        messages += [message, *tool_messages]
        records.append({"content": text, "finish_reason": "stop", "tokens": [1, 2, 3], "logprobs": [-0.1] * 3,
                        "env_messages": tool_messages, "env_tokens": [4, 5] if tool_messages else None,
                        "info": turn_info})  # fmt: skip
    return messages, {"id": "ep1", "stop_reason": "answered", "turns": records}


def tool_group(folder: Path, name: str = "python") -> Path:
    """A process folder: one group of two samples, the tool episode and one that made no call."""
    messages, episode = tool_episode(name)
    plain = [*PROMPT, {"role": "assistant", "content": "\\boxed{42}"}]
    plain_episode = {"id": "ep2", "stop_reason": "answered", "turns": [
        {"content": "\\boxed{42}", "finish_reason": "stop", "tokens": [1], "env_messages": [], "info": {}}]}  # fmt: skip
    components = {"tool_calls": 5, "tool_malformed": 1, "tool_errors": 2, "tool_timeouts": 1}
    with GroupWriter(folder / "groups.jsonl") as writer:
        writer.write({
            "uid": "m1#0", "item_uid": "m1", "prompt": PROMPT, "answer": "42", "scores": [1.0, 1.0],
            "messages": [messages, plain], "episodes": [episode, plain_episode],
            "rewards": [{"score": 1.0, "status": "ok", "reason": "match", "components": components},
                        {"score": 1.0, "status": "ok", "reason": "match", "components": {}}],
            "finish_reasons": ["stop", "stop"],
        })  # fmt: skip
    return folder / "groups.jsonl"


def test_calls_and_results_turn_by_turn_from_a_tool_episode(tmp_path):
    run = load_run(tool_group(tmp_path))
    sample, plain = run["samples"]
    kinds = [(t["r"], t.get("k")) for t in sample["turns"]]
    assert kinds == [("assistant", 1), ("tool", 1), ("assistant", 2), ("tool", 2), ("assistant", 3), ("tool", 3),
                     ("assistant", 4), ("tool", 4), ("tool", 4), ("assistant", 5)]  # fmt: skip
    turns = sample["turns"]
    first = turns[0]["calls"]
    assert first == [
        {"id": "call_a", "name": "python", "a": '{\n  "code": "print(6 * 7)"\n}', "bad": "", "res": 1}
    ]
    assert turns[0]["c"].startswith("<tool_call>")  # the exact sampled text stays
    assert turns[1] == {"r": "tool", "role": "tool", "c": "42\n", "name": "python", "id": "call_a", "at": [0, 0],
                        "fl": [], "s": 0.125, "k": 1}  # fmt: skip
    # malformed: marked as written, the error the model was sent is its result
    bad = turns[2]["calls"][0]
    assert bad["bad"] == "arguments are not valid JSON" and bad["a"].startswith('{"name": "python"')
    assert turns[3]["fl"] == ["malformed"] and turns[3]["name"] == "python" and turns[3]["at"] == [2, 0]
    assert turns[3]["c"].startswith("error: the tool call is not valid JSON")
    assert turns[5]["fl"] == ["timeout"] and turns[5]["s"] == 10.5
    # two calls in one turn: matched by id, flags from their text, no per-call time
    assert [c["res"] for c in turns[6]["calls"]] == [7, 8]
    assert turns[7]["fl"] == ["truncated"] and turns[8]["fl"] == ["error"] and turns[7]["s"] is None
    assert sample["tu"] == {"calls": 5, "un": 0, "names": {"python": 5}, "err": 2, "bad": 1, "to": 1, "cut": 1,
                            "ref": 0, "s": 10.875}  # fmt: skip
    assert "tu" not in plain and [t["r"] for t in plain["turns"]] == ["assistant"]
    # every field is JSON the page embeds (no tuples, no objects)
    assert json.loads(json.dumps(run)) == run


def test_a_verifiers_bridge_episode_renders_the_same_way(tmp_path):
    """The bridge's messages: OpenAI tool calls, tool messages with `tool_call_id` only (no `name`),
    Verifiers' own error text (`str(e)`), turn info without tool counts; one call left unanswered."""
    calls = [call("c1", "lookup", '{"city": "Paris"}'), call("c2", "lookup", "{'city': 'Rome'}")]
    messages = [*PROMPT, {"role": "assistant", "content": "two lookups", "tool_calls": calls},
                {"role": "tool", "tool_call_id": "c1", "content": "sunny"},
                {"role": "tool", "tool_call_id": "c2", "content": "Expecting property name enclosed in double quotes"},
                {"role": "assistant", "content": None, "tool_calls": [call("c3", "lookup", '{"city": "Oslo"}')]}]  # fmt: skip
    turns = [{"content": "raw 1", "finish_reason": "stop", "env_messages": messages[3:5], "info": {}},
             {"content": "raw 2", "finish_reason": "stop", "env_messages": [], "info": {}}]  # fmt: skip
    sample = {"uid": "v1", "prompt": PROMPT, "messages": messages, "answer": "x", "score": 0.0, "status": "ok",
              "episode": {"id": "e", "stop_reason": "vf:max_turns_reached", "turns": turns}}  # fmt: skip
    (tmp_path / "samples.jsonl").write_text(json.dumps(sample) + "\n")
    got = load_run(tmp_path)["samples"][0]
    t = got["turns"]
    assert [x["r"] for x in t] == ["assistant", "tool", "tool", "assistant"]
    assert [x["name"] for x in t[1:3]] == ["lookup", "lookup"] and [x["at"] for x in t[1:3]] == [
        [0, 0],
        [0, 1],
    ]
    assert t[0]["calls"][1]["bad"] == "arguments are not valid JSON" and t[2]["fl"] == ["malformed"]
    assert t[3]["calls"][0]["res"] is None
    assert got["tu"] == {"calls": 3, "un": 1, "names": {"lookup": 3}, "err": 0, "bad": 1, "to": 0, "cut": 0,
                         "ref": 0, "s": None}  # fmt: skip


def test_conversations_without_episodes_and_old_files(tmp_path):
    """Messages only (single-turn evaluate, a text-only server, files before episodes): calls from
    the assistant message, results matched by id, else in order; refused calls and `error:` texts."""
    calls = [call("", "search", '{"q": "a"}'), call("", "search", '{"q": "b"}'), call("x9", "", "{}")]
    messages = [*PROMPT, {"role": "assistant", "content": "", "tool_calls": calls},
                {"role": "tool", "content": "error: not run: this episode's budget of 8 tool calls is used up; answer without tools"},
                {"role": "tool", "content": "error: search: 'q' is a required property"},
                {"role": "tool", "tool_call_id": "x9", "content": "error: the tool call names an unknown tool ''"}]  # fmt: skip
    with GroupWriter(tmp_path / "groups.jsonl") as writer:
        writer.write({"uid": "g", "prompt": PROMPT, "scores": [0.0], "messages": [messages]})
    t = load_run(tmp_path)["samples"][0]["turns"]
    assert [c["res"] for c in t[0]["calls"]] == [1, 2, 3] and t[0]["calls"][2]["bad"] == "no tool name"
    assert [x["fl"] for x in t[1:]] == [["refused"], ["malformed"], ["malformed"]]
    assert [x["name"] for x in t[1:]] == ["search", "search", ""]


# ---------------------------------------------------------------- the page, in a real Chromium


@pytest.mark.slow
def test_the_page_shows_calls_arguments_and_results_turn_by_turn(browser, tmp_path):
    tool_group(tmp_path)
    browser.get(view(tmp_path).as_uri())
    facts = by_id(browser, "facts").text
    assert "tool use: 1 of 2 samples made 5 tool calls; 1 with tool errors or malformed calls" in facts
    assert "\u26925 !3" in selected_row(browser)
    assert (
        "tool use: 5 calls (python 5) · 2 errors · 1 malformed · 1 timed out · 1 truncated · 10.88 s of tool time"
        in detail(browser)
    )
    boxes = browser.execute_script(
        "return [...document.querySelectorAll('#detail > .box.assistant, #detail > .box.tool, #detail > .box.env')]"
        ".map((b) => b.classList.contains('tool') ? 'tool' : (b.classList.contains('env') ? 'env' : 'assistant'))"
    )
    assert boxes == [
        "assistant",
        "tool",
        "assistant",
        "tool",
        "assistant",
        "tool",
        "assistant",
        "tool",
        "tool",
        "assistant",
    ]
    counts = [e.text for e in browser.find_elements("css selector", "#detail .toolinfo")]
    assert counts[:2] == ["this turn's tool counts: calls 1 · seconds 0.125 · output_bytes 10",
                          "this turn's tool counts: calls 1 · malformed 1 · output_bytes 10"]  # fmt: skip
    cards = browser.find_elements("css selector", "#detail .call")
    assert [c.find_element("css selector", ".tname").text for c in cards] == ["python"] * 5
    assert cards[0].find_element("css selector", ".args").text == '{\n  "code": "print(6 * 7)"\n}'
    assert [c.get_attribute("class") for c in cards] == ["call", "call bad", "call", "call", "call"]
    assert "malformed: arguments are not valid JSON" in cards[1].text
    assert "error sent to the model\nerror: the tool call is not valid JSON" in cards[1].text
    results = browser.find_elements("css selector", "#detail .box.tool > .lbl")
    assert results[0].text == "tool result · python · call 1 of turn 1 · id call_a · 0.125 s"
    flags = [[f.text for f in r.find_elements("css selector", ".flag")] for r in results]
    assert flags == [[], ["malformed"], ["timed out"], ["truncated"], ["error"]]
    assert results[4].text.startswith("tool result · python · call 2 of turn 4 · id call_e")
    style = "return getComputedStyle(document.querySelector(arguments[0])).borderLeftColor"
    assert browser.execute_script(style, "#detail .box.tool") != browser.execute_script(
        style, "#detail .box.assistant"
    )
    # the filter and the search terms
    for value, n in (("used", 1), ("errors", 1), ("none", 1), ("", 2)):
        choose(browser, "f-tools", value)
        assert shown(browser) == n, value
    type_into(browser, "f-text", "tool error")
    assert shown(browser) == 1 and "tool use: 5 calls" in detail(browser)
    type_into(browser, "f-text", "while true: pass")  # arguments are searched
    assert shown(browser) == 1


@pytest.mark.slow
def test_hostile_tool_names_arguments_and_results_render_as_text(browser, tmp_path):
    canary = Canary()
    try:
        payloads = hostile_payloads(canary.url)
        with GroupWriter(tmp_path / "groups.jsonl") as writer:
            for i, p in enumerate(payloads):
                calls = [call(p, p, json.dumps({"code": p})), call(f"raw{i}", "python", p)]
                messages = [*PROMPT, {"role": "assistant", "content": f"says {p}", "tool_calls": calls},
                            {"role": "tool", "tool_call_id": p, "name": p, "content": f"result {p}", "seconds": p},
                            {"role": "tool", "tool_call_id": f"raw{i}", "name": "python", "content": f"error {p}"}]  # fmt: skip
                writer.write({"uid": f"g{i}", "prompt": PROMPT, "scores": [0.0], "messages": [messages]})
        browser.get(view(tmp_path).as_uri())
        cards = "[...document.querySelectorAll('#detail .call ' + arguments[0])].map((e) => e.textContent)"
        for p in payloads:
            visible = p.replace("\x00", "\\x00").replace("\u2028", "\\u2028").replace("\u2029", "\\u2029")
            visible = visible.replace("\ufeff", "\\ufeff")
            text = detail(browser)
            for field in (
                f"says {visible}",
                f"result {visible}",
                f"error {visible}",
                f"tool result · {visible}",
            ):
                assert field in text, field
            assert browser.execute_script(f"return {cards}", ".tname") == [visible, "python"]
            assert browser.execute_script(f"return {cards}", ".args")[1] == visible  # not JSON: the raw text
            assert "malformed: arguments are not valid JSON" in text
            key(browser, "j")
        choose(browser, "f-tools", "errors")
        browser.execute_script("document.querySelectorAll('summary, button').forEach(b => b.click())")
        browser.execute_async_script("const done = arguments[0]; setTimeout(done, 500)")
        assert browser.execute_script("return window.__pwned === undefined") and canary.hits == []
        assert browser.execute_script("return document.querySelectorAll('script').length") == 2
        assert (
            browser.execute_script(
                "return document.querySelectorAll('img, svg, iframe, a, object, embed, form').length"
            )
            == 0
        )
    finally:
        canary.close()
