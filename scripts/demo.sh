#!/usr/bin/env bash
# The main job: install, then bring up the classic lab cloud, plan, run a minor update and a
# major upgrade through Ansible while the probe measures availability, and tear it down.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
exec .venv/bin/stepwise demo "$@"
