#!/usr/bin/env bash
# PostgreSQL and Redis are started before the session on this machine kind; start them with the
# machine's own commands if they are installed but stopped (they never listen beyond 127.0.0.1).
set -uo pipefail
if ! pg_isready -h 127.0.0.1 -p 5432 -q 2>/dev/null; then
  if command -v pg_ctlcluster >/dev/null; then
    pg_ctlcluster --skip-systemctl-redirect "$(ls /etc/postgresql | head -1)" main start || true
  fi
fi
if ! (exec 3<>/dev/tcp/127.0.0.1/6379) 2>/dev/null; then
  if command -v redis-server >/dev/null; then
    redis-server --daemonize yes --bind 127.0.0.1 -::1 --port 6379 --save "" --appendonly no \
      --dir /tmp --logfile /tmp/future-ts-redis.log || true
  fi
fi
for _ in $(seq 1 50); do
  pg_isready -h 127.0.0.1 -p 5432 -q 2>/dev/null && (exec 3<>/dev/tcp/127.0.0.1/6379) 2>/dev/null && exit 0
  sleep 0.2
done
echo "PostgreSQL (127.0.0.1:5432) and Redis (127.0.0.1:6379) must be running" >&2
exit 1
