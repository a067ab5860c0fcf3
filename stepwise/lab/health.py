"""What makes an emulated service healthy: schema, quorum, RPC versions, its database.

The database's own cluster is real (Galera, `galera.py`): its quorum is what its members say.

Shared by the emulated processes (they answer health checks with it), `lab status` and the
`healthcheck` node command, so all three always agree.
"""

from __future__ import annotations

import json
import time
from typing import Any

from stepwise.lab import repos as R
from stepwise.lab.nodes import Lab, ini_section
from stepwise.processes import pid_alive

#: Clusters whose members leave the membership when stopped cleanly (expected votes shrink,
#: like corosync's last-man-standing). A ceph-mon stays in the monmap until `ceph mon remove`.
#: (Galera is real: a clean shutdown leaves its cluster by itself.)
LEAVE_ON_STOP = ("pacemaker", "corosync", "rabbitmq")
MESSAGING_CLUSTERS = ("rabbitmq",)
STORAGE_CLUSTERS = ("ceph-mon",)


def read_unit(lab: Lab, node: str, unit: str) -> dict[str, Any] | None:
    """The published state of a unit if its process is alive."""
    try:
        data = json.loads(lab.unit_file(node, unit).read_text())
    except (FileNotFoundError, ValueError):
        return None
    if not pid_alive(int(data.get("pid", 0))):
        return None
    return data


def left(lab: Lab, node: str, service: str) -> bool:
    """True when the member left its cluster on purpose (clean stop, `ceph mon remove`)."""
    state = lab.read_state(node, "cluster.json", {}) or {}
    return bool(state.get(service, {}).get("left"))


def quorum(lab: Lab, service: str) -> tuple[bool, str]:
    """Whether the cluster of `service` has quorum right now (a deployment-wide fact)."""
    svc = lab.service(service)
    if svc.get("db"):
        from stepwise.lab import galera

        return galera.quorum(lab, service)  # a real Galera cluster: what its members report
    members = svc["instances"]
    running = [n for n in members if read_unit(lab, n, service)]
    if svc.get("os_bound"):
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


def rpc_peers(lab: Lab, group: str) -> list[tuple[str, str, int, int]]:
    """The running peers of an RPC group: (node, service, release major, version it sends)."""
    peers = []
    for name, svc in lab.spec["services"].items():
        if svc.get("rpc") != group:
            continue
        for n in svc["instances"]:
            u = read_unit(lab, n, name)
            if u and u.get("ready"):
                peers.append((n, name, int(u["major"]), int(u.get("rpc_send") or u["major"])))
    return peers


def oldest_peer(lab: Lab, group: str) -> int | None:
    """The oldest release a running peer of the RPC group runs (what nova's `auto` pin asks
    its service records), None when none runs."""
    return min((p[2] for p in rpc_peers(lab, group)), default=None)


def rpc_pin(lab: Lab, node: str, service: str, major: int) -> int | None:
    """The RPC version a unit of `service` running release `major` sends when pinned (nova's
    `[upgrade_levels]` semantics), None when unpinned: its own file's `[upgrade_levels] GROUP =
    R<n>`, else its group's shared file (`/etc/nova/nova.conf [upgrade_levels] compute`) where
    `auto` means the oldest release a running peer of the group runs, as nova asks its service
    records."""
    group = lab.service(service).get("rpc")
    if not group:
        return None
    own = ini_section(lab.node_path(node, f"/etc/{service}/{service}.conf"), "upgrade_levels")
    shared = ini_section(lab.node_path(node, f"/etc/{group}/{group}.conf"), "upgrade_levels")
    pin = (own.get(group) or next(iter(shared.values()), "")).strip()
    if pin == "auto":
        return min(major, oldest_peer(lab, group) or major)
    return min(major, R.major(pin.lstrip("Rr"))) if pin else None


def rpc_state(lab: Lab, group: str) -> tuple[bool, str]:
    """A group of RPC peers works when nobody sends a newer version than some peer runs."""
    peers = rpc_peers(lab, group)
    if not peers:
        return True, "no peers"
    oldest = min(p[2] for p in peers)
    bad = [f"{s}@{n}" for n, s, _, send in peers if send > oldest]
    if bad:
        return (
            False,
            f"RPC {group}: {', '.join(bad)} send version {max(p[3] for p in peers)} "
            f"to peers running {oldest} (not pinned)",
        )
    return True, f"RPC {group}: ok"


_schema_cache: dict[str, tuple[float, Any]] = {}


def schema_version(lab: Lab, project: str, ttl: float = 0.5) -> int | None:
    """The schema version of a project's database, read through the database VIP."""
    now = time.monotonic()
    hit = _schema_cache.get(project)
    if hit and now - hit[0] < ttl:
        return hit[1]
    from stepwise.lab import mariadb

    try:
        v = mariadb.get_schema(
            lab.spec["vip"], lab.spec["vips"][lab.spec["db_service"]]["port"], project
        )
    except Exception:  # noqa: BLE001 - any DB error means "unreachable" to the service
        v = None
    _schema_cache[project] = (now, v)
    return v


def service_health(lab: Lab, service: str, major: int) -> tuple[bool, str]:
    """Health of an instance of `service` running code of release `major` (what it needs is
    cluster-wide: its schema, its cluster's quorum, the messaging and its RPC peers)."""
    svc = lab.service(service)
    if svc.get("schema"):
        v = schema_version(lab, svc["project"])
        if v is None:
            return False, "database unreachable"
        if v < major:
            return False, f"database schema {v} is older than code {major}: run db sync"
        if v > major and not svc.get("expand_contract"):
            return False, f"database schema {v} is newer than code {major} (no expand/contract)"
        if v > major:
            from stepwise.lab.services import contract_key

            contracted = schema_version(lab, contract_key(svc["project"]))
            if contracted is not None and contracted > major:
                return (
                    False,
                    f"database schema contracted to {contracted}: "
                    f"code {major} no longer runs on it",
                )
    if svc.get("cluster"):
        ok, why = quorum(lab, service)
        if not ok:
            return False, why
    if svc.get("rpc"):
        for name, other in lab.spec["services"].items():
            if other.get("cluster") in MESSAGING_CLUSTERS:
                ok, why = quorum(lab, name)
                if not ok:
                    return False, f"messaging down ({name}: {why})"
        ok, why = rpc_state(lab, svc["rpc"])
        if not ok:
            return False, why
    return True, "ok"


def storage_ok(lab: Lab) -> tuple[bool, str]:
    """Workload disks need the storage cluster's monitors in quorum."""
    for name, svc in lab.spec["services"].items():
        if svc.get("cluster") in STORAGE_CLUSTERS:
            ok, why = quorum(lab, name)
            if not ok:
                return False, f"storage I/O blocked ({name}: {why})"
    return True, "ok"
