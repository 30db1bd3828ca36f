"""Start-up shims (environments/atropos_runtime/lazy_imports.py) and the tokenizer snapshot they serve.

The shims must change what is imported and when, never behaviour: a stand-in package turns into the
real one on first use, and a snapshot tokenizer answers exactly as transformers' AutoTokenizer does.
"""

from __future__ import annotations

import importlib.util
import json
import os
import random
import subprocess
import sys
from pathlib import Path

import pytest

from environments.atropos_runtime import lazy_imports as _atropos_lazy
from environments.atropos_runtime.tokenizer_snapshot import SnapshotTokenizer, snapshot

ROOT = Path(__file__).resolve().parents[2]
ENV_SCRIPTS = sorted((ROOT / "environments").glob("*_env.py"))
HEAVY = ("torch", "sympy", "math_verify", "datasets", "pygments")
STAND_INS = ("wandb", "transformers", "openai", "aiohttp", "yaml", "jsonlines", "trio")
ALL_STAND_INS = {m: "_StandIn" for m in STAND_INS if importlib.util.find_spec(m)}  # trio: only if installed

_REPORT = """
import atexit, json, runpy, sys
STAND_INS = %r
def report():
    kinds = {m: type(sys.modules[m]).__name__ for m in STAND_INS if m in sys.modules}
    heavy = [m for m in %r if m in sys.modules]
    print("REPORT" + json.dumps({"kinds": kinds, "heavy": heavy}))
atexit.register(report)
sys.argv = [%r, "--help"]
runpy.run_path(%r, run_name="__main__")
"""


def _python(code: str, **env: str) -> subprocess.CompletedProcess:
    environ = dict(os.environ, PYTHONPATH=str(ROOT), **env)
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=environ, cwd=ROOT)


@pytest.mark.parametrize("script", ENV_SCRIPTS, ids=lambda p: p.stem)
def test_help_imports_nothing_heavy(script: Path):
    proc = _python(_REPORT % (STAND_INS, HEAVY, str(script), str(script)))
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "serve" in proc.stdout and "process" in proc.stdout
    report = json.loads(proc.stdout.rsplit("REPORT", 1)[1])
    assert report["heavy"] == []
    assert report["kinds"] == ALL_STAND_INS


def test_the_verifiers_bridge_help_loads_neither_verifiers_nor_the_v1_endpoint():
    script = ROOT / "environments" / "verifiers_env.py"
    proc = _python(
        _REPORT % (STAND_INS, ("verifiers", "environments.vf_bridge.v1_endpoint"), str(script), str(script))
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert json.loads(proc.stdout.rsplit("REPORT", 1)[1])["heavy"] == []


def test_stand_ins_turn_into_the_real_packages():
    code = """
import importlib.util, sys, types
import environments, atroposlib.envs.base as base
assert type(sys.modules["wandb"]).__name__ == "_StandIn"
assert importlib.util.find_spec("wandb") is not None and importlib.util.find_spec("transformers") is not None
assert callable(base.wandb.init)                      # first use imports the real wandb
assert type(sys.modules["wandb"]) is types.ModuleType and "wandb.sdk" in sys.modules
from transformers import PreTrainedTokenizerFast     # any other name imports the real transformers
assert type(sys.modules["transformers"]).__name__ != "_StandIn"
import transformers.utils                            # and submodules load under the real package
print("OK", PreTrainedTokenizerFast.__module__, "torch" in sys.modules)
"""
    proc = _python(code)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.split() == ["OK", "transformers.tokenization_utils_tokenizers", "False"]


def test_openai_type_modules_load_without_the_sdk_and_stay_the_same_classes():
    """atroposlib's two openai type imports load under deferred-init stand-ins; the first other use of
    openai imports the real SDK, which keeps (and binds) the modules already loaded."""
    code = """
import sys
import environments, atroposlib.envs.base
from openai.types.chat.chat_completion import ChatCompletion
assert type(sys.modules["openai"]).__name__ == "_StandIn" and "openai._client" not in sys.modules
import openai
from openai import AsyncOpenAI                         # any other name imports the real SDK
assert type(sys.modules["openai"]).__name__ == "module" and "openai._client" in sys.modules
assert type(sys.modules["openai.types"]).__name__ == "module"
import openai.types.chat
assert openai.types.chat.ChatCompletion is ChatCompletion is openai.types.chat.chat_completion.ChatCompletion
assert openai.types.Completion is sys.modules["openai.types.completion"].Completion
client = AsyncOpenAI(base_url="http://127.0.0.1:9/v1", api_key="x")
print("OK", type(client).__module__, issubclass(openai.APITimeoutError, openai.OpenAIError))
"""
    proc = _python(code)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.split() == ["OK", "openai", "True"]


def test_aiohttp_loads_on_first_use_and_its_errors_count_as_connect_errors_from_then_on():
    code = """
import asyncio, sys
import environments, atroposlib.envs.base as base
from environments.atropos_runtime.server_health import connect_errors, is_connect_error
assert type(sys.modules["aiohttp"]).__name__ == "_StandIn" and "aiohttp.client" not in sys.modules
assert connect_errors() == (__import__("httpx").TransportError, asyncio.TimeoutError, OSError)
async def main():
    async with base.aiohttp.ClientSession() as session:   # what atroposlib's get_status does
        import aiohttp
        assert isinstance(session, base.aiohttp.ClientSession) and type(session) is aiohttp.ClientSession
        assert issubclass(aiohttp.ClientSession, base.aiohttp.ClientSession)
asyncio.run(main())
import aiohttp
assert type(sys.modules["aiohttp"]).__name__ == "module"
assert aiohttp.ClientConnectionError in connect_errors()
assert is_connect_error(aiohttp.ServerDisconnectedError()) and not is_connect_error(ValueError())
print("OK", base.aiohttp.ClientSession.__name__, base.aiohttp.ClientTimeout is aiohttp.ClientTimeout)
"""
    proc = _python(code)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.split() == ["OK", "ClientSession", "True"]


def test_reads_through_a_stand_in_of_a_real_package_take_no_lock_and_no_scan():
    """Modules that imported a stand-in keep it (atroposlib's `yaml`): once the package is real,
    every read through the stand-in must be a plain lookup, not a lock and a walk over sys.modules
    (with numpy stood in for, that walk made transformers' decode crawl)."""
    code = """
import sys, environments, atroposlib.envs.base as base
from environments.atropos_runtime import lazy_imports as _atropos_lazy
base.yaml.safe_load                                      # the first read imports the real yaml
yaml = sys.modules["yaml"]
assert type(base.yaml).__name__ == "_StandIn" and type(yaml).__name__ == "module"
class Refuse:
    def __enter__(self): raise AssertionError("lock taken")
    def __exit__(self, *exc): return False
class Modules(dict):
    def items(self): raise AssertionError("sys.modules walked")
_atropos_lazy._lock = Refuse()
sys.modules = Modules(sys.modules)
assert base.yaml.safe_load is yaml.safe_load and base.yaml.SafeLoader is yaml.SafeLoader
print("OK")
"""
    proc = _python(code)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.split() == ["OK"]


def test_eager_switch_disables_the_shims():
    proc = _python("import sys, environments; print('wandb' in sys.modules, 'transformers' in sys.modules)",
                   RLVR_EAGER_IMPORTS="1")  # fmt: skip
    assert proc.stdout.split() == ["False", "False"], proc.stderr[-2000:]


def _real_auto(path: Path):
    return _atropos_lazy._real("transformers").AutoTokenizer.from_pretrained(str(path))


def _fresh_load(path: Path):
    _atropos_lazy._loaded.clear()
    return _atropos_lazy.load_tokenizer(str(path))


def _texts(tok, rng: random.Random, n: int) -> list[str]:
    vocab = [t for t in tok.convert_ids_to_tokens(list(range(min(len(tok), 400))))]
    pieces = [
        *tok.special_tokens_map.values(),
        "<|im_start|>",
        " ",
        "\n",
        "\t",
        "é",
        "漢",
        "🙂",
        "  ",
        "12",
        ".",
    ]
    out = []
    for _ in range(n):
        words = [rng.choice(pieces) if rng.random() < 0.3 else tok.convert_tokens_to_string([rng.choice(vocab)])
                 for _ in range(rng.randint(0, 25))]  # fmt: skip
        out.append("".join(words))
    return out


@pytest.fixture
def memo_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("RLVR_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setattr(_atropos_lazy, "_loaded", {})
    return tmp_path / "cache"


def test_snapshot_tokenizer_answers_as_autotokenizer(tiny_model: Path, tmp_path: Path, memo_dir: Path):
    model = tmp_path / "model"
    model.mkdir()
    for f in tiny_model.iterdir():
        if not f.name.endswith(".safetensors"):
            (model / f.name).write_bytes(f.read_bytes())
    real = _real_auto(model)
    cold = _fresh_load(model)
    assert type(cold) is type(real)  # first load: the real AutoTokenizer, its class remembered
    warm = _fresh_load(model)
    assert isinstance(warm, SnapshotTokenizer)
    assert _fresh_load(model) is not warm and _atropos_lazy.load_tokenizer(
        str(model)
    ) is _atropos_lazy.load_tokenizer(str(model))

    rng = random.Random(7)
    for text in _texts(real, rng, 150):
        for special in (True, False):
            ids = real.encode(text, add_special_tokens=special)
            assert warm.encode(text, add_special_tokens=special) == ids, text
            for skip in (True, False):
                assert warm.decode(ids, skip_special_tokens=skip) == real.decode(
                    ids, skip_special_tokens=skip
                )
    roles = ("system", "user", "assistant")
    for _ in range(40):
        chat = [{"role": rng.choice(roles), "content": t} for t in _texts(real, rng, rng.randint(1, 5))]
        for gen in (True, False):
            want = real.apply_chat_template(chat, tokenize=False, add_generation_prompt=gen)
            assert warm.apply_chat_template(chat, tokenize=False, add_generation_prompt=gen) == want
        # calls the copy does not implement are the real tokenizer's
        assert list(warm.apply_chat_template(chat, tokenize=True)["input_ids"]) == list(
            real.apply_chat_template(chat, tokenize=True)["input_ids"]
        )
    assert (warm.bos_token_id, warm.eos_token_id, warm.pad_token_id) == (
        real.bos_token_id,
        real.eos_token_id,
        real.pad_token_id,
    )
    assert warm.convert_ids_to_tokens([5, 6]) == real.convert_ids_to_tokens([5, 6]) and len(warm) == len(real)

    # any change of the files that steer AutoTokenizer's choice: the real AutoTokenizer again
    config = json.loads((model / "tokenizer_config.json").read_text())
    (model / "tokenizer_config.json").write_text(json.dumps({**config, "model_max_length": 999}))
    reloaded = _fresh_load(model)
    assert not isinstance(reloaded, SnapshotTokenizer) and reloaded.model_max_length == 999
    assert isinstance(_fresh_load(model), SnapshotTokenizer) and _fresh_load(model).model_max_length == 999


def test_a_snapshot_that_disagrees_is_never_stored(tiny_model: Path, memo_dir: Path):
    real = _real_auto(tiny_model)
    state = snapshot(real)
    assert state is not None
    assert SnapshotTokenizer(state, lambda: real).disagreements(real) == []
    wrong_template = {**state, "chat_template": state["chat_template"].replace("assistant", "helper")}
    assert any(
        "chat template" in p for p in SnapshotTokenizer(wrong_template, lambda: real).disagreements(real)
    )
    wrong_special = {**state, "split_special_tokens": True}
    assert any(
        p.startswith("encode") for p in SnapshotTokenizer(wrong_special, lambda: real).disagreements(real)
    )
    real.clean_up_tokenization_spaces_for_bpe_even_though_it_will_corrupt_output = True
    real.clean_up_tokenization_spaces = True
    assert snapshot(real) is None  # decode clean-up is not copied: such tokenizers stay real


def test_generated_math_rows_come_back_identical_from_the_disk_cache(memo_dir: Path, monkeypatch):
    from environments import data_sources, math_env

    tasks = ["basic_arithmetic", "gcd"]
    fresh = math_env._rg_build(tasks, 7, 3)
    assert math_env._rg_generate(tasks, 7, 3) == fresh  # first call builds and stores
    monkeypatch.setattr(math_env, "_rg_build", lambda *a: pytest.fail("rows rebuilt despite the cache"))
    assert math_env._rg_generate(tasks, 7, 3) == fresh
    (stored,) = (memo_dir / "rows").iterdir()
    stored.write_text("{torn")  # a damaged cache file only costs a rebuild
    assert data_sources.cached_rows("k", lambda: [{"a": 1}]) == [{"a": 1}]
    monkeypatch.undo()
    monkeypatch.setenv("RLVR_CACHE_DIR", str(memo_dir))
    assert math_env._rg_generate(tasks, 7, 3) == fresh
    easier = {"basic_arithmetic": {"max_terms": 2, "max_digits": 1}}  # other generator options: other rows
    assert math_env._rg_generate(tasks, 7, 3, easier) == math_env._rg_build(tasks, 7, 3, easier) != fresh


@pytest.mark.slow
def test_process_imports_neither_torch_nor_wandb_once_the_tokenizer_is_known(vllm_server, tmp_path):
    """The first run on a tokenizer directory uses the real AutoTokenizer (torch included); later runs
    use the verified snapshot, and nothing imports torch, sympy, wandb or the real transformers."""
    qa = ROOT / "environments" / "qa_env.py"
    argv = [str(qa), "process", "--env.tokenizer_name", vllm_server.model, "--openai.model_name", vllm_server.model,
            "--openai.base_url", vllm_server.base_url, "--env.group_size", "2", "--env.total_steps", "2",
            "--env.max_tokens", "8", "--env.data_path_to_save_groups", str(tmp_path / "g.jsonl")]  # fmt: skip
    code = _REPORT.replace('sys.argv = [%r, "--help"]', "sys.argv = %r") % (STAND_INS, HEAVY, argv, str(qa))
    reports = []
    for i in range(2):
        run_code = code.replace(str(tmp_path / "g.jsonl"), str(tmp_path / f"g{i}.jsonl"))
        proc = _python(run_code, RLVR_CACHE_DIR=str(tmp_path / "cache"), WANDB_MODE="disabled")
        assert proc.returncode == 0, proc.stderr[-3000:]
        reports.append(json.loads(proc.stdout.rsplit("REPORT", 1)[1]))
    assert "torch" in reports[0]["heavy"] and reports[0]["kinds"]["transformers"] != "_StandIn"
    # aiohttp is real here: process's token path samples through it (servers.VLLMTokenServer)
    assert reports[1] == {"kinds": {**ALL_STAND_INS, "aiohttp": "module"}, "heavy": []}
    assert [len((tmp_path / f"g{i}.jsonl").read_text().splitlines()) for i in range(2)] == [2, 2]


def test_a_snapshot_pickles_as_the_real_tokenizer(tiny_model: Path):
    import copy
    import pickle

    real = _real_auto(tiny_model)
    copy_of = SnapshotTokenizer(snapshot(real), lambda: real)
    for clone in (pickle.loads(pickle.dumps(copy_of)), copy.deepcopy(copy_of)):
        assert type(clone) is type(real) and clone.encode("what is 2 plus 2") == real.encode(
            "what is 2 plus 2"
        )


def test_the_snapshots_render_is_jinjas_render_with_globals_and_errors():
    """The snapshot renders without jinja's per-call merge of the globals: same text, same errors."""
    from environments.atropos_runtime.tokenizer_snapshot import _jinja_environment, _render

    template = _jinja_environment().from_string(
        "{% set ns = namespace(n=0) %}{% for m in messages %}{% set ns.n = ns.n + 1 %}{{ m.role }}"
        "{{ m.content | tojson }}{% endfor %}{{ ns.n }}{{ range(3) | list }}{{ bos_token }}"
        "{% if bad %}{{ raise_exception('bad role: ' ~ messages[0].role) }}{% endif %}"
    )
    variables = {
        "messages": [{"role": "a", "content": "é<"}, {"role": "b", "content": ""}],
        "bos_token": "<s>",
    }
    assert _render(template, dict(template.globals), {**variables, "bad": False}) == template.render(
        **variables, bad=False
    )
    with pytest.raises(Exception, match="bad role: a") as upstream:
        template.render(**variables, bad=True)
    with pytest.raises(type(upstream.value), match="bad role: a"):
        _render(template, dict(template.globals), {**variables, "bad": True})


def test_a_tokenizer_that_cannot_be_loaded_is_named_with_the_option_that_sets_it():
    """Offline (as every test runs), a hub name that is not a local folder cannot load: the error
    names the tokenizer and `--env.tokenizer_name`, in one line."""
    from environments.atropos_runtime.lazy_imports import TokenizerUnavailable, load_tokenizer

    with pytest.raises(TokenizerUnavailable) as exc:
        load_tokenizer("no-such-org/no-such-tokenizer")
    message = str(exc.value)
    assert "'no-such-org/no-such-tokenizer'" in message and "--env.tokenizer_name" in message
    assert "\n" not in message and isinstance(exc.value, OSError)  # callers that catch OSError still do
