"""The pacemaker stand-in's cluster configuration on each node, as `pcs` writes corosync.conf:
which OS major wrote it, or that `pcs cluster destroy` removed it.

Corosync changes incompatibly with the OS major, so a node that comes back on a new OS with
its old configuration cannot start its cluster stack: it has to be set up anew (`pcs cluster
setup` on the first new-OS node) or added to the new cluster by one of its members (`pcs
cluster node add`). The lab holds the nodes to that, as a real node would, so a plan that
forgets to form the new cluster fails here too. A node's configuration is recorded when its
cluster stack first starts (`lab up` deploys it)."""

from __future__ import annotations

from typing import Any

from stepwise.lab.nodes import Lab

KINDS = ("pacemaker", "corosync")
_STATE = "cluster.json"


def _edit(lab: Lab, node: str, service: str, change: dict[str, Any]) -> None:
    with lab.node_lock(node):
        st = lab.read_state(node, _STATE, {}) or {}
        mine = st.setdefault(service, {})
        mine.update(change)
        for k in [k for k, v in mine.items() if v is None]:
            del mine[k]
        lab.write_state(node, _STATE, st)


def _mine(lab: Lab, node: str, service: str) -> dict[str, Any]:
    return (lab.read_state(node, _STATE, {}) or {}).get(service, {})


def cannot_start(lab: Lab, node: str, service: str) -> str | None:
    """Why the node's cluster stack cannot start with the configuration it has, or None (a
    node's first start records the configuration `lab up` deployed)."""
    mine = _mine(lab, node, service)
    now = lab.os_major(node)
    if mine.get("destroyed"):
        return (
            "corosync: no cluster is configured on this node (pcs cluster destroy removed it): "
            "set up a new cluster here (pcs cluster setup) or add this node from a member "
            "(pcs cluster node add)"
        )
    written = mine.get("corosync_os")
    if written is None:
        _edit(lab, node, service, {"corosync_os": now})
        return None
    if written != now:
        return (
            f"corosync of OS {now} cannot start with the cluster configuration written on OS "
            f"{written}: that cluster's members cannot talk to this one; set up the new-OS "
            "cluster (pcs cluster setup) on the first new-OS node and add this one to it "
            "(pcs cluster node add)"
        )
    return None


def in_a_cluster(lab: Lab, node: str, service: str) -> bool:
    """The node holds a cluster configuration (pcs refuses to set it up or add it again)."""
    mine = _mine(lab, node, service)
    return not mine.get("destroyed")


def configure(lab: Lab, node: str, service: str) -> None:
    """`pcs cluster setup` / `node add` wrote this node's configuration on its current OS;
    the new cluster knows nothing of the old one's standby marks. A node that left stays out
    of the expected members until its stack starts (nodes added together while down would
    otherwise count against the quorum of the members running)."""
    _edit(
        lab,
        node,
        service,
        {"corosync_os": lab.os_major(node), "destroyed": None, "standby": None},
    )


def destroy(lab: Lab, node: str, service: str) -> None:
    """`pcs cluster destroy`: the node's cluster configuration is gone."""
    _edit(lab, node, service, {"corosync_os": None, "destroyed": True, "standby": None})
