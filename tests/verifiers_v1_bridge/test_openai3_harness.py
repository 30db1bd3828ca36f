"""verifiers 0.3.1's v1 harness programs resolve their own uv environment; where the index offers
openai 3.x (PyPI does), that environment took it and every rollout failed (`'AsyncHttpxClientWrapper'
object has no attribute '_state'`). The bridge (and our v1 front door) pin `openai<3` inside the
harness's PEP 723 script (`environments/vf_bridge/v1_uv_pin.py`). Here the matrix's 0.3.1 venv runs
offline against its harness index plus a find-links folder holding openai 3.x: uv would take 3.x for
the stock script, takes 2.x for the pinned one, and the bridge's `process` scores every rollout."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from environments.vf_bridge.v1_uv_pin import constrain_script, needs_pin
from tests.runtime.scripted_policy import ScriptedPolicy
from tests.verifiers_v1_bridge.policies import SumPolicy, mismatches, sum_reward
from tests.verifiers_v1_bridge.test_v1_bridge import ROOT, groups_of, run_bridge, tiny, tok, venv_for  # noqa: F401

LINKS = ROOT / ".cache" / "verifiers-matrix" / "openai3-links"
STOCK = '# /// script\n# requires-python = ">=3.11"\n# dependencies = ["openai", "httpx"]\n# ///\nprint(1)\n'


def test_the_pin_goes_into_the_script_block_only_where_openai_is_unbounded():
    pinned = constrain_script(STOCK)
    assert pinned.startswith(
        STOCK.split("# ///\nprint")[0] + '#\n# [tool.uv]\n# constraint-dependencies = ["openai<3"]\n# ///\n'
    )
    assert constrain_script(STOCK.encode()) == pinned.encode()
    for same in (STOCK.replace('"openai"', '"openai<3"'), STOCK.replace('"openai", ', ""), "print(1)\n",
                 STOCK.replace("# ///\nprint", "#\n# [tool.uv]\n# exclude-newer = \"2026-01-01\"\n# ///\nprint")):  # fmt: skip
        assert constrain_script(same) == same
    assert [needs_pin(v) for v in ("0.3.1", "0.3.2.post1", "0.4.0", "0.1.9.post3", None)] == [
        True,
        True,
        False,
        False,
        False,
    ]


@pytest.fixture(scope="module")
def openai3_env() -> tuple[Path, dict[str, str]]:
    """The 0.3.1 venv and its offline env, with openai 3.x offered next to the harness index."""
    venv, env = venv_for("0.3.1")
    if not (LINKS / ".complete").exists():
        shutil.rmtree(LINKS, ignore_errors=True)
        subprocess.run([sys.executable, "-m", "pip", "download", "-q", "-d", str(LINKS), "openai>=3,<4"],
                       check=True, timeout=600)  # fmt: skip
        (LINKS / ".complete").write_text("")
    return venv, dict(env, UV_FIND_LINKS=str(LINKS))


@pytest.mark.slow
def test_uv_would_take_openai_3_for_the_stock_harness_script_and_2_for_the_pinned_one(openai3_env, tmp_path):
    venv, env = openai3_env
    source = subprocess.run([str(venv / "bin" / "python"), "-c", "import verifiers.v1.harnesses.null.harness as h; "
                             "print(h.PROGRAM_SOURCE)"], capture_output=True, text=True, check=True, env=env,
                            timeout=120).stdout  # fmt: skip
    uv = shutil.which("uv", path=env["PATH"])
    versions = {}
    for name, script in (("stock", source), ("pinned", constrain_script(source))):
        path = tmp_path / f"{name}.py"
        path.write_text(script.split('"""', 1)[0] + "import openai\nprint(openai.__version__)\n")
        subprocess.run(
            [uv, "sync", "--script", str(path), "-q", "--no-config"], check=True, env=env, timeout=300
        )
        python = subprocess.run([uv, "python", "find", "--script", str(path), "--no-config"], env=env,
                                capture_output=True, text=True, check=True, timeout=60).stdout.strip()  # fmt: skip
        versions[name] = subprocess.run(
            [python, str(path)], capture_output=True, text=True, check=True
        ).stdout
    assert versions["stock"].startswith("3.") and versions["pinned"].startswith("2."), versions


@pytest.mark.slow
def test_process_on_0_3_1_scores_every_rollout_with_openai_3_on_the_index(openai3_env, tiny, tok, tmp_path):  # noqa: F811
    out = tmp_path / "groups.jsonl"
    with ScriptedPolicy(tok, SumPolicy(), latency_s=(0.0, 0.05), seed=3) as policy:
        run_bridge(openai3_env, "process", "vfv1_sum", policy, tiny, "--env.group_size", "2", "--env.total_steps",
                   "2", "--env.data_path_to_save_groups", str(out))  # fmt: skip
    groups = groups_of(out)
    assert len(groups) == 2 and all(g["tokens_exact"] for g in groups)
    for g in groups:
        assert mismatches(tok, g, sum_reward) == [] and sorted(g["scores"]) == [0.0, 1.0]
    summary = json.loads(out.with_suffix(".summary.json").read_text())
    assert summary["reward_status"] == {"ok": 4} and summary["dropped"] == {}
