#!/usr/bin/env bash
# The main job: install, then bring up a lab of real OpenStack (examples/openstack.yaml: real
# keystone, placement and glance on a real Galera cluster behind HAProxy), plan, run a minor
# update and a major upgrade through Ansible while a real OpenStack client and the HTTP probe
# measure availability, check the schemas and the data kept, run tempest, and tear it down.
# `stepwise demo -d examples/classic.yaml` runs the same story on the stand-in classic cloud.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
exec .venv/bin/stepwise demo "$@"
