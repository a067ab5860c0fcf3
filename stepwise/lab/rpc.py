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
    """The RPC version a unit of `service` running release `major` sends when capped, None
    when it sends its own: a service that negotiates (cinder, neutron-server) caps itself at the
    oldest release a running peer runs, as it reads it at its start and on SIGHUP; one that
    follows (neutron's agents) never caps; a pinned one as nova's `[upgrade_levels]` says: its
    own file's `[upgrade_levels] GROUP = R<n>`, else its group's shared file
    (`/etc/nova/nova.conf [upgrade_levels] compute`) where `auto` means the oldest release a
    running peer of the group runs, as nova asks its service records."""
    svc = lab.service(service)
    group = svc.rpc
    if not group or svc.rpc_mixing == "follows":
        return None
    if svc.rpc_mixing == "negotiated":
        return min(major, oldest_peer(lab, group) or major)
    own = ini_section(lab.node_path(node, f"/etc/{service}/{service}.conf"), "upgrade_levels")
    shared = ini_section(lab.node_path(node, f"/etc/{group}/{group}.conf"), "upgrade_levels")
    pin = (own.get(group) or next(iter(shared.values()), "")).strip()
    if pin == "auto":
        return min(major, oldest_peer(lab, group) or major)
    return min(major, repos.major(pin.lstrip("Rr"))) if pin else None


def rpc_state(lab: Lab, group: str) -> tuple[bool, str]:
    """A group of RPC peers works when nobody sends a newer version than a peer it talks to
    runs: every peer talks to every other, but a follower (neutron's agent) talks only to the
    peers that negotiate (its servers)."""
    peers = rpc_peers(lab, group)
    if not peers:
        return True, "no peers"
    follows = {s for _, s, _, _ in peers if lab.service(s).rpc_mixing == "follows"}
    oldest = min(p[2] for p in peers)
    servers = [p[2] for p in peers if p[1] not in follows]
    oldest_server = min(servers, default=None)
    bad = []
    for n, s, _, send in peers:
        heard_by = oldest_server if s in follows else oldest
        if heard_by is not None and send > heard_by:
            bad.append((f"{s}@{n}", send, heard_by))
    if bad:
        return (
            False,
            f"RPC {group}: {', '.join(b[0] for b in bad)} send version "
            f"{max(b[1] for b in bad)} to peers running {min(b[2] for b in bad)} "
            "(not pinned, or newer than its servers)",
        )
    return True, f"RPC {group}: ok"
