#!/usr/bin/env bash
# Idempotent host set-up for the sandbox tests (run as root): bubblewrap + Docker engine, dockerd running,
# and a local sandbox image built WITHOUT any registry (empty rootfs; host /usr is bind-mounted read-only
# at run time). Safe to run repeatedly; every wait is bounded.
set -euo pipefail

IMAGE="${RLVR_SANDBOX_IMAGE:-rlvr-sandbox:local}"
DOCKERD_WAIT_S="${DOCKERD_WAIT_S:-60}"
DOCKER="$(command -v /usr/bin/docker || command -v docker || true)"

need_pkgs=()
command -v bwrap >/dev/null || need_pkgs+=(bubblewrap)
command -v dockerd >/dev/null || need_pkgs+=(docker.io)
if ((${#need_pkgs[@]})); then
  apt-get update -q
  DEBIAN_FRONTEND=noninteractive apt-get install -y -q "${need_pkgs[@]}"
  DOCKER="$(command -v /usr/bin/docker || command -v docker)"
fi

# bubblewrap needs unprivileged user namespaces
if [[ -f /proc/sys/kernel/unprivileged_userns_clone ]]; then
  echo 1 > /proc/sys/kernel/unprivileged_userns_clone || true
fi

if ! "$DOCKER" info >/dev/null 2>&1; then
  mkdir -p /var/log
  nohup dockerd >/var/log/dockerd.log 2>&1 &
  for ((i = 0; i < DOCKERD_WAIT_S; i++)); do
    "$DOCKER" info >/dev/null 2>&1 && break
    sleep 1
  done
  "$DOCKER" info >/dev/null 2>&1 || { echo "dockerd did not answer within ${DOCKERD_WAIT_S}s" >&2; tail -20 /var/log/dockerd.log >&2; exit 1; }
fi

if ! "$DOCKER" image inspect "$IMAGE" >/dev/null 2>&1; then
  root="$(mktemp -d)"
  trap 'rm -rf "$root"' EXIT
  mkdir -p "$root"/{usr,tmp,proc,dev,sys,etc,run/rlvr}
  chmod 1777 "$root/tmp"  # docker copies the image dir's mode onto the tmpfs mounted there
  for l in bin sbin lib lib32 lib64 libx32; do
    [[ -L /$l ]] && ln -s "$(readlink /$l)" "$root/$l"
  done
  echo "sandbox:x:65534:65534:sandbox:/tmp:/usr/sbin/nologin" > "$root/etc/passwd"
  echo "sandbox:x:65534:" > "$root/etc/group"
  tar -C "$root" -c . | "$DOCKER" import -c 'USER 65534:65534' - "$IMAGE" >/dev/null  # no WORKDIR: it resets a tmpfs /tmp to 0755 root
fi

echo "bwrap: $(bwrap --version)"
echo "docker: $("$DOCKER" version --format '{{.Server.Version}}') image: $IMAGE"
