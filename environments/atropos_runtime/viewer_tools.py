"""Tool calls for the rollout viewer: each assistant turn's calls, each tool result matched to its
call, and a per-sample summary (`environments.atropos_runtime.viewer_data` calls these).

What it reads is the OpenAI message form that our tool layer (`environments/tools/task.py`) and the
Verifiers bridge both write: an assistant message with `tool_calls` (`[{id, type, function: {name,
arguments}}]`, arguments a JSON string) and one `role: "tool"` message per call (`tool_call_id`,
`content`, and `name` where the writer gives it). An episode's turn records hold the sampled text
(`content`), the environment's messages after it and the turn's `info`, whose `tool_*` keys (our
tool layer's per-turn counts: calls, malformed, errors, timeouts, truncated, refused, seconds) are
the exact numbers; the parsed calls themselves are in the sample's `messages`.

Contract of what it adds to the viewer's turns (every field optional in the page):

* an assistant turn: `calls`: `[{id, name, a, bad, res}]`: `a` the arguments (pretty JSON, or the raw
  text when they are not JSON), `bad` why the call is malformed as written ("" if not), `res` the
  index (in the sample's turns) of its tool result, None when it got none;
* a tool turn (`r: "tool"`): `name`, `id`, `at` (`[turn index, call index]` of its call, or None),
  `fl` (flags from a fixed vocabulary: `malformed`, `error`, `timeout`, `truncated`, `refused`),
  `s` (seconds, when recorded: the turn's `tool_seconds` when it made one call, or the message's
  own `seconds`);
* the sample: `tu` (None without calls): `calls`, `err` (errors, timeouts included), `bad`
  (malformed), `to` (timeouts), `cut` (truncated), `ref` (refused: a budget was used up), `un`
  (calls never answered), `s` (tool seconds, when recorded), `names` (`{name: count}`).

Where a turn's `info` has no tool counts (the Verifiers bridge, evaluate on a text-only server, old
files) the flags come from the result's text, as our tool layer and the sandbox write it (`error:`,
a traceback, `[tool call stopped: over its time limit`, `[tool output truncated`, `error: not run:`).
"""

from __future__ import annotations

import json
from typing import Any

FLAGS = ("malformed", "error", "timeout", "truncated", "refused")
_INFO = {"malformed": "tool_malformed", "error": "tool_errors", "timeout": "tool_timeouts",
         "truncated": "tool_truncated", "refused": "tool_refused"}  # fmt: skip
_SUMMARY = {"err": "tool_errors", "bad": "tool_malformed", "to": "tool_timeouts", "cut": "tool_truncated",
            "ref": "tool_refused"}  # fmt: skip


def _text(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, default=str)


def call_record(call: Any) -> dict[str, Any]:
    """One OpenAI tool call as the page shows it (`res` filled by `annotate`)."""
    call = call if isinstance(call, dict) else {"function": {"arguments": call}}
    fn = call.get("function") if isinstance(call.get("function"), dict) else {}
    name, raw = fn.get("name"), fn.get("arguments")
    bad = ""
    if isinstance(raw, str):
        try:
            parsed = json.loads(raw)
            args = json.dumps(parsed, indent=2, ensure_ascii=False, default=str)
        except (ValueError, RecursionError):  # JSONDecodeError is a ValueError
            parsed, args, bad = None, raw, "arguments are not valid JSON"
        if not bad and not isinstance(parsed, dict):
            bad = "arguments are not a JSON object"
    elif raw is None:
        args, bad = "", "no arguments"
    else:  # already decoded (a writer that stores objects)
        args = json.dumps(raw, indent=2, ensure_ascii=False, default=str)
        bad = "" if isinstance(raw, dict) else "arguments are not a JSON object"
    if not name:
        bad = bad or "no tool name"
    return {"id": _text(call.get("id") or ""), "name": _text(name or ""), "a": args, "bad": bad, "res": None}


def tool_message_turn(message: dict[str, Any]) -> dict[str, Any]:
    """A `role: "tool"` message as a viewer turn (`at`, `fl`, `s` filled by `annotate`)."""
    seconds = message.get("seconds")
    timed = isinstance(seconds, int | float) and not isinstance(seconds, bool)
    return {"r": "tool", "role": "tool", "c": _text(message.get("content") or ""),
            "name": _text(message.get("name") or ""), "id": _text(message.get("tool_call_id") or ""),
            "at": None, "fl": [], "s": seconds if timed else None}  # fmt: skip


def _text_flags(text: str, call: dict[str, Any] | None, message: dict[str, Any]) -> list[str]:
    """A result's flags from its text (and a call that is malformed as written)."""
    head = text.lstrip()[:400]
    name = call["name"] if call else message.get("name", "")
    if (
        (call and call["bad"])
        or head.startswith("error: the tool call ")
        or (name and head.startswith(f"error: {name}: "))
    ):
        flags = ["malformed"]
    elif head.startswith("error: not run:"):
        flags = ["refused"]
    elif "[tool call stopped: over its time limit" in text:
        flags = ["timeout"]
    elif head.lower().startswith("error:") or "Traceback (most recent call last)" in text:
        flags = ["error"]
    else:
        flags = []
    if "[tool output truncated:" in text or "[output truncated at " in text:
        flags.append("truncated")
    return flags


def _num(info: Any, key: str) -> float:
    value = info.get(key) if isinstance(info, dict) else None
    return value if isinstance(value, int | float) and not isinstance(value, bool) else 0


def annotate(turns: list[dict[str, Any]], infos: list[Any] | None = None) -> dict[str, Any] | None:
    """Match every tool result in `turns` to its call (by `tool_call_id`, else the next unanswered
    call of the latest assistant turn), set the flags and seconds, and return the sample's `tu`
    summary (None: no calls). `infos[k-1]` is turn k's `info` (episodes), None without episodes."""
    last: int | None = None  # index of the latest assistant turn with calls
    by_id: dict[str, tuple[int, int]] = {}
    for i, t in enumerate(turns):
        if t.get("calls"):
            last = i
            by_id.update({c["id"]: (i, j) for j, c in enumerate(t["calls"]) if c["id"]})
        if t.get("r") != "tool":
            continue
        at = by_id.get(t["id"]) if t["id"] else None
        if at is None and last is not None:
            free = [j for j, c in enumerate(turns[last]["calls"]) if c["res"] is None]
            at = (last, free[0]) if free else None
        call = None
        if at is not None and turns[at[0]]["calls"][at[1]]["res"] is None:
            call = turns[at[0]]["calls"][at[1]]
            call["res"], t["at"] = i, list(at)
            t["name"] = t["name"] or call["name"]
        info = (infos[turns[at[0]]["k"] - 1] if infos and at and turns[at[0]].get("k") else None) or {}
        one = at is not None and len(turns[at[0]]["calls"]) == 1 and "tool_calls" in info
        if one:  # the turn's exact counts are this call's
            t["fl"] = [f for f in FLAGS if _num(info, _INFO[f])]
            if "timeout" in t["fl"] and "error" in t["fl"]:
                t["fl"].remove("error")  # a timeout counts as an error too: say it once
            t["s"] = t["s"] if t["s"] is not None else info.get("tool_seconds")
        else:
            t["fl"] = _text_flags(t["c"], call, t)
    return summary(turns, infos)


def summary(turns: list[dict[str, Any]], infos: list[Any] | None) -> dict[str, Any] | None:
    """The sample's tool use (see the module docstring), None when it made no call."""
    calls = [c for t in turns for c in t.get("calls") or ()]
    if not calls:
        return None
    results = [t for t in turns if t.get("r") == "tool"]
    names: dict[str, int] = {}
    for c in calls:
        names[c["name"]] = names.get(c["name"], 0) + 1
    exact = [i for i in infos or () if isinstance(i, dict) and "tool_calls" in i]
    out: dict[str, Any] = {"calls": len(calls), "un": sum(c["res"] is None for c in calls), "names": names}
    if exact:
        out.update({k: int(sum(_num(i, key) for i in exact)) for k, key in _SUMMARY.items()})
        out["s"] = round(sum(_num(i, "tool_seconds") for i in exact), 3)
    else:
        count = {f: sum(f in t["fl"] for t in results) for f in FLAGS}
        out.update({"err": count["error"] + count["timeout"], "bad": count["malformed"], "to": count["timeout"],
                    "cut": count["truncated"], "ref": count["refused"]})  # fmt: skip
        timed = [t["s"] for t in results if isinstance(t["s"], int | float)]
        out["s"] = round(sum(timed), 3) if timed else None
    return out
