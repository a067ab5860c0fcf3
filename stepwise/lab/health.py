"""What makes an emulated service healthy: schema, quorum, RPC versions, its database.

The database's own cluster is real (Galera, `galera.py`): its quorum is what its members say.

Shared by the emulated processes (they answer health checks with it), `lab status` and the
`healthcheck` node command, so all three always agree.
"""

from __future__ import annotations

import time
from typing import Any

from stepwise.lab.kinds import kind_named
from stepwise.lab.nodes import Lab, read_unit
from stepwise.lab.rpc import rpc_state

#: Clusters whose members leave the membership when stopped cleanly (expected votes shrink,
#: like corosync's last-man-standing). A ceph-mon stays in the monmap until `ceph mon remove`.
#: (Galera is real: a clean shutdown leaves its cluster by itself.)
LEAVE_ON_STOP = ("pacemaker", "corosync", "rabbitmq")
MESSAGING_CLUSTERS = ("rabbitmq",)
STORAGE_CLUSTERS = ("ceph-mon",)


def left(lab: Lab, node: str, service: str) -> bool:
    """True when the member left its cluster on purpose (clean stop, `ceph mon remove`)."""
    state = lab.read_state(node, "cluster.json", {}) or {}
    return bool(state.get(service, {}).get("left"))


def quorum(lab: Lab, service: str) -> tuple[bool, str]:
    """Whether the cluster of `service` has quorum right now (a deployment-wide fact)."""
    svc = lab.service(service)
    own = kind_named(svc.kind).quorum(lab, service)  # a real cluster: what its members report
    if own is not None:
        return own
    members = svc.instances
    running = [n for n in members if read_unit(lab, n, service)]
    if svc.os_bound:
        majors = {lab.os_major(n) for n in running}
        if len(majors) > 1:
            return (
                False,
                f"cluster cannot form: members on OS majors {sorted(majors)} "
                "cannot talk to each other",
            )
    expected = [n for n in members if n in running or not left(lab, n, service)]
    if not running:
        return False, "no member running"
    if len(running) * 2 <= len(expected):
        return False, f"no quorum: {len(running)} of {len(expected)} members"
    return True, f"quorate: {len(running)} of {len(expected)} members"


_schema_cache: dict[str, tuple[float, Any]] = {}


def schema_version(lab: Lab, project: str, ttl: float = 0.5) -> int | None:
    """The schema version of a project's database, read through the database VIP."""
    now = time.monotonic()
    hit = _schema_cache.get(project)
    if hit and now - hit[0] < ttl:
        return hit[1]
    from stepwise.lab import mariadb

    try:
        v = mariadb.get_schema(lab.spec.vip, lab.spec.vips[lab.spec.db_service].port, project)
    except Exception:  # noqa: BLE001 - any DB error means "unreachable" to the service
        v = None
    _schema_cache[project] = (now, v)
    return v


def service_health(lab: Lab, service: str, major: int) -> tuple[bool, str]:
    """Health of an instance of `service` running code of release `major` (what it needs is
    cluster-wide: its schema, its cluster's quorum, the messaging and its RPC peers)."""
    svc = lab.service(service)
    if svc.schema:
        v = schema_version(lab, svc.project)
        if v is None:
            return False, "database unreachable"
        if v < major:
            return False, f"database schema {v} is older than code {major}: run db sync"
        if v > major and not svc.expand_contract:
            return False, f"database schema {v} is newer than code {major} (no expand/contract)"
        if v > major:
            from stepwise.lab.services import contract_key

            contracted = schema_version(lab, contract_key(svc.project))
            if contracted is not None and contracted > major:
                return (
                    False,
                    f"database schema contracted to {contracted}: "
                    f"code {major} no longer runs on it",
                )
    if svc.cluster:
        ok, why = quorum(lab, service)
        if not ok:
            return False, why
    if svc.rpc:
        for name, other in lab.spec.services.items():
            if other.cluster in MESSAGING_CLUSTERS:
                ok, why = quorum(lab, name)
                if not ok:
                    return False, f"messaging down ({name}: {why})"
        ok, why = rpc_state(lab, svc.rpc)
        if not ok:
            return False, why
    return True, "ok"


def storage_ok(lab: Lab) -> tuple[bool, str]:
    """Workload disks need the storage cluster's monitors in quorum."""
    for name, svc in lab.spec.services.items():
        if svc.cluster in STORAGE_CLUSTERS:
            ok, why = quorum(lab, name)
            if not ok:
                return False, f"storage I/O blocked ({name}: {why})"
    return True, "ok"
