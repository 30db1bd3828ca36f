#!/usr/bin/env bash
# Put `uv` and `prime` (the Prime Environments Hub CLI, which calls uv) into a venv's bin/:
#   scripts/prime_tools.sh VENV
# uv goes into the venv; prime into its own venv VENV/opt/prime (its pins, e.g. typer<0.26, would move the
# project's), linked as VENV/bin/prime. Same versions as the verifiers matrix (scripts/verifiers_matrix.py
# TOOLS). Idempotent. prime needs `uv` on PATH: activate the venv, or PATH="VENV/bin:$PATH".
set -euo pipefail
VENV=${1:?usage: scripts/prime_tools.sh VENV}
PRIME=prime==0.18.0
UV=uv==0.13.9
export PIP_DISABLE_PIP_VERSION_CHECK=1
"$VENV/bin/python" -m pip install -q "$UV"
if ! "$VENV/opt/prime/bin/python" -m pip show -q prime 2>/dev/null; then
  "$VENV/bin/python" -m venv --clear "$VENV/opt/prime"
  "$VENV/opt/prime/bin/python" -m pip install -q "$PRIME"
fi
ln -sf ../opt/prime/bin/prime "$VENV/bin/prime"
