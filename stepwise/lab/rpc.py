"""The lab's RPC model: which version each running peer of an RPC group sends, what a pin
makes it send (nova's `[upgrade_levels]`, `auto` included), and whether the group works
(nobody sends a newer version than some peer runs).

Read by a unit at its start and on SIGHUP (stepwise.lab.unit) and by every stand-in's health
(stepwise.lab.health); a leaf of both.
"""

from __future__ import annotations

from stepwise.lab import repos
from stepwise.lab.nodes import Lab, ini_section, read_unit


def rpc_peers(lab: Lab, group: str) -> list[tuple[str, str, int, int]]:
    """The running peers of an RPC group: (node, service, release major, version it sends)."""
    peers = []
    for name, svc in lab.spec.services.items():
        if svc.rpc != group:
            continue
        for n in svc.instances:
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
    group = lab.service(service).rpc
    if not group:
        return None
    own = ini_section(lab.node_path(node, f"/etc/{service}/{service}.conf"), "upgrade_levels")
    shared = ini_section(lab.node_path(node, f"/etc/{group}/{group}.conf"), "upgrade_levels")
    pin = (own.get(group) or next(iter(shared.values()), "")).strip()
    if pin == "auto":
        return min(major, oldest_peer(lab, group) or major)
    return min(major, repos.major(pin.lstrip("Rr"))) if pin else None


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
