"""`pcs`, the pacemaker stand-in's command: status, start/stop of the cluster stack, standby,
and what forms a new cluster on a new OS (`cluster destroy`, `cluster setup`, `cluster node
add`, run on a member of the cluster as pcs requires). The lab keeps each node's cluster
configuration in `stepwise.lab.corosync`."""

from __future__ import annotations

from stepwise.lab import corosync
from stepwise.lab import health as lab_health
from stepwise.lab.nodecmd_base import command, err, job_timeout, out
from stepwise.lab.nodecmd_cluster import cluster_service
from stepwise.lab.nodes import Lab, read_unit

USAGE = (
    "usage: pcs status | pcs cluster stop|start [--all] | pcs cluster destroy | "
    "pcs cluster setup NAME NODE... [--start] [--wait] [--force] | "
    "pcs cluster node add NODE [--start] [--wait] | pcs node standby|unstandby [NODE]"
)


@command("pcs")
def pcs(lab: Lab, node: str, args: list[str]) -> int:
    svc = cluster_service(lab, corosync.KINDS)
    if svc is None or node not in lab.service(svc).instances:
        return err("Error: unable to get cluster status: no cluster configured on this node")
    words = [a for a in args if not a.startswith("-")]
    if words[:1] == ["status"]:
        return _status(lab, node, svc)
    if words[:1] == ["cluster"] and words[1:2] in (["stop"], ["start"]):
        targets = lab.service(svc).instances if "--all" in args else [node]
        return _start_stop(lab, svc, words[1], targets)
    if words[:2] == ["cluster", "destroy"]:
        return _destroy(lab, node, svc)
    if words[:2] == ["cluster", "setup"] and len(words) > 3:
        return _setup(lab, node, svc, words[3:], args)
    if words[:3] == ["cluster", "node", "add"] and len(words) == 4:
        return _node_add(lab, node, svc, words[3], args)
    if words[:1] == ["node"] and words[1:2] in (["standby"], ["unstandby"]):
        return _standby(lab, node, svc, words[1] == "standby", words[2] if len(words) > 2 else node)
    return err(USAGE)


def _status(lab: Lab, node: str, svc: str) -> int:
    ok, why = lab_health.quorum(lab, svc)
    running = [n for n in lab.service(svc).instances if read_unit(lab, n, svc)]
    standby = [
        n
        for n in running
        if (lab.read_state(n, "cluster.json", {}) or {}).get(svc, {}).get("standby")
    ]
    out(
        f"Cluster: {svc}\n  {why}\n"
        f"  Online: [ {' '.join(n for n in running if n not in standby)} ]\n"
        f"  Standby: [ {' '.join(standby)} ]"
    )
    if node not in running:
        return err("Error: cluster is not currently running on this node")
    return 0 if ok else 1


def _start_stop(lab: Lab, svc: str, op: str, targets: list[str]) -> int:
    rc = 0
    for n in targets:
        # the cluster stack brings up what it manages (a real RabbitMQ member boots in over
        # a minute on 2 busy cores): wait as long as the slowest unit may take
        wait = job_timeout(lab, svc) + max(
            s.start_timeout or 0.0 for s in lab.spec.services.values()
        )
        res = lab.call(op, node=n, unit=svc, timeout=wait)
        msg = res.get("message")
        if op == "start" and not res.get("ok"):
            # what the node's corosync says when its configuration is not for its OS
            msg = corosync.cannot_start(lab, n, svc) or msg
        out(f"{n}: {'Stopping' if op == 'stop' else 'Starting'} Cluster... {msg}")
        rc = rc or (0 if res.get("ok") else 1)
    return rc


def _destroy(lab: Lab, node: str, svc: str) -> int:
    """Stop the cluster stack here and remove the node's cluster configuration."""
    # also a stack that fails to start (systemd restarting it): it stays stopped
    res = lab.call("stop", node=node, unit=svc, timeout=job_timeout(lab, svc))
    if not res.get("ok"):
        return err(f"Error: unable to stop the cluster on {node}: {res.get('message')}")
    corosync.destroy(lab, node, svc)
    out("Shutting down pacemaker/corosync services...\nRemoving all cluster configuration files...")
    return 0


def _unknown(lab: Lab, svc: str, nodes: list[str]) -> list[str]:
    return [n for n in nodes if n not in lab.service(svc).instances]


def _setup(lab: Lab, node: str, svc: str, nodes: list[str], args: list[str]) -> int:
    """A new cluster of `nodes`: each must hold no other cluster's configuration."""
    bad = _unknown(lab, svc, nodes)
    if bad:
        return err(f"Error: Host '{bad[0]}' is not known to pcs, try to authenticate it first")
    taken = [n for n in nodes if corosync.in_a_cluster(lab, n, svc)]
    if taken and "--force" not in args:
        return err(
            f"Error: {taken[0]}: The host seems to be in a cluster already as cluster "
            "configuration files have been found on the host, use --force to override"
        )
    majors = sorted({lab.os_major(n) for n in nodes})
    if len(majors) > 1:
        return err(f"Error: the nodes run corosync of different OS majors {majors}: no cluster")
    for n in nodes:
        corosync.configure(lab, n, svc)
    out(f"Sending cluster config files to the nodes...\n{', '.join(nodes)}: Succeeded")
    return _start_stop(lab, svc, "start", nodes) if "--start" in args else 0


def _node_add(lab: Lab, node: str, svc: str, new: str, args: list[str]) -> int:
    """Add `new` to the cluster this node runs (pcs runs it on a member only)."""
    if not read_unit(lab, node, svc):
        return err("Error: Unable to read the cluster configuration: cluster is not running here")
    if _unknown(lab, svc, [new]):
        return err(f"Error: Host '{new}' is not known to pcs, try to authenticate it first")
    if corosync.in_a_cluster(lab, new, svc) and "--force" not in args:
        return err(
            f"Error: {new}: The host seems to be in a cluster already as cluster configuration "
            "files have been found on the host, use --force to override"
        )
    if lab.os_major(new) != lab.os_major(node):
        return err(
            f"Error: {new} runs OS {lab.os_major(new)}, this cluster's corosync OS "
            f"{lab.os_major(node)}: it cannot join"
        )
    corosync.configure(lab, new, svc)
    out(f"Sending updated corosync.conf to nodes...\n{new}: Succeeded")
    return _start_stop(lab, svc, "start", [new]) if "--start" in args else 0


def _standby(lab: Lab, node: str, svc: str, on: bool, target: str) -> int:
    if target not in lab.service(svc).instances:
        return err(f"Error: node '{target}' does not appear to exist in configuration")
    if not read_unit(lab, node, svc):
        return err("Error: cluster is not currently running on this node")
    with lab.node_lock(target):
        st = lab.read_state(target, "cluster.json", {}) or {}
        st.setdefault(svc, {})["standby"] = on
        lab.write_state(target, "cluster.json", st)
    # Standby moves the VIP's traffic away from the node: its servers go to maintenance.
    from stepwise.lab import haproxy

    with lab.node_lock(target):
        haproxy.standby(lab, target, on)
    return 0
