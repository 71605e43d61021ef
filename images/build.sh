#!/usr/bin/env bash
# Build the FUTURE-TS model images (baselines and hostile test images) without pulling anything
# from a registry, and push them to the local registry.
#
#   images/build.sh [--no-push] [name ...]      (default: every image in images/images.json)
#
# Recipe (docs: ../shared/reference/machine-notes.md section 2b): one base layer made of
# busybox-static plus the host's Debian /usr/bin/python3.11 and its stdlib, built once and cached
# in $STATE/images; then one small layer per kind (app/baselines -> /app/baselines,
# images/hostile -> /app/hostile) and one config per image (entrypoint, user 65534:65534).
# Layers and configs are reproducible (fixed mtimes and creation time), so a rebuild with no
# source change pushes nothing new and keeps every digest.
#
# Environment: FUTURE_TS_STATE_DIR (default $REPO/.ci/state), FUTURE_TS_IMAGE_REGISTRY
# (default 127.0.0.1:5000). Writes $STATE/images/pushed.json: name -> reference, digest, size.
set -euo pipefail

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
STATE=${FUTURE_TS_STATE_DIR:-$REPO/.ci/state}
REGISTRY=${FUTURE_TS_IMAGE_REGISTRY:-127.0.0.1:5000}
MANIFEST=$REPO/images/images.json
WORK=$STATE/images
LAYOUT=$WORK/oci
PY=/usr/bin/python3.11
BUSYBOX=/bin/busybox
CREATED=1970-01-01T00:00:00Z
BASE_RECIPE=5 # bump when the base recipe below changes
ROOTLESS=()
[ "$(id -u)" = 0 ] || ROOTLESS=(--rootless)

say() { printf '[images] %s\n' "$*" >&2; }
die() { say "error: $*"; exit 1; }

PUSH=1
NAMES=()
for arg in "$@"; do
  case $arg in
    --no-push) PUSH=0 ;;
    -h | --help) sed -n '2,17p' "$0"; exit 0 ;;
    -*) die "unknown option $arg" ;;
    *) NAMES+=("$arg") ;;
  esac
done

ensure_tools() {
  local missing=()
  command -v jq >/dev/null || missing+=(jq)
  command -v umoci >/dev/null || missing+=(umoci)
  command -v skopeo >/dev/null || missing+=(skopeo)
  [ -x "$PY" ] || missing+=(python3.11)
  # ldd succeeds only on a dynamic executable: the rootfs needs busybox-static's binary.
  if [ ! -x "$BUSYBOX" ] || ldd "$BUSYBOX" >/dev/null 2>&1; then missing+=(busybox-static); fi
  [ ${#missing[@]} = 0 ] && return 0
  [ "$(id -u)" = 0 ] || die "missing packages (${missing[*]}); run .ci/setup.sh as root"
  say "installing ${missing[*]}"
  DEBIAN_FRONTEND=noninteractive apt-get install -y -q "${missing[@]}" >/dev/null ||
    { apt-get update -q >/dev/null && DEBIAN_FRONTEND=noninteractive apt-get install -y -q "${missing[@]}" >/dev/null; }
}

base_key() {
  {
    echo "recipe=$BASE_RECIPE"
    sha256sum "$PY" "$BUSYBOX"
    dpkg-query -W -f='${Package}=${Version}\n' libpython3.11-stdlib libpython3.11-minimal 2>/dev/null || true
  } | sha256sum | cut -c1-16
}

# The tiny rootfs: static busybox, python3.11 with its shared libraries and stdlib, passwd/group
# with nobody (65534), and mode-1777 /tmp and /var/tmp (podman's tmpfs takes the image's mode).
build_rootfs() {
  local r=$1 lib lib_dir=/lib/x86_64-linux-gnu
  rm -rf "$r"
  mkdir -p "$r"/{bin,usr/bin,usr/lib,lib64,etc,tmp,var/tmp,run,proc,sys,dev,app,artifact,retrieval} "$r$lib_dir"
  cp "$BUSYBOX" "$r/bin/busybox"
  for a in sh ls cat echo sleep true env ps id head; do ln -sf busybox "$r/bin/$a"; done
  cp "$PY" "$r/usr/bin/python3.11"
  ln -sf python3.11 "$r/usr/bin/python3"
  cp -a /usr/lib/python3.11 "$r/usr/lib/"
  local stdlib=$r/usr/lib/python3.11
  rm -rf "$stdlib"/{test,idlelib,tkinter,ensurepip,lib2to3,pydoc_data,turtledemo,distutils,venv} \
    "$stdlib"/{config-3.11-x86_64-linux-gnu,site-packages,dist-packages,sitecustomize.py} \
    "$stdlib"/lib-dynload/{_test,_ctypes_test,_xxtestfuzz,xxlimited}*
  # Every shared library python or one of its extension modules needs, resolved on this host.
  for lib in $( { ldd "$PY"; for so in "$stdlib"/lib-dynload/*.so; do ldd "$so"; done; } |
    awk '/=> \//{print $3}' | sort -u); do
    cp -L "$lib" "$r$lib_dir/"
  done
  cp -L /lib64/ld-linux-x86-64.so.2 "$r/lib64/"
  printf 'root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/nonexistent:/bin/sh\n' >"$r/etc/passwd"
  printf 'root:x:0:\nnogroup:x:65534:\n' >"$r/etc/group"
  chmod 1777 "$r/tmp" "$r/var/tmp"
  # Reproducible layer: every mtime fixed, except the stdlib's .py files, which keep their Debian
  # package mtimes because the Debian .pyc files are validated against them.
  find "$r" ! -name '*.py' -exec touch -h -d @0 {} +
  if [ "$(id -u)" = 0 ]; then
    chroot "$r" /usr/bin/python3 -c 'import json, socket, statistics, hashlib, random, struct' ||
      die "the python copied into $r does not start"
  fi
}

BASE_REBUILT=0
ensure_base() {
  BASE_TAG=base-$(base_key)
  # (not `umoci ls | grep -q`: with pipefail, grep's early exit makes umoci's SIGPIPE a failure)
  if [[ $'\n'$(umoci ls --layout "$LAYOUT" 2>/dev/null)$'\n' == *$'\n'$BASE_TAG$'\n'* ]]; then
    say "base layer cached ($BASE_TAG)"
    return 0
  fi
  say "building the base layer ($BASE_TAG)"
  BASE_REBUILT=1
  local rootfs=$WORK/rootfs-$BASE_TAG
  build_rootfs "$rootfs"
  [ -d "$LAYOUT" ] || umoci init --layout "$LAYOUT"
  local old
  for old in $(umoci ls --layout "$LAYOUT" | grep '^base-' || true); do umoci rm --image "$LAYOUT:$old"; done
  umoci new --image "$LAYOUT:$BASE_TAG"
  umoci insert "${ROOTLESS[@]}" --image "$LAYOUT:$BASE_TAG" --history.created "$CREATED" \
    --history.created_by "images/build.sh: busybox-static + host python3.11 rootfs" "$rootfs" /
  umoci config --no-history --image "$LAYOUT:$BASE_TAG" --created "$CREATED" \
    --architecture amd64 --os linux --config.user 65534:65534 --config.workingdir /app \
    --config.env PATH=/usr/bin:/bin --config.env PYTHONDONTWRITEBYTECODE=1 \
    --config.env PYTHONIOENCODING=utf-8 --config.env LANG=C.UTF-8
  find "$WORK" -maxdepth 1 -name 'rootfs-base-*' ! -name "rootfs-$BASE_TAG" -exec rm -rf {} +
  rm -rf "$rootfs" # the layer in the layout is the cache; the directory is not needed any more
}

# stage_layer KIND DEST FILES...: copy the files into a staging dir with fixed owners, modes
# and mtimes, so the tar layer umoci makes is byte-for-byte the same on every build.
stage_layer() {
  local kind=$1 dest=$2 dir=$WORK/stage/$1
  shift 2
  rm -rf "$dir"
  mkdir -p "$dir/$dest"
  cp "$@" "$dir/$dest/"
  chmod -R u=rwX,go=rX "$dir"
  find "$dir" -exec touch -h -d "@0" {} +
  umoci rm --image "$LAYOUT:layer-$kind" 2>/dev/null || true
  umoci tag --image "$LAYOUT:$BASE_TAG" "layer-$kind"
  umoci insert "${ROOTLESS[@]}" --image "$LAYOUT:layer-$kind" --history.created "$CREATED" \
    --history.created_by "images/build.sh: /app/$dest" "$dir/$dest" "/app/$dest"
}

configure_image() {
  local name=$1 layer command=() arg args=()
  layer=$(jq -r --arg n "$name" '.images[$n].layer' "$MANIFEST")
  mapfile -t command < <(jq -r --arg n "$name" '.images[$n].command[]' "$MANIFEST")
  for arg in "${command[@]}"; do args+=(--config.entrypoint "$arg"); done
  umoci rm --image "$LAYOUT:$name" 2>/dev/null || true
  umoci config --no-history --image "$LAYOUT:layer-$layer" --tag "$name" --created "$CREATED" \
    "${args[@]}" --config.label "org.opencontainers.image.title=$NAMESPACE/$name" \
    --config.label "org.opencontainers.image.description=$(jq -r --arg n "$name" '.images[$n].purpose' "$MANIFEST")"
}

# size of an image as pushed: config plus compressed layers, from the layout's manifest.
image_size() {
  local digest=$1 manifest
  manifest=$LAYOUT/blobs/sha256/${digest#sha256:}
  jq '[.config.size] + [.layers[].size] | add' "$manifest"
}

layout_digest() {
  jq -r --arg n "$1" \
    '.manifests[] | select(.annotations["org.opencontainers.image.ref.name"] == $n) | .digest' \
    "$LAYOUT/index.json"
}

registry_digest() {
  curl -sfI -H "Accept: application/vnd.oci.image.manifest.v1+json" \
    "http://$REGISTRY/v2/$NAMESPACE/$1/manifests/latest" |
    tr -d '\r' | awk -F': ' 'tolower($1) == "docker-content-digest" {print $2}'
}

# push_image NAME: copy to the registry unless the tag already points at the same manifest.
push_image() {
  local name=$1 ref=$REGISTRY/$NAMESPACE/$1:latest digest
  digest=$(layout_digest "$name")
  if [ "$(registry_digest "$name")" != "$digest" ]; then
    skopeo copy -q --dest-tls-verify=false "oci:$LAYOUT:$name" "docker://$ref" >/dev/null
    [ "$(registry_digest "$name")" = "$digest" ] || die "$ref does not have digest $digest after the push"
  fi
  printf '%s\t%s\t%s\n' "$name" "$ref" "$digest" >"$WORK/pushed/$name"
}

main() {
  ensure_tools
  mkdir -p "$WORK"
  exec 9>"$WORK/.lock"
  flock 9 # one build at a time: umoci does not lock the layout
  NAMESPACE=$(jq -r .namespace "$MANIFEST")
  [ ${#NAMES[@]} -gt 0 ] || mapfile -t NAMES < <(jq -r '.images | keys_unsorted[]' "$MANIFEST")
  local t0=$SECONDS name ref digest
  for name in "${NAMES[@]}"; do
    jq -e --arg n "$name" '.images[$n]' "$MANIFEST" >/dev/null || die "no image called $name"
  done
  if [ $PUSH = 1 ] && ! curl -sf -o /dev/null "http://$REGISTRY/v2/"; then
    die "no registry answers at $REGISTRY; run .ci/services.sh start (or pass --no-push)"
  fi

  ensure_base
  stage_layer baselines baselines "$REPO"/app/baselines/*.py
  stage_layer hostile hostile "$REPO"/images/hostile/*.py
  for name in "${NAMES[@]}"; do configure_image "$name"; done
  # gc re-reads every blob (about 3 s): run it after a base rebuild (the old base is 18 MB) or
  # once old small layers pile up.
  if [ "$BASE_REBUILT" = 1 ] || [ "$(find "$LAYOUT/blobs/sha256" -type f | wc -l)" -gt 200 ]; then
    umoci gc --layout "$LAYOUT"
  fi
  say "layout ready in $((SECONDS - t0)) s"

  [ $PUSH = 1 ] || return 0
  rm -rf "$WORK/pushed" && mkdir -p "$WORK/pushed"
  export -f push_image layout_digest registry_digest say die
  export LAYOUT REGISTRY NAMESPACE WORK
  printf '%s\n' "${NAMES[@]}" | xargs -P 4 -I{} bash -c 'push_image "$1"' _ {}
  local old='{}'
  [ -f "$WORK/pushed.json" ] && old=$(cat "$WORK/pushed.json")
  while IFS=$'\t' read -r name ref digest; do
    jq -n --arg n "$name" --arg r "$ref" --arg d "$digest" --arg p "${ref%:latest}@$digest" \
      --argjson s "$(image_size "$digest")" '{($n): {reference: $r, digest: $d, pinned: $p, size: $s}}'
  done < <(cat "$WORK"/pushed/*) | jq -s --argjson old "$old" '$old + add' >"$WORK/pushed.json.tmp"
  mv "$WORK/pushed.json.tmp" "$WORK/pushed.json"
  jq -r 'to_entries[] | "\(.value.pinned)\t\(.value.size / 1048576 * 10 | round / 10) MB"' "$WORK/pushed.json"
  say "built and pushed ${#NAMES[@]} image(s) in $((SECONDS - t0)) s; digests in $WORK/pushed.json"
}

main
