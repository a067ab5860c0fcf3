#!/usr/bin/env bash
# The test command: install what the tests need, then run the whole suite.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
set +e
.venv/bin/python -m pytest -q -p no:cacheprovider "$@"
rc=$?
set -e
if [ "$rc" -eq 5 ]; then
  echo "test: pytest collected no tests - that is a failure" >&2
  exit 1
fi
exit "$rc"
