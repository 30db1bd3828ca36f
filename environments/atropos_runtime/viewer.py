"""The rollout viewer: one static HTML file for any output folder, and `rlvr view PATH`.

`load_run(path)` (`environments.atropos_runtime.viewer_data`) reads what `process` and `evaluate`
write (a folder of one or several runs, or one file) and flattens it into runs, groups (prompt, gold
answer, generation parameters, drop reason) and samples (score, status, reason, feedback, components,
per-test records, what the rubric read, finish reason, token counts, `set_advantage_to_zero`, the
turns after the prompt, each marked assistant, tool or environment (tool calls matched to their
results: `viewer_tools`), and optionally the exact token ids
with their masks and logprobs). `write_viewer` embeds that as JSON in a `<script
type="application/json">` block (every `<`, `>`, `&`, line separator, DEL/C1 control and lone
surrogate escaped, so no text can close the block) and the page renders it with `textContent` only:
model text is never parsed as HTML. The list is virtualised (only the visible rows exist), so 10k
samples open at once; no network, no CDN: the file opens from disk.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path
from typing import Any

from environments.atropos_runtime.viewer_data import TOKEN_BUDGET, load_run
from environments.atropos_runtime.viewer_page import PAGE

__all__ = ["TOKEN_BUDGET", "load_run", "main", "page_json", "write_viewer"]

_UNSAFE = re.compile("[<>&\x7f-\x9f\u2028\u2029\ud800-\udfff]")
_CONTROLS = re.compile("[\x00-\x1f\x7f-\x9f\u200b-\u200f\u2028-\u202e\u2066-\u2069\ufeff\ud800-\udfff]")


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
    print(f"serving on http://127.0.0.1:{server.server_address[1]}/ (Ctrl-C to stop)", flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()
    return 0
