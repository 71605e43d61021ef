#!/usr/bin/env bash
# The whole test run, as CI runs it: install what is missing, start the local servers
# (OCI registry, SeaweedFS S3), build the model images, then lint, type-check, check migrations
# and run pytest against the real PostgreSQL, Redis, S3, registry and podman.
#
# PostgreSQL (127.0.0.1:5432, trust auth) and Redis (127.0.0.1:6379) must be running; the script
# starts them with the machine's own commands when they are installed but stopped.
set -euo pipefail
cd "$(dirname "$0")/.."
REPO=$PWD

bash .ci/setup.sh
bash .ci/ensure-db.sh
bash .ci/services.sh start
# shellcheck disable=SC1091
. .ci/state/env.sh
bash images/build.sh >/dev/null
export PATH=$REPO/.venv/bin:$PATH

echo "== ruff" && ruff check app workers tests bench scripts
echo "== mypy --strict" && mypy
echo "== alembic check (SQLite)"
tmp=$(mktemp -d)
FUTURE_TS_DATA_DIR=$tmp FUTURE_TS_DATABASE_URL= alembic upgrade head >/dev/null
FUTURE_TS_DATA_DIR=$tmp FUTURE_TS_DATABASE_URL= alembic check
rm -rf "$tmp"
echo "== pytest"
exec pytest -q -p no:cacheprovider "$@"
