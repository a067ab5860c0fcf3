"""Fault injection: crash a node, make a service hang on stop, slow a command, fill a disk,
plant a leapp inhibitor, cut the repositories off, pin an instance to its compute, keep an
instance busy with a client's snapshot."""

from __future__ import annotations

import time
from typing import Any

from stepwise.errors import InputError, Problem
from stepwise.lab import services
from stepwise.lab.nodes import Lab

KINDS = (
    "crash",
    "recover",
    "hang-stop",
    "slow",
    "disk-full",
    "leapp-inhibitor",
    "repos-unreachable",
    "no-live-migrate",
    "snapshot",
    "registry-down",
    "clear",
)
#: the lab-wide target of the registry faults (`lab fault registry-down`, `lab fault clear
#: registry`)
REGISTRY = "registry"


def _check_node(lab: Lab, node: str) -> None:
    if node not in lab.spec.nodes:
        raise InputError(Problem(f"unknown node '{node}'", hint=f"nodes: {', '.join(lab.nodes())}"))


def inject(lab: Lab, kind: str, node: str, target: str | None = None, seconds: float = 5.0) -> str:
    """Apply one fault to `node`; returns what was done."""
    if kind == "registry-down" or (kind == "clear" and node in (REGISTRY, "")):
        return _registry(lab, down=kind == "registry-down")
    _check_node(lab, node)
    if kind == "crash":
        # Power loss: every process dies, the node stays unreachable until `recover`.
        lab.call("poweroff", node=node, down=True)
        with lab.node_lock(node):
            wl = services.workloads(lab)
            for st in wl.values():
                if st["host"] == node and st["state"] == "running":
                    st["state"] = "lost"
            services.save_workloads(lab, wl)
        return f"{node} crashed"
    if kind in ("no-live-migrate", "snapshot"):
        return _instance_fault(lab, kind, node, target, seconds)
    if kind == "recover":
        res = lab.call("boot", node=node, units=services.units_enabled(lab, node), timeout=120)
        return (
            f"{node} booted "
            f"({sum(1 for r in res.get('units', {}).values() if r.get('ok'))} units started)"
        )
    with lab.node_lock(node):
        f: dict[str, Any] = lab.read_state(node, "faults.json", {}) or {}
        if kind == "hang-stop":
            if not target or target not in lab.node(node).services:
                raise InputError(
                    Problem(
                        f"hang-stop needs a service of {node}: {', '.join(lab.node(node).services)}"
                    )
                )
            f["hang_stop"] = sorted(set(f.get("hang_stop", [])) | {target})
            msg = f"{target} on {node} will ignore stop requests"
        elif kind == "slow":
            if not target:
                raise InputError(Problem("slow needs a node command name, e.g. dnf"))
            f.setdefault("slow", {})[target] = seconds
            msg = f"'{target}' on {node} takes {seconds:g}s longer"
        elif kind == "disk-full":
            f["disk_full"] = True
            msg = f"{node}: / is full"
        elif kind == "leapp-inhibitor":
            # what `leapp preupgrade` will report as inhibiting the OS upgrade of this node
            text = target or "Unsupported kernel module loaded (planted by the lab)"
            f["leapp_inhibitors"] = [*f.get("leapp_inhibitors", []), text]
            msg = f"{node}: leapp preupgrade reports the inhibitor '{text}'"
        elif kind == "repos-unreachable":
            f["repos_unreachable"] = True
            msg = f"{node}: dnf cannot reach its repositories"
        elif kind == "clear":
            f = {}
            msg = f"{node}: faults cleared"
        else:
            raise InputError(Problem(f"unknown fault '{kind}'", hint=f"one of {', '.join(KINDS)}"))
        lab.write_state(node, "faults.json", f)
    if kind == "clear":
        msg += _clear_no_live_migrate(lab, node)
    return msg


def _clear_no_live_migrate(lab: Lab, node: str) -> str:
    """`clear` also lets the node's instances live-migrate again; what it says of them."""
    with lab.node_lock("_lab"):
        wl = services.workloads(lab)
        freed = sorted(
            v for v, st in wl.items() if st["host"] == node and st.get("no_live_migrate")
        )
        for v in freed:
            wl[v].pop("no_live_migrate")
        if freed:
            services.save_workloads(lab, wl)
    return f" ({', '.join(freed)} can live-migrate again)" if freed else ""


def _instance_of(wl: dict[str, Any], kind: str, node: str, vm: str | None) -> str:
    here = sorted(v for v, st in wl.items() if st["host"] == node)
    if vm not in here:
        raise InputError(
            Problem(
                f"{kind} needs an instance of {node}",
                hint=f"instances on {node}: {', '.join(here) or 'none'}",
            )
        )
    return vm


def _instance_fault(lab: Lab, kind: str, node: str, vm: str | None, seconds: float) -> str:
    """A fault of one instance of `node`. no-live-migrate: it cannot live-migrate (as one with
    a PCI device or a local disk): nova refuses to move it live, a cold migration or a stop
    still works. snapshot: a client snapshots it for `seconds`: it stays ACTIVE with
    task_state image_snapshot, and nova refuses (409) to live-migrate it until the snapshot
    ends (what a drain meets when the cloud's users act on their servers meanwhile)."""
    with lab.node_lock("_lab"):
        wl = services.workloads(lab)
        vm = _instance_of(wl, kind, node, vm)
        if kind == "snapshot":
            wl[vm]["busy_until"] = time.time() + seconds
            msg = f"{vm} on {node} is being snapshotted for {seconds:g}s"
        else:
            wl[vm]["no_live_migrate"] = True
            msg = f"{vm} on {node} cannot live-migrate"
        services.save_workloads(lab, wl)
    return msg


def _registry(lab: Lab, down: bool) -> str:
    """Stop the lab's registry (pulls fail as against an unreachable registry) or start it
    again (its storage is kept: the same tags and digests)."""
    from stepwise.lab import registry

    if not lab.spec.containers:
        raise InputError(Problem("this lab has no container registry (no container-style role)"))
    if down:
        lab.call("stop", node="_lab", unit=registry.UNIT)
        return f"registry {lab.spec.containers.lab_registry} stopped"
    lab.call("start", node="_lab", unit=registry.UNIT)
    try:
        registry.wait_ready(lab)
    except RuntimeError as exc:
        raise InputError(Problem(str(exc))) from None
    return f"registry {lab.spec.containers.lab_registry} serving again"
