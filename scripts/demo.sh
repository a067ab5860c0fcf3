#!/usr/bin/env bash
# The main job: install, then bring up a lab of real OpenStack (examples/openstack-nova.yaml: a
# controller running real keystone, placement, glance, neutron-server and nova's API, conductor
# and scheduler on real Galera, RabbitMQ and memcached behind HAProxy, and two computes running
# real nova-compute with four servers), plan, run a minor update and a major upgrade through
# Ansible while a real OpenStack client (servers built and deleted too) and the HTTP probe
# measure availability, check the schemas, the data and the servers kept, run tempest, and tear
# it down. One controller cannot keep its APIs up while it is visited: its plans announce those
# windows, which the demo accepts (--accept-downtime) and judges the client's calls by.
# `stepwise demo` alone runs the same story on examples/openstack.yaml (three controllers of
# keystone, placement and glance: no window), `-d examples/classic.yaml` on the stand-in cloud.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
exec .venv/bin/stepwise demo -d examples/openstack-nova.yaml --accept-downtime "$@"
