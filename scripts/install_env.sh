#!/usr/bin/env bash
# Install one rlvr-envs environment as its Verifiers / Prime-hub package with `prime env install`, into a
# venv of your choice, and check that it imports (prime exits 0 even when its install failed).
#   scripts/install_env.sh ENV [VENV]     ENV: math | math-python | code | code-repair | judge | qa; VENV default .venv
#   VERIFIERS='verifiers>=0.1.9.post2,<0.4' scripts/install_env.sh math /path/venv   # classic API
#   VERIFIERS='verifiers>=0.3.1,<0.5' ...                                            # v1 API
# Without VERIFIERS the venv keeps the verifiers it has, else uv picks the newest (0.4.x: v1 only).
# Steps: the venv (created with python3.11 when missing) -> uv and prime (scripts/prime_tools.sh) ->
# this checkout's rlvr-envs wheel (rlvr-envs is on no package index yet, so uv is given it through
# UV_FIND_LINKS) -> `prime env install rlvr-<env>` from the repository root -> import check.
# Needs a package index for the dependencies (PyPI; the build backends setuptools and hatchling too).
set -euo pipefail
ENV=${1:?usage: scripts/install_env.sh ENV [VENV]}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
VENV=$(realpath -m "${2:-$ROOT/.venv}")
PY=${PYTHON:-python3.11}
command -v "$PY" >/dev/null || PY=python3
ID=rlvr-${ENV//_/-}
MOD=rlvr_${ENV//-/_}
if [ ! -f "$ROOT/environments/$MOD/pyproject.toml" ]; then
  echo "install_env.sh: no environment '$ENV' (have: $(cd "$ROOT/environments" && ls -d rlvr_*/ | sed 's/rlvr_//; s#/##; s/_/-/g' | tr '\n' ' '))" >&2
  exit 2
fi
[ -x "$VENV/bin/python" ] || "$PY" -m venv "$VENV"
bash "$ROOT/scripts/prime_tools.sh" "$VENV"
"$VENV/bin/python" -m pip install -q --disable-pip-version-check build
DIST=$(mktemp -d)
trap 'rm -rf "$DIST"' EXIT
"$VENV/bin/python" -m build -q --wheel --outdir "$DIST" "$ROOT" >/dev/null
export PATH="$VENV/bin:$PATH" VIRTUAL_ENV="$VENV" UV_FIND_LINKS="$DIST" PRIME_DISABLE_VERSION_CHECK=1
uv cache clean -q rlvr-envs  # the wheel's name does not change with the code: use this build, not a cached one
if [ -n "${VERIFIERS:-}" ]; then uv pip install -q --python "$VENV/bin/python" "$VERIFIERS"; fi
# uv keeps an installed rlvr-envs of the same version (an earlier build): replace it with this one, unless it
# is an editable install (the project's .venv follows the checkout already)
if "$VENV/bin/python" -c '
import importlib.metadata as md, json, sys
try:
    d = md.distribution("rlvr-envs")
except md.PackageNotFoundError:
    sys.exit(1)
sys.exit(1 if json.loads(d.read_text("direct_url.json") or "{}").get("dir_info", {}).get("editable") else 0)'; then
  uv pip install -q --python "$VENV/bin/python" --reinstall-package rlvr-envs "$DIST"/rlvr_envs-*.whl
fi
(cd "$ROOT" && prime env install "$ID" --plain)  # prime finds environments/<name> from the current directory
# prime's exit code says nothing: import the package from a neutral directory (not this checkout)
(cd / && "$VENV/bin/python" -c "
import $MOD, importlib.metadata as md
from environments.vf_bridge import compat
print('$ID', md.version('$ID'), 'exports', ', '.join($MOD.__all__), '| verifiers', md.version('verifiers'), '(' + compat.detect().kind + ')')
") || { echo "install_env.sh: $ID did not install into $VENV (prime exits 0 even then; its output is above)" >&2; exit 1; }
