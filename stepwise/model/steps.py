"""The fixed step structure of a node visit: where a service author's task lands.

A node is visited in this order; a service contributes tasks to the steps it names in its
`update:` / `upgrade:` sections. `pre` is shorthand for the start of `stop` and `post` for
the end of `start` (the DESIGN contract's names).

  validate  checks that change nothing (disk space, repos reachable, cluster healthy)
  leave     take the node out of its clusters and load balancers (pcs standby, drain
            haproxy backend, ceph osd noout, live-migrate workloads away)
  stop      stop the services whose packages change (pre tasks run here first)
  packages  update the packages of the services that change
  config    re-apply the configuration for the new version (before any start)
  reboot    only when a kernel/system package changed: reboot the node
  migrate   schema migration (DB sync); run once per service, on its bootstrap node
  start     start the services again (post tasks run here last)
  rejoin    rejoin clusters and load balancers (unstandby, unset noout, enable)
  verify    health checks; they gate the next batch
"""

from __future__ import annotations

from stepwise.model.vocab import (
    NODE_STEPS,
    STEP_ALIASES,
    SYSTEM_UPGRADE_KEYS,
    UPGRADE_EXTRA_KEYS,
    Section,
)

#: Deployment-wide operations a service may add tasks to in the `upgrade:` section.
UPGRADE_EXTRA_STEPS: tuple[str, ...] = UPGRADE_EXTRA_KEYS

#: Keys of the `system_upgrade:` section, in the order of the OS-upgrade workflow.
SYSTEM_UPGRADE_STEPS: tuple[str, ...] = SYSTEM_UPGRADE_KEYS

WORKFLOW_SECTIONS: tuple[str, ...] = (Section.UPDATE, Section.UPGRADE)

__all__ = [
    "NODE_STEPS",
    "STEP_ALIASES",
    "UPGRADE_EXTRA_STEPS",
    "SYSTEM_UPGRADE_STEPS",
    "WORKFLOW_SECTIONS",
    "DEFAULT_STEP_SECONDS",
    "SHARED_STEPS",
]

#: Default estimate (seconds) of one service's share of a step on one node. Overridable per
#: service with `durations:`. `packages` and `reboot` are one transaction per node, so a
#: node's time for them is the maximum over its services, not the sum.
DEFAULT_STEP_SECONDS: dict[str, float] = {
    "validate": 5.0,
    "leave": 10.0,
    "stop": 5.0,
    "packages": 60.0,
    "config": 10.0,
    "reboot": 180.0,
    "migrate": 60.0,
    "start": 10.0,
    "rejoin": 10.0,
    "verify": 5.0,
    "backup": 60.0,
    "pin": 5.0,
    "unpin": 10.0,
    "converge": 30.0,
    "prepare": 120.0,
    "run": 600.0,
    "transfer_data": 300.0,
    "cleanup": 20.0,
}

#: Steps whose node time is one shared transaction (max over services), not a sum.
SHARED_STEPS: frozenset[str] = frozenset({"packages", "reboot", "run", "prepare"})
