#!/usr/bin/env bash
# Idempotent host set-up for the sandbox tests: bubblewrap + Docker engine, dockerd running, and the
# local sandbox image built WITHOUT any registry by `python -m sandbox build-image` (empty rootfs; host
# /usr is bind-mounted read-only at run time). Python: $RLVR_PYTHON, else .venv/bin/python, else
# python3 (it needs the docker SDK). Safe to run repeatedly; every wait is bounded. Installing and
# starting need root; a non-root user gets one line naming what is missing (README: what they need).
set -euo pipefail

IMAGE="${RLVR_SANDBOX_IMAGE:-rlvr-sandbox:local}"
DOCKERD_WAIT_S="${DOCKERD_WAIT_S:-60}"
DOCKER="$(command -v /usr/bin/docker || command -v docker || true)"

root=0
[[ "$(id -u)" == 0 ]] && root=1
need_pkgs=()
command -v bwrap >/dev/null || need_pkgs+=(bubblewrap)
[[ -n "$DOCKER" ]] || need_pkgs+=(docker.io)
if ((${#need_pkgs[@]})); then
  if ((!root)); then
    echo "missing: ${need_pkgs[*]}; as root: apt-get install -y ${need_pkgs[*]}" >&2
    exit 1
  fi
  apt-get update -q
  DEBIAN_FRONTEND=noninteractive apt-get install -y -q "${need_pkgs[@]}"
  DOCKER="$(command -v /usr/bin/docker || command -v docker)"
fi

# bubblewrap needs unprivileged user namespaces
if ((root)) && [[ -f /proc/sys/kernel/unprivileged_userns_clone ]]; then
  echo 1 > /proc/sys/kernel/unprivileged_userns_clone || true
fi

if ! "$DOCKER" info >/dev/null 2>&1; then
  if ((!root)); then
    echo "Docker is not usable by $(id -un): as root, start dockerd and run 'usermod -aG docker $(id -un)' (then log in again)" >&2
    exit 1
  fi
  mkdir -p /var/log
  nohup dockerd >/var/log/dockerd.log 2>&1 &
  for ((i = 0; i < DOCKERD_WAIT_S; i++)); do
    "$DOCKER" info >/dev/null 2>&1 && break
    sleep 1
  done
  "$DOCKER" info >/dev/null 2>&1 || { echo "dockerd did not answer within ${DOCKERD_WAIT_S}s" >&2; tail -20 /var/log/dockerd.log >&2; exit 1; }
fi

# the image comes from the package itself (`sandbox.image`, offline): the same command a pip user runs
repo="$(cd "$(dirname "$0")/.." && pwd)"
PY=python3
for cand in "${RLVR_PYTHON:-}" "$repo/.venv/bin/python"; do
  if [[ -n "$cand" && -x "$cand" ]]; then PY="$cand"; break; fi
done
PYTHONPATH="$repo${PYTHONPATH:+:$PYTHONPATH}" "$PY" -m sandbox build-image --tag "$IMAGE" >/dev/null ||
  { echo "could not build $IMAGE with $PY (it needs the docker SDK: make setup first)" >&2; exit 1; }

echo "bwrap: $(bwrap --version)"
echo "docker: $("$DOCKER" version --format '{{.Server.Version}}') image: $IMAGE"
