"""groups.html in a real headless Chromium (Debian's `chromium` + `chromium-driver`, driven by Selenium).

Hostile model text (scripts, event handlers, `javascript:` links, broken markup, meta refresh...) in
every field the viewer shows must execute nothing and render as text; a file of 1,000 groups must
open and scroll without freezing. A breach is detected harmlessly: a page variable, the page title,
and a canary HTTP server on loopback that counts any request the page makes.
"""

from __future__ import annotations

import shutil
import tempfile
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from environments.atropos_runtime.output import GroupWriter, write_html

pytestmark = pytest.mark.slow
CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
CHROMEDRIVER = shutil.which("chromedriver") or "/usr/bin/chromedriver"
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         "--disable-dev-shm-usage", "--window-size=1200,900"]  # fmt: skip


class Canary:
    """A loopback HTTP server that counts every request (any hit = the page ran or loaded something)."""

    def __init__(self) -> None:
        hits: list[str] = []

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802 - http.server's naming
                hits.append(self.path)
                self.send_response(204)
                self.end_headers()

            def log_message(self, *args: object) -> None:
                pass

        self.hits = hits
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def browser():
    if not (Path(CHROMIUM).exists() and Path(CHROMEDRIVER).exists()):
        pytest.skip("Debian chromium + chromium-driver not installed (scripts/install.sh installs them)")
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    profile = tempfile.mkdtemp(prefix="rlvr-chromium-")
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in [*FLAGS, f"--user-data-dir={profile}"]:
        options.add_argument(flag)
    driver = webdriver.Chrome(service=Service(CHROMEDRIVER), options=options)
    driver.set_page_load_timeout(60)
    driver.set_script_timeout(60)
    try:
        yield driver
    finally:
        driver.quit()
        shutil.rmtree(profile, ignore_errors=True)


def hostile_payloads(canary: str) -> list[str]:
    hit = f"fetch('{canary}/js')"
    return [
        f"<script>window.__pwned='script';{hit}</script>",
        f'<img src="{canary}/img" onerror="window.__pwned=\'onerror\'">',
        "<svg onload=\"window.__pwned='svg'\"><circle r=5 /></svg>",
        "<a href=\"javascript:window.__pwned='link'\">click me</a>",
        f'<iframe src="javascript:parent.__pwned=\'iframe\'"></iframe><iframe src="{canary}/frame"></iframe>',
        f'<meta http-equiv="refresh" content="0;url={canary}/refresh">',
        f'<link rel="stylesheet" href="{canary}/css"><style>body{{display:none}}</style>',
        f'</pre></div></details><script>window.__pwned="breakout";{hit}</script><pre>',
        "<details open ontoggle=\"window.__pwned='toggle'\">x</details>",
        "<b><i>unclosed <div <pre <!-- never closed comment",
        f"]]> --> </title><script>document.title='PWNED';{hit}</script>",
        f'<body onload="window.__pwned=\'body\'"><base href="{canary}/base/">',
        f'<object data="{canary}/object"></object><embed src="{canary}/embed">',
        f'<form action="{canary}/form"><button formaction="javascript:window.__pwned=1">go</button></form>',
        f"<plaintext><textarea><noscript><template><script>{hit}</script>",
        "&lt;script&gt; already escaped &amp; &#x3C;b&#x3E; entities",
        f"\u2028\u2029 <scr\x00ipt>{hit}</scr\x00ipt> \ufeff",
    ]


def write_groups(path: Path, groups: list[dict]) -> Path:
    with GroupWriter(path) as writer:
        for group in groups:
            writer.write(group)
    return write_html(path)


def open_all_details(driver) -> None:
    driver.execute_script("document.querySelectorAll('details').forEach(d => d.open = true)")


def test_hostile_model_text_executes_nothing_and_renders_as_text(browser, tmp_path):
    canary = Canary()
    try:
        payloads = hostile_payloads(canary.url)
        groups = []
        for i, text in enumerate(payloads):
            prompt = [{"role": "user", "content": f"question {i}: {text}"}]
            groups.append(
                {
                    "uid": f"g{i} {text}",
                    "scores": [1.0, 0.0],
                    "messages": [
                        [*prompt, {"role": "assistant", "content": text}],
                        [*prompt, {"role": text, "content": "second " + text}],
                    ],
                    "rewards": [
                        {"score": 1.0, "status": "ok", "reason": text},
                        {"score": 0.0, "status": text, "reason": "r"},
                    ],
                }
            )
        page = write_groups(tmp_path / "hostile.jsonl", groups)
        browser.get(page.as_uri())
        open_all_details(browser)
        # a user clicking every summary (twice: close and reopen) fires any toggle handler that got in
        browser.execute_script("document.querySelectorAll('summary').forEach(s => { s.click(); s.click(); })")
        browser.find_elements("css selector", "body > details > summary")[0].click()  # a real click too
        open_all_details(browser)
        browser.execute_script("window.scrollTo(0, document.body.scrollHeight)")
        # let anything queued (timers, image errors, fetches) run before looking
        browser.execute_async_script("const done = arguments[0]; setTimeout(done, 1500)")

        assert browser.execute_script("return window.__pwned === undefined")
        assert browser.title == "hostile.jsonl"
        assert canary.hits == []
        counts = browser.execute_script(
            "const q = s => document.querySelectorAll(s).length; return {"
            "script: q('script'), img: q('img'), svg: q('svg'), iframe: q('iframe'), a: q('a'),"
            "meta: q('meta'), style: q('style'), object: q('object,embed,form,link,base,textarea')}"
        )
        assert counts == {"script": 0, "img": 0, "svg": 0, "iframe": 0, "a": 0, "meta": 1, "style": 1,
                          "object": 0}  # fmt: skip  # only the viewer's own charset meta and CSS
        assert browser.execute_script("return document.body.offsetHeight") > 0  # no CSS hid the page
        text = browser.execute_script("return document.body.innerText")
        for payload in payloads:
            shown = payload.replace("\x00", "").strip()  # the HTML parser drops NULs in text
            assert shown.split("\u2029")[-1].strip()[:40] in text, payload
        assert browser.current_url == page.as_uri()  # no refresh or navigation happened
    finally:
        canary.close()


def test_a_thousand_groups_open_and_scroll_without_freezing(browser, tmp_path):
    body = "step by step the answer is 42. " * 12
    groups = [
        {
            "uid": f"item-{i}#0",
            "scores": [float(j % 2) for j in range(8)],
            "messages": [
                [
                    {"role": "user", "content": f"Question {i}: what is 6 x 7?"},
                    {"role": "assistant", "content": f"{body} (sample {j})"},
                ]  # fmt: skip
                for j in range(8)
            ],
            "rewards": [{"score": float(j % 2), "status": "ok", "reason": "match"} for j in range(8)],
        }
        for i in range(1000)
    ]
    page = write_groups(tmp_path / "big.jsonl", groups)
    browser.get(page.as_uri())
    assert browser.execute_script("return document.querySelectorAll('body > details').length") == 1000
    open_all_details(browser)  # the worst case: every group expanded
    # scroll to the bottom in 40 steps, one per animation frame; report the longest frame
    longest_ms, height = browser.execute_async_script(
        """
        const done = arguments[0];
        const height = document.documentElement.scrollHeight, steps = 40;
        let i = 0, last = performance.now(), longest = 0;
        function step(now) {
          longest = Math.max(longest, now - last); last = now;
          window.scrollTo(0, (height * ++i) / steps);
          if (i < steps) requestAnimationFrame(step); else done([longest, height]);
        }
        requestAnimationFrame(step);
        """
    )
    print(f"1,000 groups (8,000 samples, {page.stat().st_size / 1e6:.1f} MB): page height {height}px, "
          f"longest frame while scrolling {longest_ms:.0f} ms")  # fmt: skip
    assert browser.execute_script("return window.scrollY") > 0.9 * (height - 900)
    assert longest_ms < 5000, f"a frame took {longest_ms:.0f} ms: the page froze"
    last_text = browser.find_elements("css selector", "body > details")[-1].text
    assert "Group 999" in last_text and "sample 7" in last_text
