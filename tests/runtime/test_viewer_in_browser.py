"""The rollout viewer in a real headless Chromium (Debian's `chromium` + `chromium-driver`, via Selenium).

One browser session for the module. Checked on pages built by `rlvr view`:
* hostile text (scripts, event handlers, `javascript:` links, broken markup, meta refresh, control
  characters, a 1 MB completion) in every field the viewer shows executes nothing, renders as text
  with control characters escaped, and leaves the page usable. A breach is detected harmlessly: a
  page variable, the page title, and a canary HTTP server on loopback that counts any request;
* a real multi-turn `process` run (the guess-a-number env on a scripted loopback policy, with an
  environment outage so some samples are unverified and some groups dropped) plus its `evaluate`:
  the run header, filters, sort, keyboard navigation, an episode shown turn by turn, the dropped
  section, a screenshot;
* 10,000 samples open with only the visible rows in the DOM, and the token view;
* what the rubric saw (math's extracted answer beside the gold, the judge's reply, code's per-test
  table), tokens that wrap between tokens only, the no-token-view notes and the reward colours; kept,
  dropped and unverified counts per run, the run, drop and text filters, unverified samples shown
  with their group; hostile run names, envs and drop reasons.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import tempfile
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from environments.atropos_runtime.cli import main as rlvr
from environments.atropos_runtime.output import GroupWriter

pytestmark = pytest.mark.slow
ROOT = Path(__file__).resolve().parents[2]
CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
CHROMEDRIVER = shutil.which("chromedriver") or "/usr/bin/chromedriver"
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         "--disable-dev-shm-usage", "--window-size=1400,1000"]  # fmt: skip


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


@pytest.fixture(scope="module")
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


def view(path: Path) -> Path:
    """Build the page the way a user does: `rlvr view PATH --no-open`."""
    assert rlvr(["view", str(path), "--no-open"]) == 0
    return path / "view.html" if path.is_dir() else path.with_suffix(".html")


def by_id(driver, name: str):
    return driver.find_element("id", name)


HOME, END, DOWN, UP, ESCAPE = "\ue011", "\ue010", "\ue015", "\ue013", "\ue00c"  # selenium's Keys
CTRL, NULL, BACKSPACE = "\ue009", "\ue000", "\ue003"


def key(driver, *keys: str) -> None:
    """Keys to the focused element (the list, unless a field has focus)."""
    for k in keys:
        driver.switch_to.active_element.send_keys(k)


def detail(driver) -> str:
    return by_id(driver, "detail").text


def selected_row(driver) -> str:
    # one script call: a scroll re-renders the rows (a found element could go stale before .text)
    return driver.execute_script("const r = document.querySelector('.row.sel'); return r ? r.innerText : ''")


def rows(driver) -> list[str]:
    return driver.execute_script("return [...document.querySelectorAll('.row')].map((r) => r.innerText)")


def drop_column(driver) -> list[str]:
    return driver.execute_script(
        "return [...document.querySelectorAll('.row .dr')].map((e) => e.textContent)"
    )


def shown(driver) -> int:
    return int(by_id(driver, "count").text.split()[0])


def choose(driver, select_id: str, value: str) -> None:
    from selenium.webdriver.support.ui import Select

    Select(by_id(driver, select_id)).select_by_value(value)


def type_into(driver, field: str, text: str) -> None:
    box = by_id(driver, field)
    box.send_keys(CTRL, "a", NULL, BACKSPACE)  # as a user clears it (clear() fires no input event)
    if text:
        box.send_keys(text)
    box.send_keys(ESCAPE)  # back to the list


# ---------------------------------------------------------------- hostile text


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
        f'</script></pre></div></details><script>window.__pwned="breakout";{hit}</script><pre>',
        "<details open ontoggle=\"window.__pwned='toggle'\">x</details>",
        "<b><i>unclosed <div <pre <!-- never closed comment",
        f"]]> --> </title><script>document.title='PWNED';{hit}</script>",
        f'<body onload="window.__pwned=\'body\'"><base href="{canary}/base/">',
        f'<object data="{canary}/object"></object><embed src="{canary}/embed">',
        f'<form action="{canary}/form"><button formaction="javascript:window.__pwned=1">go</button></form>',
        f"<plaintext><textarea><noscript><template><script>{hit}</script>",
        "&lt;script&gt; already escaped &amp; &#x3C;b&#x3E; entities",
        f"\u2028\u2029 <scr\x00ipt>{hit}</scr\x00ipt> \ufeff",
        "%DATA% %TITLE% {{ template }} ${injection} `backtick`",
    ]


CONTROL = "NUL[\x00] ESC[\x1b[31mred\x1b[0m] BEL[\x07] DEL[\x7f] C1[\x85] LS[\u2028] RLO[\u202e]"
CONTROL_SHOWN = ["\\x00", "\\x1b", "\\x07", "\\x7f", "\\x85", "\\u2028", "\\u202e"]


def hostile_run(folder: Path, payloads: list[str]) -> None:
    """A process folder with every payload in every field the viewer shows, and a 1 MB completion."""
    with GroupWriter(folder / "groups.jsonl") as writer:
        for i, text in enumerate(payloads):
            prompt = [{"role": "system", "content": f"system {i}: {text}"}, {"role": "user", "content": text}]
            episode = {"id": "e", "stop_reason": text, "turns": [
                {"content": f"first {text}", "finish_reason": "stop", "tokens": [1], "env_messages": [
                    {"role": text, "content": f"env says {text}"}], "info": {text: text}},
                {"content": f"second {text}", "finish_reason": text, "tokens": [2], "env_messages": [], "info": {}},
            ]}  # fmt: skip
            messages = [*prompt, {"role": "assistant", "content": f"first {text}"},
                        {"role": text, "content": f"env says {text}"}, {"role": "assistant", "content": f"second {text}"}]  # fmt: skip
            writer.write({
                "uid": f"g{i} {text}", "item_uid": text, "prompt": prompt, "answer": f"gold {text}",
                "scores": [1.0, 0.0], "messages": [messages, [*prompt, {"role": "assistant", "content": text}]],
                "episodes": [episode, {"id": "f", "stop_reason": "x", "turns": []}],
                "rewards": [{"score": 1.0, "status": "ok", "reason": text, "feedback": f"feedback {text}",
                             "components": {text: 1.0}, "seen": {"answer": f"extracted {text}", "rule": text,
                                                                 text: f"seen {text}", "judge.reply": f"reply {text}"},
                             "tests": [{"index": text, "kind": text, "outcome": text, "detail": f"test detail {text}"}]},
                            {"score": 0.0, "status": text, "reason": "r", "feedback": "", "components": {}}],
                "finish_reasons": ["stop", text], "overrides": [{}, {}], "generation_params": {text: text},
            })  # fmt: skip
        big = "A" * 1_000_000 + " zzz-needle " + payloads[0]
        writer.write({"uid": "big", "prompt": [{"role": "user", "content": CONTROL}], "scores": [0.0, 1.0],
                      "messages": [[{"role": "user", "content": CONTROL}, {"role": "assistant", "content": big}],
                                   [{"role": "user", "content": CONTROL}, {"role": "assistant", "content": CONTROL}]],
                      "rewards": [{"score": 0.0, "status": "wrong", "reason": "long"},
                                  {"score": 1.0, "status": "ok", "reason": CONTROL}]})  # fmt: skip
    with GroupWriter(folder / "groups.dropped.jsonl") as writer:
        writer.write({"uid": "d", "item_uid": "d", "reason": payloads[0], "detail": payloads[1], "prompt": [],
                      "answer": payloads[2], "samples": [{"text": payloads[3], "finish_reason": payloads[4],
                      "reward": {"score": None, "status": "error", "reason": payloads[5]}}]})  # fmt: skip
    summary = {
        "env": "hostile <b>env</b> " + payloads[10],
        "model": "m\x00odel",
        "settings": {"t": payloads[0]},
    }
    (folder / "groups.summary.json").write_text(json.dumps(summary))


def test_hostile_text_executes_nothing_renders_as_text_and_the_page_stays_usable(browser, tmp_path):
    canary = Canary()
    try:
        payloads = hostile_payloads(canary.url)
        hostile_run(tmp_path, payloads)
        page = view(tmp_path / "groups.jsonl")
        browser.get(page.as_uri())
        assert browser.title == "rlvr · hostile <b>env</b> " + payloads[10] + " · model"
        texts = []
        for _ in range(2 * len(payloads)):  # every sample by keyboard; open every prompt, token view
            browser.execute_script("document.querySelectorAll('details').forEach(d => d.open = true)")
            texts.append(detail(browser))
            key(browser, "j")
        text = "\n".join(texts)
        for payload in payloads:
            visible = (
                payload.replace("\x00", "\\x00").replace("\u2028", "\\u2028").replace("\u2029", "\\u2029")
            )
            visible = visible.replace("\ufeff", "\\ufeff")
            for field in (f"first {visible}", f"second {visible}", f"env says {visible}", f"gold {visible}",
                          f"feedback {visible}", f"extracted {visible}", f"seen {visible}", f"reply {visible}",
                          f"test detail {visible}"):  # fmt: skip
                assert field in text, field
        # the 1 MB completion: cut at 20k characters, whole on request, findable by search
        type_into(browser, "f-text", "zzz-needle")
        assert shown(browser) == 1
        pre = browser.find_elements("css selector", ".assistant pre")[0]
        assert len(pre.get_attribute("textContent")) < 25_000
        pre.find_element("css selector", "button.more").click()
        assert len(pre.get_attribute("textContent")) > 1_000_000
        type_into(browser, "f-text", "")
        key(browser, END)
        assert "\\x00" in detail(browser) or "\\x00" in browser.find_element("tag name", "body").text
        key(browser, HOME, "j")
        assert selected_row(browser).split()[0] == "0" and "#0.1" in selected_row(browser)  # still navigable
        # every control character shown as an escape, none raw anywhere in the rendered page
        type_into(browser, "f-text", "nul[")
        browser.execute_script("document.querySelectorAll('details').forEach(d => d.open = true)")
        body = browser.find_element("tag name", "body").text
        assert all(esc in body for esc in CONTROL_SHOWN), body[:2000]
        assert not any(ch in body for ch in "\x00\x1b\x07\x7f\x85\u2028\u202e")
        # clicking every button and summary, the dropped tab included, runs nothing of the data's
        type_into(browser, "f-text", "")
        by_id(browser, "tab-rejected").click()
        assert "dropped group" in detail(browser) and payloads[3] in detail(browser)
        assert payloads[0][:40] in browser.find_element("css selector", ".row .dr").get_attribute(
            "textContent"
        )
        choose(browser, "f-drop", payloads[0])
        assert shown(browser) == 1
        browser.execute_script("document.querySelectorAll('summary, button').forEach(b => b.click())")
        browser.execute_async_script(
            "const done = arguments[0]; setTimeout(done, 1000)"
        )  # let queued work run
        assert browser.execute_script("return window.__pwned === undefined")
        assert canary.hits == []
        counts = browser.execute_script(
            "const q = s => document.querySelectorAll(s).length; return {"
            "script: q('script:not(#rlvr-data):not(:last-of-type)'), img: q('img'), svg: q('svg'),"
            "iframe: q('iframe'), a: q('a'), meta: q('meta'), style: q('style'),"
            "object: q('object,embed,form,link,base,textarea,template,plaintext,noscript')}"
        )
        assert counts == {"script": 0, "img": 0, "svg": 0, "iframe": 0, "a": 0, "meta": 2, "style": 1,
                          "object": 0}  # fmt: skip  # only the viewer's own charset/CSP metas and CSS
        assert browser.execute_script("return document.querySelectorAll('script').length") == 2
        assert browser.execute_script("return document.body.offsetHeight") > 0  # no CSS hid the page
        assert browser.current_url == page.as_uri()  # no refresh or navigation happened
    finally:
        canary.close()


# ---------------------------------------------------------------- a real multi-turn run


def guess_policy(prompt_text: str, index: int) -> str:
    """Bisection, except choice 3 rambles on its first turn (cut at max_tokens: finish `length`)."""
    from tests.runtime.guess_env import binary_search_policy

    if index == 3 and prompt_text.count("<|im_start|>assistant") == 1:
        return "let me think about this for a long while " * 4
    return binary_search_policy(prompt_text, index)


def guess_run(folder: Path) -> None:
    """`process` twice and `evaluate`, on the guess env against a scripted loopback policy: a clean
    run (choice 3 rambles: finish `length`), and one whose environment fails at turn 2 (bisection
    only), so samples not solved at turn 1 are unverified and groups with none solved are dropped."""
    from atroposlib.envs.server_handling.server_baseline import APIServerConfig
    from transformers import AutoTokenizer

    from environments.atropos_runtime.local_model import build_tiny_model
    from environments.atropos_runtime.modes import run_evaluate, run_process
    from tests.runtime.guess_env import GuessConfig, GuessEnv, binary_search_policy
    from tests.runtime.scripted_policy import ScriptedPolicy

    tiny = build_tiny_model(os.environ.get("RLVR_TINY_MODEL") or ROOT / ".cache" / "tiny-model")

    def env(policy: ScriptedPolicy, **kwargs) -> GuessEnv:
        config = GuessConfig(wandb_name="guess", use_wandb=False, max_token_length=1024, group_size=4,
                             tokenizer_name=str(tiny), ensure_scores_are_not_same=False, max_turns=3,
                             max_tokens=8, total_steps=8, **kwargs)  # fmt: skip
        server = APIServerConfig(server_type="vllm", model_name="scripted", base_url=policy.base_url,
                                 api_key="x", tokenizer_name=str(tiny), timeout=30, health_check=False)  # fmt: skip
        return GuessEnv(config, [server])

    async def main() -> None:
        with ScriptedPolicy(AutoTokenizer.from_pretrained(tiny), guess_policy) as policy:
            await run_process(env(policy, data_path_to_save_groups=str(folder / "a-clean" / "groups.jsonl")))
            policy.answer = binary_search_policy
            await run_process(env(policy, fail_on_turn=2, data_path_to_save_groups=str(folder / "b-faulty" / "groups.jsonl")))  # fmt: skip
            evaluator = env(policy, data_dir_to_save_evals=str(folder / "c-eval"))
            await evaluator.setup()
            await run_evaluate(evaluator)
            await evaluator.aclose()
            await evaluator.close_watcher()

    asyncio.run(main())


def test_a_real_multi_turn_run_header_filters_sort_keys_turns_and_drops(browser, tmp_path):
    guess_run(tmp_path)
    groups = [json.loads(x) for x in (tmp_path / "a-clean" / "groups.jsonl").read_text().splitlines()]
    page = view(tmp_path)
    browser.get(page.as_uri())
    assert browser.title == "rlvr · guess · scripted"
    header = by_id(browser, "facts").text
    faulty = [json.loads(x) for x in (tmp_path / "b-faulty" / "groups.jsonl").read_text().splitlines()]
    kept = sum(len(g["scores"]) for g in groups) + sum(len(g["scores"]) for g in faulty)
    assert (
        f"kept: {kept + 8} samples in" in header and "runs: 3" in header
    )  # two process runs, 8 eval samples
    dropped = [
        json.loads(x) for x in (tmp_path / "b-faulty" / "groups.dropped.jsonl").read_text().splitlines()
    ]
    n_dropped = sum(d["reason"] == "error" for d in dropped)
    unverified = [d for d in dropped if d["reason"] == "unverified"]
    n_unverified = sum(len(d["samples"]) for d in unverified)
    assert n_dropped and n_unverified  # the run really dropped groups and kept some unverified out
    # kept, dropped and unverified samples counted apart, overall and per run
    dropped_line = f"dropped: {4 * n_dropped} samples in {n_dropped} groups (error {n_dropped})"
    unverified_line = f"unverified: {n_unverified} samples of {len(unverified)} kept groups"
    assert dropped_line in header and unverified_line in header
    assert f"error {4 * n_dropped + n_unverified}" in header and "length 8" in header
    runs = [by_id(browser, f"run-{k}").text for k in range(3)]
    assert runs[0].startswith("run a-clean") and "env: guess" in runs[0] and "dropped: none" in runs[0]
    assert "group_size=4 · temperature=1 · top_p=1 · max_tokens=8" in runs[0]
    assert runs[1].startswith("run b-faulty") and dropped_line in runs[1] and unverified_line in runs[1]
    assert f"kept: {sum(len(g['scores']) for g in faulty)} samples in {len(faulty)} groups" in runs[1]
    assert (
        runs[2].startswith("run c-eval") and "kept: 8 samples in 8 groups" in runs[2] and "eval: " in runs[2]
    )
    total = shown(browser)
    assert total == kept + 8
    # the run filter: one run's samples only
    choose(browser, "f-run", "1")
    assert shown(browser) == sum(len(g["scores"]) for g in faulty)
    choose(browser, "f-run", "2")
    assert shown(browser) == 8 and "no token view: evaluate records no token ids" in detail(browser)
    choose(browser, "f-run", "")
    # the reward colour scale: 1 green, 0 red
    colours = browser.execute_script(
        "return [...document.querySelectorAll('.row .sc')].map((e) => [e.textContent, getComputedStyle(e).backgroundColor])"
    )
    assert {c for t, c in colours if t == "1"} == {"rgb(179, 239, 179)"}, colours
    assert {c for t, c in colours if t == "0"} == {"rgb(239, 179, 179)"}, colours
    # search by item uid and by prompt text
    item = faulty[0]["item_uid"]
    type_into(browser, "f-text", item)
    with_item = sum(len(g["scores"]) for g in [*groups, *faulty] if g["item_uid"] == item)
    assert shown(browser) == with_item and item in detail(browser)
    type_into(browser, "f-text", "guess the number")
    assert shown(browser) == total

    # filters: each narrows to exactly the samples with that property
    choose(browser, "f-finish", "length")
    assert shown(browser) >= 8 and all("length" in r for r in rows(browser))
    assert "set_advantage_to_zero true (truncated" in " ".join(detail(browser).split())
    choose(browser, "f-finish", "")
    type_into(browser, "f-min", "0.5")
    high = shown(browser)
    assert 0 < high < total and all(r.startswith("1") for r in rows(browser))
    type_into(browser, "f-min", "")
    type_into(browser, "f-max", "0.5")
    assert shown(browser) == total - high
    type_into(browser, "f-max", "")
    type_into(browser, "f-text", "lower")
    with_lower = shown(browser)
    assert 0 < with_lower < total and "lower" in detail(browser)
    type_into(browser, "f-text", "")
    # sort: the lowest reward first, then the highest
    choose(browser, "f-sort", "score-asc")
    key(browser, HOME)
    assert selected_row(browser).startswith("0")
    choose(browser, "f-sort", "score-desc")
    key(browser, HOME)
    assert selected_row(browser).startswith("1")
    choose(browser, "f-sort", "order")

    # keyboard: j/k and arrows move one row, End/Home to the ends
    key(browser, HOME)
    first = selected_row(browser)
    key(browser, "j", "j", DOWN)
    third = selected_row(browser)
    assert third != first and "#0.3" in third
    key(browser, "k", UP, "k")
    assert selected_row(browser) == first
    key(browser, END)
    assert "#" in selected_row(browser) and selected_row(browser) != first

    # an episode turn by turn: prompt (system + user) only in the prompt box, then assistant /
    # environment boxes alternating, each assistant turn with its finish reason and token count
    type_into(browser, "f-text", "higher")
    key(browser, HOME)
    boxes = browser.find_elements("css selector", "#detail .box")
    kinds = [b.get_attribute("class").split()[1] for b in boxes]
    turns = [k for k in kinds if k in ("assistant", "env")]
    assert turns[:3] == ["assistant", "env", "assistant"], kinds
    prompt = browser.find_element("css selector", "#detail .prompt").text
    assert "Guess the number" in prompt and "higher" not in prompt and "lower" not in prompt
    assistant = browser.find_elements("css selector", "#detail .assistant")
    assert assistant[0].text.startswith("assistant · turn 1 · finish stop · 2 tokens")
    assert "info.solved false" in " ".join(assistant[0].text.split()) and "turn 2" in assistant[1].text
    env_box = browser.find_elements("css selector", "#detail .env")[0].text
    assert env_box.startswith("environment (user) · after turn 1") and "higher" in env_box
    assert "gold answer" in detail(browser) and "episode stop" in detail(browser)
    key(browser, "t")  # the token view: exact ids, prompt greyed, sampled ones coloured by logprob
    tokens = browser.find_elements("css selector", "#tokens .toks span")
    assert browser.execute_script(
        "return [...document.querySelectorAll('#tokens .toks span')].every((s) => s.getClientRects().length === 1)"
    )
    assert tokens and tokens[0].get_attribute("class") == "p" and tokens[0].text == "<|im_start|>"  # decoded
    assert any(t.get_attribute("class") != "p" and "logprob" in t.get_attribute("title") for t in tokens)
    shot = tmp_path / "episode.png"
    browser.save_screenshot(str(shot))
    assert shot.stat().st_size > 20_000
    type_into(browser, "f-text", "")

    # dropped groups and unverified samples: their own section, with their reasons
    browser.find_element("id", "tab-rejected").click()
    rejected = shown(browser)
    assert rejected == sum(max(1, len(d["samples"])) for d in dropped)
    assert "environment backend is down" in detail(browser)
    assert "never written to the training output" in detail(browser)
    assert "no token view: dropped and unverified samples carry no token ids" in detail(browser)
    assert browser.execute_script(
        "return [...document.querySelectorAll('.row .sc')].every((e) => e.classList.contains('unvs'))"
    )
    browser.save_screenshot(str(tmp_path / "dropped.png"))
    # the drop reason: a column, a filter and a search term
    assert set(drop_column(browser)) == {"error", "unverified"}
    choose(browser, "f-drop", "error")
    assert shown(browser) == 4 * n_dropped and set(drop_column(browser)) == {"error"}
    choose(browser, "f-drop", "unverified")
    assert shown(browser) == n_unverified
    # an unverified sample is shown with its group: the kept samples' chips, one click away
    chips = browser.find_elements("css selector", "#detail .group .sib")
    kept_of = next(g for g in faulty if g["uid"] == unverified[0]["uid"])
    assert len(chips) == len(kept_of["scores"]) + len(unverified[0]["samples"])
    assert sum("unv" in c.get_attribute("class").split() for c in chips) == len(unverified[0]["samples"])
    next(c for c in chips if "unv" not in c.get_attribute("class").split()).click()
    assert by_id(browser, "tab-samples").get_attribute("class") == "on" and kept_of["uid"] in detail(browser)
    assert browser.find_elements("css selector", "#detail .group .sib.unv")  # and back the other way
    choose(browser, "f-drop", "")
    by_id(browser, "tab-rejected").click()
    type_into(browser, "f-text", "drop error")
    assert shown(browser) == 4 * n_dropped


# ---------------------------------------------------------------- 10k samples


def test_ten_thousand_samples_open_lazily_and_stay_navigable(browser, tmp_path):
    body = "step by step the answer is 42. " * 12
    with GroupWriter(tmp_path / "groups.jsonl") as writer:
        for i in range(1250):
            writer.write({
                "uid": f"item-{i}#0", "prompt": [{"role": "user", "content": f"Question {i}: what is 6 x 7?"}],
                "scores": [float(j % 2) for j in range(8)],
                "messages": [[{"role": "user", "content": f"Question {i}: what is 6 x 7?"},
                              {"role": "assistant", "content": f"{body} (sample {i}.{j})"}] for j in range(8)],
                "tokens": [list(range(100, 120)) for _ in range(8)],
                "masks": [[-100] * 12 + list(range(112, 120)) for _ in range(8)],
                "inference_logprobs": [[1.0] * 12 + [-0.05 * k for k in range(8)] for _ in range(8)],
                "rewards": [{"score": float(j % 2), "status": "ok", "reason": "match"} for j in range(8)],
                "finish_reasons": ["stop"] * 8,
            })  # fmt: skip
    page = view(tmp_path / "groups.jsonl")
    browser.get(page.as_uri())
    ms = browser.execute_script("return performance.now()")
    print(f"10,000 samples ({page.stat().st_size / 1e6:.1f} MB): interactive after {ms:.0f} ms")
    assert shown(browser) == 10_000
    assert browser.execute_script("return document.querySelectorAll('.row').length") < 120
    key(browser, END)
    assert "(sample 1249.7)" in detail(browser)
    assert browser.execute_script("return document.querySelectorAll('.row').length") < 120
    type_into(browser, "f-text", "sample 777.3)")
    assert shown(browser) == 1 and "(sample 777.3)" in detail(browser)
    key(browser, "t")
    spans = browser.find_elements("css selector", "#tokens .toks span")
    assert [s.get_attribute("class") for s in spans] == ["p"] * 12 + [""] * 8


def test_a_run_that_kept_nothing_says_so_and_shows_its_drops(browser, tmp_path):
    with GroupWriter(tmp_path / "groups.dropped.jsonl") as writer:
        for i in range(3):
            writer.write({"uid": f"g{i}", "item_uid": f"i{i}", "reason": "error", "detail": "judge unreachable",
                          "prompt": [{"role": "user", "content": f"question {i}"}], "answer": "yes",
                          "samples": [{"text": f"answer {i}", "finish_reason": "length",
                                       "reward": {"score": None, "status": "error", "reason": "judge unreachable"}}]})  # fmt: skip
    browser.get(view(tmp_path).as_uri())
    assert "No samples were kept: 3 dropped or unverified" in by_id(browser, "facts").text
    assert "dropped: 3 samples in 3 groups (error 3)" in by_id(browser, "facts").text
    assert shown(browser) == 3 and "judge unreachable" in detail(browser) and "answer 0" in detail(browser)
    by_id(browser, "tab-samples").click()
    assert "No samples were kept: 3 dropped or unverified" in by_id(browser, "list").text


# ---------------------------------------------------------------- what the rubric saw


def rubric_runs(folder: Path) -> None:
    """Three runs, as math, judge and code rubrics write them: the extracted answer, the judge's
    reply, per-test records; the code run has long tokens (a `tokenizers` tokenizer.json) to wrap."""
    from tokenizers import Tokenizer, models

    vocab = {"<unk>": 0, **{f"tok{k:02d}" + "-" * 20: k + 1 for k in range(40)}}
    Tokenizer(models.WordLevel(vocab, unk_token="<unk>")).save(str(folder / "tokenizer.json"))
    q = [{"role": "user", "content": "What is 6 x 7?"}]
    tests = [{"index": 0, "kind": "stdio", "outcome": "passed", "detail": ""},
             {"index": 1, "kind": "call", "outcome": "failed", "detail": "wrong answer"},
             {"index": 2, "kind": "assert", "outcome": "passed", "detail": ""}]  # fmt: skip
    runs = {
        "math": ([0.0, 1.0], [{"seen": {"answer": "41", "rule": "boxed"}}, {"seen": {"answer": "42", "rule": "boxed"}}]),
        "judge": ([0.7, 0.5], [{"seen": {"judge.reply": "Mostly right. <score>7</score>"}}, {}]),
        "code": ([2 / 3, 1.0], [{"tests": tests}, {"tests": [{**t, "outcome": "passed"} for t in tests]}]),
    }  # fmt: skip
    for name, (scores, extra) in runs.items():
        (folder / name).mkdir()
        ids = [1 + k % 40 for k in range(400)]
        with GroupWriter(folder / name / "groups.jsonl") as writer:
            writer.write({"uid": f"{name}#0", "item_uid": name, "prompt": q, "answer": "42", "scores": scores,
                          "messages": [[*q, {"role": "assistant", "content": f"{name} answer {j}"}] for j in range(2)],
                          "rewards": [{"score": sc, "status": "ok", "reason": "r", **x} for sc, x in zip(scores, extra, strict=True)],
                          **({"tokens": [ids, ids], "masks": [[-100] * 20 + ids[20:]] * 2} if name == "code" else {})})  # fmt: skip
        summary = {"env": name, "model": "m", "tokenizer": str(folder / "tokenizer.json")}
        (folder / name / "groups.summary.json").write_text(json.dumps(summary))


def test_what_the_rubric_saw_tokens_that_do_not_break_and_the_reward_colours(browser, tmp_path):
    rubric_runs(tmp_path)
    assert rlvr(["view", str(tmp_path), "--no-open", "--tokens", "500"]) == 0
    browser.get((tmp_path / "view.html").as_uri())
    assert browser.title == "rlvr · code, judge, math · m"
    assert [by_id(browser, f"run-{k}").text.split()[1] for k in range(3)] == ["code", "judge", "math"]
    # math: the extracted answer beside the gold one
    choose(browser, "f-run", "2")
    assert shown(browser) == 2
    assert by_id(browser, "saw").find_element("css selector", ".extracted").text == "41"
    assert by_id(browser, "saw").find_element("css selector", ".gold").text == "42"
    assert "extracted answer (boxed)" in by_id(browser, "saw").text
    # judge: its reply
    choose(browser, "f-run", "1")
    assert "judge's reply (judge.reply)\nMostly right. <score>7</score>" in by_id(browser, "saw").text
    key(browser, "j")
    assert not browser.find_elements("id", "saw") and "gold answer" in detail(browser)  # nothing more to show
    # code: the per-test table, its first failure marked
    choose(browser, "f-run", "0")
    saw = by_id(browser, "saw")
    assert "3 tests: passed 2 · failed 1 · first failure: test 1" in saw.text
    cells = [
        [td.text for td in tr.find_elements("css selector", "td")]
        for tr in saw.find_elements("css selector", "tr")
    ]
    assert cells[1:] == [
        ["0", "stdio", "passed", ""],
        ["1", "call", "failed", "wrong answer"],
        ["2", "assert", "passed", ""],
    ]
    assert saw.find_element("css selector", "tr.first").text.startswith("1 call failed")
    # tokens: decoded through tokenizer.json, wrapped between tokens, never inside one
    key(browser, "t")
    spans = "[...document.querySelectorAll('#tokens .toks span')]"
    assert browser.execute_script(f"return {spans}.length") == 400
    assert browser.execute_script(f"return {spans}[30].textContent") == "tok30--------------------"
    assert browser.execute_script(f"return new Set({spans}.map((s) => s.offsetTop)).size") > 10  # many lines
    assert browser.execute_script(f"return {spans}.every((s) => s.getClientRects().length === 1)")
    key(browser, "j")  # the second sample's 400 ids were over the 500-id budget: said so
    assert "no token view: the page's token budget was spent" in detail(
        browser
    ) and not browser.find_elements("id", "tokens")
    # the reward colour scale
    choose(browser, "f-run", "")
    colours = browser.execute_script(
        "return Object.fromEntries([...document.querySelectorAll('.row .sc')].map((e) => [e.textContent, getComputedStyle(e).backgroundColor]))"
    )
    assert colours["0"] == "rgb(239, 179, 179)" and colours["1"] == "rgb(179, 239, 179)"
    assert colours["0.500"] == "rgb(239, 239, 179)" and len(set(colours.values())) == 5, colours


def test_hostile_run_names_envs_and_drop_reasons_render_as_text(browser, tmp_path):
    canary = Canary()
    try:
        payloads = hostile_payloads(canary.url)
        for k, name in enumerate(["a", "b"]):
            (tmp_path / name).mkdir()
            (tmp_path / name / "groups.jsonl").write_text(
                json.dumps({"uid": "g", "scores": [1.0], "messages": [[]]}) + "\n"
            )
            summary = {"env": payloads[k], "model": payloads[k + 2], "settings": {payloads[4]: payloads[5]}}
            (tmp_path / name / "groups.summary.json").write_text(json.dumps(summary))
            drop = {"uid": "d", "reason": payloads[6 + k], "detail": payloads[8], "samples": [{"text": "x", "reward": {"score": None, "status": "error", "seen": {"reply": payloads[9]}}}]}  # fmt: skip
            (tmp_path / name / "groups.dropped.jsonl").write_text(json.dumps(drop) + "\n")
        browser.get(view(tmp_path).as_uri())
        runs = by_id(browser, "runs").get_attribute("textContent")
        assert payloads[0] in runs and payloads[1] in runs and payloads[2] in runs and payloads[5] in runs
        options = [
            o.get_attribute("textContent") for o in browser.find_elements("css selector", "#f-run option")
        ]
        assert options[1:] == [f"a ({payloads[0]})"[:80], f"b ({payloads[1]})"[:80]]
        browser.execute_script(  # selenium's select_by_value cannot quote a value holding both quote marks
            "const s = document.getElementById('f-drop'); s.value = arguments[0];"
            "s.dispatchEvent(new Event('change'))",
            payloads[7],
        )
        assert shown(browser) == 1 and payloads[9] in detail(browser) and payloads[8] in detail(browser)
        browser.execute_script("document.querySelectorAll('summary, button, .sib').forEach(b => b.click())")
        browser.execute_async_script("const done = arguments[0]; setTimeout(done, 500)")
        assert browser.execute_script("return window.__pwned === undefined") and canary.hits == []
        assert browser.execute_script("return document.querySelectorAll('script').length") == 2
    finally:
        canary.close()
