"""The rollout viewer: one static HTML file for any output folder, and `rlvr view PATH`.

`load_run(path)` reads what `process` and `evaluate` write (a folder, or one file):

* a process JSONL (`groups.jsonl`: one group per line, `environments.atropos_runtime.output`) with its siblings
  `<stem>.dropped.jsonl` (dropped groups and unverified samples, with the reason) and
  `<stem>.summary.json` (env, model, settings, counts);
* an evaluate folder (`samples.jsonl` + `metrics.json`).

and flattens them into groups (prompt, gold answer, generation parameters, drop reason) and samples
(score, status, reason, feedback, components, finish reason, token counts, `set_advantage_to_zero`,
the turns after the prompt, each marked assistant or environment, and optionally the exact token ids
with their masks and logprobs). `write_viewer` embeds that as JSON in a `<script
type="application/json">` block (every `<`, `>`, `&`, line separator, DEL/C1 control and lone
surrogate escaped, so no text can close the block) and the page renders it with `textContent` only:
model text is never parsed as HTML. The list is virtualised (only the visible rows exist), so 10k
samples open at once; no network, no CDN: the file opens from disk.
"""

from __future__ import annotations

import argparse
import json
import math
import re
import sys
from pathlib import Path
from typing import Any

from environments.atropos_runtime.viewer_page import PAGE

TOKEN_BUDGET = 1_000_000  # token ids embedded for the token view (about 20 MB of page); beyond: omitted
_UNSAFE = re.compile("[<>&\x7f-\x9f\u2028\u2029\ud800-\udfff]")
_CONTROLS = re.compile("[\x00-\x1f\x7f-\x9f\u200b-\u200f\u2028-\u202e\u2066-\u2069\ufeff\ud800-\udfff]")


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


def _message_turn(message: Any) -> dict[str, Any]:
    if not isinstance(message, dict):
        return {"r": "env", "role": "?", "c": _text(message)}
    role = str(message.get("role", "?"))
    text = _text(message.get("content") or "")
    if message.get("tool_calls"):
        text += ("\n" if text else "") + "tool_calls: " + _text(message["tool_calls"])
    return {"r": "assistant" if role == "assistant" else "env", "role": role, "c": text}


def _turns(messages: list[dict[str, Any]], n_prompt: int, episode: dict[str, Any] | None) -> list[dict]:
    """The sample's turns after the prompt: from the episode record (per-turn finish reason, token
    count, info) when there is one, else from the conversation."""
    if episode and episode.get("turns"):
        out: list[dict[str, Any]] = []
        for k, t in enumerate(episode["turns"], start=1):
            out.append({"r": "assistant", "role": "assistant", "c": _text(t.get("content", "")), "k": k,
                        "f": t.get("finish_reason"), "n": len(t["tokens"]) if t.get("tokens") else None,
                        "info": t.get("info") or {}})  # fmt: skip
            for m in t.get("env_messages") or []:
                out.append({**_message_turn(m), "r": "env", "k": k})
        return out
    return [_message_turn(m) for m in messages[n_prompt:]]


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

    def pack(self, ids: Any, masks: Any, logprobs: Any) -> dict[str, Any] | None:
        if not isinstance(ids, list) or not ids:
            return None
        if len(ids) > self.left:
            self.omitted += 1
            return None
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
        return out


def _reward_fields(reward: dict[str, Any] | None, score: Any) -> dict[str, Any]:
    reward = reward or {}
    return {
        "score": reward.get("score", score),
        "status": reward.get("status") or ("ok" if score is not None else "unknown"),
        "reason": reward.get("reason") or "",
        "feedback": reward.get("feedback") or "",
        "components": reward.get("components") or {},
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
        "prompt": [_message_turn(m) for m in (prompt if isinstance(prompt, list) else first[:n_prompt])],
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
            "turns": _turns(conv, _prompt_len(conv, prompt, episode), episode),
            "tok": tokens.pack(_at(group.get("tokens"), j), _at(group.get("masks"), j),
                               _at(group.get("inference_logprobs"), j)),
        })  # fmt: skip
    return record, samples


def _from_dropped(rec: dict[str, Any], src: str, g: int, tokens: _Tokens) -> tuple[dict, list[dict]]:
    prompt = rec.get("prompt") if isinstance(rec.get("prompt"), list) else []
    reason = str(rec.get("reason"))
    record = {
        "uid": str(rec.get("uid")), "item": rec.get("item_uid"), "prompt": [_message_turn(m) for m in prompt],
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
            "turns": _turns(messages, _prompt_len(messages, prompt or None, episode), episode), "tok": None,
        })  # fmt: skip
    if not samples:  # inference failed: the group has no samples; one placeholder row says why
        samples.append({
            "g": g, "j": 0, "kind": kind, "score": None, "status": reason, "reason": record["detail"],
            "feedback": "", "components": {}, "finish": None, "ptok": None, "ctok": None, "len": None,
            "adv0": False, "stop": None, "turns": [], "tok": None,
        })  # fmt: skip
    return record, samples


def _from_eval(s: dict[str, Any], src: str, g: int, tokens: _Tokens) -> tuple[dict, list[dict]]:
    messages = s.get("messages") or []
    episode = s.get("episode")
    prompt = s.get("prompt")
    n_prompt = _prompt_len(messages, prompt, episode)
    record = {
        "uid": str(s.get("uid")), "item": s.get("uid"),
        "prompt": [_message_turn(m) for m in (prompt if isinstance(prompt, list) else messages[:n_prompt])],
        "answer": s.get("answer", s.get("gold")), "params": s.get("generation_params") or {},
        "src": src, "drop": None, "detail": "",
    }  # fmt: skip
    reward = {k: s.get(k) for k in ("score", "status", "reason", "feedback", "components")}
    sample = {
        "g": g, "j": 0, "kind": "eval", **_reward_fields(reward, s.get("score")),
        "finish": s.get("finish_reason"), "ptok": s.get("prompt_tokens"), "ctok": s.get("completion_tokens"),
        "len": None, "adv0": False, "stop": s.get("stop_reason"),
        "turns": _turns(messages, n_prompt, episode), "tok": None,
    }  # fmt: skip
    return record, [sample]


_READERS = {"groups": _from_groups, "dropped": _from_dropped, "eval": _from_eval}


def _read(path: Path, kind: str, run: dict[str, Any], tokens: _Tokens, kept: set[tuple[Path, str]]) -> None:
    """Every record of `path` into `run`; a record of the wrong shape is skipped and counted in a note.
    `kept` holds (folder, uid) of the groups read so far: a dropped group that a resumed run has since
    written is skipped (its drop was superseded), noted too."""
    bad = superseded = 0
    for rec in _lines(path):
        if (
            kind == "dropped"
            and rec.get("reason") != "unverified"
            and (path.parent, str(rec.get("uid"))) in kept
        ):
            superseded += 1
            continue
        try:
            group, samples = _READERS[kind](rec, path.name, len(run["groups"]), tokens)
        except (AttributeError, TypeError, ValueError, KeyError, IndexError):
            bad += 1
            continue
        run["groups"].append(group)
        run["samples"].extend(samples)
        if kind == "groups":
            kept.add((path.parent, group["uid"]))
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


def load_run(path: str | Path, token_budget: int = TOKEN_BUDGET, tokenizer: Any = None) -> dict[str, Any]:
    """Everything the page shows, from a folder or one file (see the module docstring). With a
    `tokenizer` (an object, a name or a path), `vocab` maps every embedded token id to its text."""
    root = Path(path)
    if not root.exists():
        raise FileNotFoundError(f"{root}: no such file or folder")
    run: dict[str, Any] = {"groups": [], "samples": [], "sources": [], "header": {}, "notes": []}
    tokens = _Tokens(token_budget)
    kept: set[tuple[Path, str]] = set()
    order = {"groups": 0, "eval": 1, "dropped": 2}  # drops last: they are checked against the groups
    found = [(file, kind) for file in _files(root) if (kind := _kind(file)) is not None]
    for file, kind in sorted(found, key=lambda fk: (order[fk[1]], fk[0])):
        run["sources"].append(str(file.relative_to(root) if root.is_dir() else file.name))
        _read(file, kind, run, tokens, kept)
        if kind == "groups":
            summary = _read_json(file.with_suffix(".summary.json"))
            if summary:
                run["header"].setdefault("summary", summary)
        elif kind == "eval":
            metrics = _read_json(file.with_name("metrics.json"))
            if metrics:
                run["header"].setdefault("metrics", metrics)
    header = run["header"]
    summary, metrics = header.get("summary", {}), header.get("metrics", {})
    general = metrics.get("config_general", {}) if isinstance(metrics.get("config_general"), dict) else {}
    task = next(iter((metrics.get("results") or {}).keys()), "")
    header["env"] = summary.get("env") or (task.split("|")[1] if task.count("|") >= 2 else None)
    header["model"] = summary.get("model") or general.get("model_name")
    header["settings"] = summary.get("settings") or general.get("generation_parameters") or {}
    if not header["env"]:
        header["env"] = (root if root.is_dir() else root.parent).name
    if tokens.omitted:
        run["notes"].append(
            f"token view omitted for {tokens.omitted} samples (over the {token_budget:,}-token budget; "
            "rlvr view --tokens N raises it)"
        )
    if not run["sources"]:
        raise ValueError(f"{root}: no process, evaluate or dropped JSONL found")
    if tokenizer is None:  # never bool() a tokenizer: len() would load a snapshot's real one
        tokenizer = summary.get("tokenizer")
    if tokenizer is not None and any(s["tok"] for s in run["samples"]):
        run["vocab"], note = _vocab(
            tokenizer, {i for s in run["samples"] if s["tok"] for i in s["tok"]["ids"]}
        )
        run["notes"] += [note] if note else []
    return run


def _vocab(tokenizer: Any, ids: set[int]) -> tuple[dict[str, str], str]:
    """{id: its text} for `ids` ("" note), or ({}, why not): a name is loaded from local files only."""
    if isinstance(tokenizer, str | Path):
        try:
            from transformers import AutoTokenizer

            tokenizer = AutoTokenizer.from_pretrained(str(tokenizer), local_files_only=True)
        except Exception as exc:  # noqa: BLE001 - the page still shows the ids
            return (
                {},
                f"token view shows ids only: tokenizer {tokenizer} not loadable offline ({type(exc).__name__})",
            )
    try:
        return {str(i): tokenizer.decode([i]) for i in sorted(ids)}, ""
    except Exception as exc:  # noqa: BLE001
        return {}, f"token view shows ids only: decoding failed ({type(exc).__name__}: {exc})"


def page_json(data: Any) -> str:
    """`data` as JSON that is safe inside `<script type="application/json">` (no `<`, `>`, `&`,
    line separators, DEL/C1 controls or lone surrogates appear raw; C0 controls json escapes)."""
    try:
        text = json.dumps(data, ensure_ascii=False, separators=(",", ":"), default=str, allow_nan=False)
    except ValueError:  # NaN or inf somewhere (not JSON): as strings, so one odd value cannot break the page
        text = json.dumps(_sanitise(data), ensure_ascii=False, separators=(",", ":"), default=str)
    return _UNSAFE.sub(lambda m: f"\\u{ord(m.group()):04x}", text)


def _default_out(path: Path) -> Path:
    return path / "view.html" if path.is_dir() else path.with_suffix(".html")


def write_viewer(
    path: str | Path, out: str | Path | None = None, token_budget: int = TOKEN_BUDGET, tokenizer: Any = None
) -> Path:
    """Write the viewer page for `path` (a folder or a file); returns the page's path (default: the
    file's `.html` sibling, or `view.html` in the folder). `tokenizer`: see `load_run`."""
    src = Path(path)
    run = load_run(src, token_budget, tokenizer)
    target = Path(out) if out else _default_out(src)
    title = " · ".join(str(x) for x in ("rlvr", run["header"]["env"], run["header"]["model"]) if x)
    title = _CONTROLS.sub("", title)
    html_title = title.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;").replace("%", "&#37;")
    head, tail = PAGE.replace("%TITLE%", html_title).split("%DATA%")
    page = head + page_json(run) + tail
    target.write_text(page, encoding="utf-8", errors="surrogatepass")
    return target


def _sanitise(value: Any) -> Any:
    """NaN/inf (not JSON) as strings, so one odd score cannot break the page."""
    if isinstance(value, float) and (value != value or value in (float("inf"), float("-inf"))):
        return str(value)
    if isinstance(value, dict):
        return {str(k): _sanitise(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_sanitise(v) for v in value]
    return value


def main(argv: list[str] | None = None) -> int:
    """`rlvr view PATH [--out FILE] [--serve] [--port N] [--no-open] [--tokens N]`."""
    p = argparse.ArgumentParser(
        prog="rlvr view", description="Build (and open) the rollout viewer for an output folder or file."
    )
    p.add_argument("path", help="an output folder (process or evaluate) or one JSONL file")
    p.add_argument("--out", help="where to write the page (default: <file>.html, or <folder>/view.html)")
    p.add_argument(
        "--serve", action="store_true", help="serve the page on 127.0.0.1 (for a remote machine: ssh -L)"
    )
    p.add_argument("--port", type=int, default=8765, help="port for --serve (default 8765)")
    p.add_argument("--no-open", action="store_true", help="write the page only; do not open a browser")
    p.add_argument("--tokens", type=int, default=TOKEN_BUDGET, help="token ids to embed for the token view")
    p.add_argument(
        "--tokenizer", help="name or path to show each token's text (default: the run's, if local)"
    )
    args = p.parse_args(argv)
    try:
        page = write_viewer(args.path, args.out, args.tokens, args.tokenizer)
    except (FileNotFoundError, ValueError) as exc:
        print(f"rlvr view: {exc}", file=sys.stderr)
        return 2
    print(f"viewer written to {page}")
    if args.serve:
        return _serve(page, args.port)
    if not args.no_open:
        import webbrowser

        url = page.resolve().as_uri()
        if not webbrowser.open(url):
            print(
                f"no browser could be opened here: open {url} yourself, or serve it with "
                f"rlvr view {args.path} --serve (then ssh -L {args.port}:127.0.0.1:{args.port} from your machine)"
            )
    return 0


def _serve(page: Path, port: int) -> int:
    from functools import partial
    from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer

    class Handler(SimpleHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 - http.server's naming
            self.path = "/" + page.name  # the page only, whatever is asked
            super().do_GET()

    server = ThreadingHTTPServer(("127.0.0.1", port), partial(Handler, directory=str(page.parent)))
    print(f"serving on http://127.0.0.1:{server.server_address[1]}/ (Ctrl-C to stop)")
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()
    return 0
