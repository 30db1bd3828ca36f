"""What the rollout viewer shows: `load_run(path)` reads the output files into groups, samples and runs.

It reads what `process` and `evaluate` write (a folder, recursively, or one file):

* a process JSONL (`groups.jsonl`: one group per line, `environments.atropos_runtime.output`) with its
  siblings `<stem>.dropped.jsonl` (dropped groups and unverified samples, with the reason) and
  `<stem>.summary.json` (env, model, settings, counts);
* an evaluate folder (`samples.jsonl` + `metrics.json`).

Contract of the result (a JSON-able dict; `environments.atropos_runtime.viewer` embeds it in the page):

* `groups`: prompt, gold answer, generation parameters, item uid, `drop` (the drop reason, `unverified`
  for a kept group's unverified samples, None when kept), `run` (index into `runs`) and `peer` (the
  other record of the same group: a kept group and its unverified samples point at each other);
* `samples`: `g` (its group), `kind` (kept / dropped / unverified / eval), score, status, reason,
  feedback, components, `tests` (per-test `[index, kind, outcome, detail]` rows, code rubrics), `seen`
  (what the rubric read: math `answer`, judge `reply`), finish reason, token counts,
  `set_advantage_to_zero`, the turns after the prompt (assistant, tool or environment; an assistant
  turn's tool calls and each tool result matched to its call, with flags, and `tu`, the sample's
  tool use: `environments.atropos_runtime.viewer_tools`), `tok` (exact ids, masks, logprobs) or
  `tokwhy` (why there is no token view: `budget` or `none`), `ph` (a placeholder row for a group
  whose inference failed: not a sample);
* `runs`: one per folder holding output files (name, env, model, settings, eval metrics);
* `header`: the first run's summary / metrics, env (all runs' envs), model and settings;
* `vocab` (with a tokenizer: id -> text) and `notes` (what was skipped and why).

Old files (without `tests`, `seen`, `prompt`, ...) still load: every field is optional.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

from environments.atropos_runtime.viewer_tools import annotate, call_record, tool_message_turn

TOKEN_BUDGET = 1_000_000  # token ids embedded for the token view (about 20 MB of page); beyond: omitted


def _lines(path: Path) -> list[dict[str, Any]]:
    """The JSON objects of a JSONL file; a torn or non-object line is skipped."""
    out = []
    with open(path, encoding="utf-8", errors="replace") as f:
        for line in f:
            if line.strip():
                try:
                    obj = json.loads(line)
                except json.JSONDecodeError:
                    continue
                if isinstance(obj, dict):
                    out.append(obj)
    return out


def _kind(path: Path) -> str | None:
    """'groups', 'dropped' or 'eval' by the file's first record (None: not ours)."""
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            first = next((json.loads(line) for line in f if line.strip()), None)
    except (OSError, json.JSONDecodeError):
        return None
    if not isinstance(first, dict):
        return None
    if "samples" in first and "reason" in first:
        return "dropped"
    if "scores" in first:
        return "groups"
    if "score" in first and "messages" in first:
        return "eval"
    return None


def _text(content: Any) -> str:
    return content if isinstance(content, str) else json.dumps(content, ensure_ascii=False, default=str)


def _prompt_turn(message: Any) -> dict[str, Any]:
    """A prompt message as text (a few-shot tool call written out after the content)."""
    if not isinstance(message, dict):
        return {"r": "env", "role": "?", "c": _text(message)}
    text = _text(message.get("content") or "")
    if message.get("tool_calls"):
        text += ("\n" if text else "") + "tool_calls: " + _text(message["tool_calls"])
    role = str(message.get("role", "?"))
    return {"r": "assistant" if role == "assistant" else "env", "role": role, "c": text}


def _message_turn(message: Any) -> dict[str, Any]:
    """A conversation message after the prompt: assistant (its tool calls as `calls`), tool
    (`viewer_tools.tool_message_turn`) or environment."""
    if not isinstance(message, dict):
        return {"r": "env", "role": "?", "c": _text(message)}
    role = str(message.get("role", "?"))
    if role == "tool":
        return tool_message_turn(message)
    turn = {
        "r": "assistant" if role == "assistant" else "env",
        "role": role,
        "c": _text(message.get("content") or ""),
    }
    calls = message.get("tool_calls")
    if calls and role == "assistant":
        turn["calls"] = [call_record(c) for c in (calls if isinstance(calls, list) else [calls])]
    elif calls:
        turn["c"] += ("\n" if turn["c"] else "") + "tool_calls: " + _text(calls)
    return turn


def _turns(
    messages: list[dict[str, Any]], n_prompt: int, episode: dict[str, Any] | None
) -> tuple[list[dict[str, Any]], dict[str, Any] | None]:
    """The sample's turns after the prompt: from the episode record (per-turn finish reason, token
    count, info; each turn's tool calls from the conversation's k-th assistant message) when there
    is one, else from the conversation; and the sample's tool use (`viewer_tools.annotate`)."""
    if episode and episode.get("turns"):
        said = [m for m in messages[n_prompt:] if isinstance(m, dict) and m.get("role") == "assistant"]
        out: list[dict[str, Any]] = []
        infos = []
        for k, t in enumerate(episode["turns"], start=1):
            info = t.get("info") or {}
            infos.append(info)
            turn = {"r": "assistant", "role": "assistant", "c": _text(t.get("content", "")), "k": k,
                    "f": t.get("finish_reason"), "n": len(t["tokens"]) if t.get("tokens") else None, "info": info}  # fmt: skip
            calls = said[k - 1].get("tool_calls") if k <= len(said) else None
            if calls:
                turn["calls"] = [call_record(c) for c in (calls if isinstance(calls, list) else [calls])]
            out.append(turn)
            for m in t.get("env_messages") or []:
                env = _message_turn(m)
                if env["r"] != "tool":  # an environment message, whatever its role says
                    env.pop("calls", None)
                out.append({**env, "r": "tool" if env["r"] == "tool" else "env", "k": k})
        return out, annotate(out, infos)
    out = [_message_turn(m) for m in messages[n_prompt:]]
    return out, annotate(out)


def _turn_fields(messages: Any, n_prompt: int, episode: Any) -> dict[str, Any]:
    """A sample's `turns` and, when it called tools, `tu` (its tool use)."""
    turns, tools = _turns(messages if isinstance(messages, list) else [], n_prompt, episode)
    return {"turns": turns, "tu": tools} if tools else {"turns": turns}


def _prompt_len(messages: list[dict[str, Any]], prompt: Any, episode: dict[str, Any] | None) -> int:
    if isinstance(prompt, list):
        return len(prompt)
    if episode and episode.get("turns"):  # files written before `prompt` was recorded
        return max(0, len(messages) - sum(1 + len(t.get("env_messages") or []) for t in episode["turns"]))
    return max(0, len(messages) - 1)


class _Tokens:
    """Packs token ids, masks (a '0'/'1' string: 1 = sampled by the policy) and logprobs while the
    budget lasts."""

    def __init__(self, budget: int) -> None:
        self.left = budget
        self.omitted = 0

    def pack(self, ids: Any, masks: Any, logprobs: Any) -> dict[str, Any]:
        """`{"tok": packed}`, or `{"tok": None, "tokwhy": "none" | "budget"}` (no ids / over budget)."""
        if not isinstance(ids, list) or not ids:
            return {"tok": None, "tokwhy": "none"}
        if len(ids) > self.left:
            self.omitted += 1
            return {"tok": None, "tokwhy": "budget"}
        self.left -= len(ids)
        out: dict[str, Any] = {"ids": ids}
        if isinstance(masks, list) and len(masks) == len(ids):
            out["m"] = "".join("0" if m == -100 else "1" for m in masks)
        if isinstance(logprobs, list) and len(logprobs) == len(ids):
            try:
                out["lp"] = [round(x, 3) for x in logprobs]
            except (TypeError, ValueError, OverflowError):  # None, or -inf (a zero-probability token)
                out["lp"] = [
                    round(x, 3) if isinstance(x, int | float) and math.isfinite(x) else None for x in logprobs
                ]
        return {"tok": out}


NO_TOKENS = {"tok": None, "tokwhy": "none"}


def _tests(tests: Any) -> list[list[Any]]:
    """`RewardResult.tests` as compact `[index, kind, outcome, detail]` rows (a malformed one skipped)."""
    if not isinstance(tests, list):
        return []
    return [
        [t.get("index"), t.get("kind"), t.get("outcome"), t.get("detail") or ""]
        for t in tests
        if isinstance(t, dict)
    ]


def _reward_fields(reward: dict[str, Any] | None, score: Any) -> dict[str, Any]:
    reward = reward if isinstance(reward, dict) else {}
    seen = reward.get("seen")
    return {
        "score": reward.get("score", score),
        "status": reward.get("status") or ("ok" if score is not None else "unknown"),
        "reason": reward.get("reason") or "",
        "feedback": reward.get("feedback") or "",
        "components": reward.get("components") or {},
        "tests": _tests(reward.get("tests")),
        "seen": {str(k): _text(v) for k, v in seen.items()} if isinstance(seen, dict) else {},
    }


def _at(values: Any, j: int) -> Any:
    return values[j] if isinstance(values, list) and j < len(values) else None


def _from_groups(group: dict[str, Any], src: str, g: int, tokens: _Tokens) -> tuple[dict, list[dict]]:
    convs = group.get("messages") or []
    episodes = group.get("episodes") or []
    prompt = group.get("prompt")
    first = convs[0] if convs else []
    n_prompt = _prompt_len(first, prompt, _at(episodes, 0))
    record = {
        "uid": str(group.get("uid")), "item": group.get("item_uid"),
        "prompt": [_prompt_turn(m) for m in (prompt if isinstance(prompt, list) else first[:n_prompt])],
        "answer": group.get("answer"), "params": group.get("generation_params") or {},
        "src": src, "drop": None, "detail": "",
    }  # fmt: skip
    samples = []
    for j, score in enumerate(group.get("scores") or []):
        conv = _at(convs, j) or []
        episode = _at(episodes, j)
        override = _at(group.get("overrides"), j) or {}
        samples.append({
            "g": g, "j": j, "kind": "kept", **_reward_fields(_at(group.get("rewards"), j), score),
            "finish": _at(group.get("finish_reasons"), j),
            "ptok": _at(group.get("prompt_tokens"), j), "ctok": _at(group.get("completion_tokens"), j),
            "len": len(_at(group.get("tokens"), j) or []) or None,
            "adv0": bool(override.get("set_advantage_to_zero")),
            "stop": (episode or {}).get("stop_reason"),
            **_turn_fields(conv, _prompt_len(conv, prompt, episode), episode),
            **tokens.pack(_at(group.get("tokens"), j), _at(group.get("masks"), j),
                          _at(group.get("inference_logprobs"), j)),
        })  # fmt: skip
    return record, samples


def _from_dropped(rec: dict[str, Any], src: str, g: int, tokens: _Tokens) -> tuple[dict, list[dict]]:
    prompt = rec.get("prompt") if isinstance(rec.get("prompt"), list) else []
    reason = str(rec.get("reason"))
    record = {
        "uid": str(rec.get("uid")), "item": rec.get("item_uid"), "prompt": [_prompt_turn(m) for m in prompt],
        "answer": rec.get("answer"), "params": rec.get("generation_params") or {}, "src": src,
        "drop": reason, "detail": str(rec.get("detail") or ""),
    }  # fmt: skip
    kind = "unverified" if reason == "unverified" else "dropped"
    samples = []
    for j, s in enumerate(rec.get("samples") or []):
        messages = s.get("messages") or [*prompt, {"role": "assistant", "content": s.get("text", "")}]
        episode = s.get("episode")
        samples.append({
            "g": g, "j": j, "kind": kind, **_reward_fields(s.get("reward"), None),
            "finish": s.get("finish_reason"), "ptok": s.get("prompt_tokens"), "ctok": s.get("completion_tokens"),
            "len": None, "adv0": False, "stop": (episode or {}).get("stop_reason"),
            **_turn_fields(messages, _prompt_len(messages, prompt or None, episode), episode), **NO_TOKENS,
        })  # fmt: skip
    if not samples:  # inference failed: the group has no samples; one placeholder row says why
        samples.append({
            "g": g, "j": 0, "kind": kind, "ph": True, "score": None, "status": reason, "reason": record["detail"],
            "feedback": "", "components": {}, "tests": [], "seen": {}, "finish": None, "ptok": None,
            "ctok": None, "len": None, "adv0": False, "stop": None, "turns": [], **NO_TOKENS,
        })  # fmt: skip
    return record, samples


def _from_eval(s: dict[str, Any], src: str, g: int, tokens: _Tokens) -> tuple[dict, list[dict]]:
    messages = s.get("messages") or []
    episode = s.get("episode")
    prompt = s.get("prompt")
    n_prompt = _prompt_len(messages, prompt, episode)
    record = {
        "uid": str(s.get("uid")), "item": s.get("uid"),
        "prompt": [_prompt_turn(m) for m in (prompt if isinstance(prompt, list) else messages[:n_prompt])],
        "answer": s.get("answer", s.get("gold")), "params": s.get("generation_params") or {},
        "src": src, "drop": None, "detail": "",
    }  # fmt: skip
    reward = {k: s.get(k) for k in ("score", "status", "reason", "feedback", "components", "tests", "seen")}
    sample = {
        "g": g, "j": 0, "kind": "eval", **_reward_fields(reward, s.get("score")),
        "finish": s.get("finish_reason"), "ptok": s.get("prompt_tokens"), "ctok": s.get("completion_tokens"),
        "len": None, "adv0": False, "stop": s.get("stop_reason"),
        **_turn_fields(messages, n_prompt, episode), **NO_TOKENS,
    }  # fmt: skip
    return record, [sample]


_READERS = {"groups": _from_groups, "dropped": _from_dropped, "eval": _from_eval}


def _read(
    path: Path, kind: str, run: dict[str, Any], tokens: _Tokens, kept: dict[tuple[Path, str], int], r: int
) -> None:
    """Every record of `path` into `run` (its groups tagged with run index `r`); a record of the wrong
    shape is skipped and counted in a note. `kept` maps (folder, uid) of the groups read so far to
    their index: a dropped group that a resumed run has since written is skipped (its drop was
    superseded), noted too; a kept group and its unverified samples are linked (`peer`)."""
    bad = superseded = 0
    for rec in _lines(path):
        at = kept.get((path.parent, str(rec.get("uid")))) if kind == "dropped" else None
        if at is not None and rec.get("reason") != "unverified":
            superseded += 1
            continue
        try:
            group, samples = _READERS[kind](rec, path.name, len(run["groups"]), tokens)
        except (AttributeError, TypeError, ValueError, KeyError, IndexError):
            bad += 1
            continue
        group["run"], group["peer"] = r, at
        if at is not None:
            run["groups"][at]["peer"] = len(run["groups"])
        run["groups"].append(group)
        run["samples"].extend(samples)
        if kind == "groups":
            kept[(path.parent, group["uid"])] = len(run["groups"]) - 1
    if bad:
        run["notes"].append(f"{path.name}: {bad} malformed record(s) skipped")
    if superseded:
        run["notes"].append(
            f"{path.name}: {superseded} drop(s) skipped: a resumed run wrote those groups since"
        )


def _read_json(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError):
        return {}
    return data if isinstance(data, dict) else {}


def _files(path: Path) -> list[Path]:
    """The JSONL files to show: a folder's (recursively), or one file and its dropped sibling."""
    if path.is_dir():
        return sorted(path.rglob("*.jsonl"))
    dropped = path.with_suffix(".dropped.jsonl")
    return [path, dropped] if dropped.exists() and dropped != path else [path]


def _describe(run: dict[str, Any], summary: dict[str, Any], metrics: dict[str, Any]) -> None:
    """Fill a run's env, model and settings from its process summary or its evaluate metrics (whose
    task is `<env>_eval`, `environments.atropos_runtime.modes.run_evaluate`)."""
    general = metrics.get("config_general", {}) if isinstance(metrics.get("config_general"), dict) else {}
    results = metrics.get("results") if isinstance(metrics.get("results"), dict) else {}
    task = next(iter(results.keys()), "")
    run["env"] = (
        run.get("env")
        or summary.get("env")
        or (task.split("|")[1].removesuffix("_eval") if task.count("|") >= 2 else None)
    )
    run["model"] = run.get("model") or summary.get("model") or general.get("model_name")
    run["settings"] = (
        run.get("settings") or summary.get("settings") or general.get("generation_parameters") or {}
    )
    if metrics and "metrics" not in run:
        run["metrics"] = (results.get("all") if isinstance(results.get("all"), dict) else None) or {}


def load_run(path: str | Path, token_budget: int = TOKEN_BUDGET, tokenizer: Any = None) -> dict[str, Any]:
    """Everything the page shows, from a folder or one file (see the module docstring). With a
    `tokenizer` (an object, a name or a path), `vocab` maps every embedded token id to its text."""
    from environments.atropos_runtime.viewer_vocab import vocab

    root = Path(path)
    if not root.exists():
        raise FileNotFoundError(f"{root}: no such file or folder")
    run: dict[str, Any] = {"groups": [], "samples": [], "sources": [], "header": {}, "notes": [], "runs": []}
    tokens = _Tokens(token_budget)
    kept: dict[tuple[Path, str], int] = {}
    folders: dict[Path, int] = {}
    order = {"groups": 0, "eval": 1, "dropped": 2}  # drops last: they are checked against the groups
    found = [(file, kind) for file in _files(root) if (kind := _kind(file)) is not None]
    for file, kind in sorted(found, key=lambda fk: (order[fk[1]], fk[0])):
        run["sources"].append(str(file.relative_to(root) if root.is_dir() else file.name))
        if file.parent not in folders:
            folders[file.parent] = len(run["runs"])
            name = str(file.parent.relative_to(root)) if root.is_dir() else file.parent.name
            run["runs"].append({"name": name if name != "." else root.name})
        r = folders[file.parent]
        _read(file, kind, run, tokens, kept, r)
        summary = _read_json(file.with_suffix(".summary.json")) if kind == "groups" else {}
        metrics = _read_json(file.with_name("metrics.json")) if kind == "eval" else {}
        _describe(run["runs"][r], summary, metrics)
        if summary:
            run["header"].setdefault("summary", summary)
        if metrics:
            run["header"].setdefault("metrics", metrics)
    if not run["sources"]:
        raise ValueError(f"{root}: no process, evaluate or dropped JSONL found")
    header, runs = run["header"], run["runs"]
    for one in runs:
        one["env"] = one.get("env") or one["name"]
    header["env"] = ", ".join(dict.fromkeys(str(one["env"]) for one in runs))
    header["model"] = ", ".join(dict.fromkeys(str(one["model"]) for one in runs if one.get("model"))) or None
    header["settings"] = runs[0].get("settings") or {}
    if tokens.omitted:
        run["notes"].append(
            f"token view omitted for {tokens.omitted} samples (over the {token_budget:,}-token budget; "
            "rlvr view --tokens N raises it)"
        )
    summary = header.get("summary", {})
    if tokenizer is None:  # never bool() a tokenizer: len() would load a snapshot's real one
        tokenizer = summary.get("tokenizer")
    if tokenizer is not None and any(s["tok"] for s in run["samples"]):
        run["vocab"], note = vocab(
            tokenizer, {i for s in run["samples"] if s["tok"] for i in s["tok"]["ids"]}
        )
        run["notes"] += [note] if note else []
    return run
