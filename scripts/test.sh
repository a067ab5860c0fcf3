#!/usr/bin/env bash
# The test command: install what the tests need, start a throwaway PostgreSQL for the team
# state store tests, then run the whole suite.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh

pg_bin=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n 1 || true)
pg_dir=""
cleanup() {
  if [ -n "$pg_dir" ]; then
    $as_pg "$pg_bin/pg_ctl" -D "$pg_dir/data" -m immediate stop >/dev/null 2>&1 || true
    rm -rf "$pg_dir"
  fi
}
trap cleanup EXIT
if [ -z "${STEPWISE_TEST_PG_URL:-}" ] && [ -n "$pg_bin" ]; then
  pg_dir=$(mktemp -d /tmp/stepwise-pg.XXXXXX)
  as_pg=""
  if [ "$(id -u)" -eq 0 ]; then chown postgres "$pg_dir"; as_pg="runuser -u postgres --"; fi
  $as_pg "$pg_bin/initdb" -D "$pg_dir/data" -A trust -U stepwise >/dev/null
  # a random port may be taken (a lab, another server): try a few before giving up
  for attempt in 1 2 3 4 5; do
    port=$(( 40000 + RANDOM % 20000 ))
    if $as_pg "$pg_bin/pg_ctl" -D "$pg_dir/data" -l "$pg_dir/log" -w \
        -o "-p $port -k $pg_dir -c listen_addresses=127.0.0.1" start >/dev/null; then
      break
    fi
    if [ "$attempt" -eq 5 ]; then tail -n 20 "$pg_dir/log" >&2; exit 1; fi
  done
  export STEPWISE_TEST_PG_URL="postgresql+psycopg://stepwise@127.0.0.1:$port/postgres"
  echo "test: PostgreSQL for the store tests on 127.0.0.1:$port"
fi

# the linter first: a second or two, and a style slip fails CI the way a test does
.venv/bin/ruff check .
.venv/bin/ruff format --check . >/dev/null || { .venv/bin/ruff format --check . >&2; exit 1; }

set +e
# two workers: the lab scenarios wait on services more than they compute, so two of them
# share the machine's two cores (each worker takes whole files, the longest scenarios first,
# at most one heavy lab at a time: tests/conftest.py, which also prints the seconds per file
# and per worker at the end); the slowest tests are listed so CI time stays visible (the
# budget is 60 minutes). The two scenarios marked slow (the containerized cloud through the
# seed's whole OS upgrade, and its update and upgrade: heavy labs of ~5 minutes each alone,
# run one heavy lab at a time) are left to STEPWISE_TEST_SLOW=1 to keep CI's hour safe
slow=(-m "not slow")
if [ "${STEPWISE_TEST_SLOW:-0}" = "1" ]; then slow=(); fi
.venv/bin/python -m pytest -q -rfEx -p no:cacheprovider --durations=25 \
  -n "${STEPWISE_TEST_WORKERS:-2}" --dist loadfile --no-loadscope-reorder "${slow[@]}" "$@"
rc=$?
set -e
if [ "$rc" -eq 5 ]; then
  echo "test: pytest collected no tests - that is a failure" >&2
  exit 1
fi
exit "$rc"
