"""What `lab status` reports: nodes, their services (version, state, health, real or stand-in),
workloads, quorum and the Galera cluster, as the supervisor and each service's health URL say."""

from __future__ import annotations

import json
import threading
from typing import Any

from stepwise.lab import containers as C
from stepwise.lab import health as H
from stepwise.lab import mariadb
from stepwise.lab import services as S
from stepwise.lab.kinds import components, service_kind
from stepwise.lab.nodecmd import http_health
from stepwise.lab.nodes import Lab

RUNTIME_NOTE = "stand-in (no container engine runs here); images, digests, registry: real"
#: The supervisor's units by (node, unit).
Units = dict[tuple[str, str], dict[str, Any]]
#: A health check's answer by (node, service): healthy, and the body or why not.
Checks = dict[tuple[str, str], tuple[bool, str]]


def status(lab: Lab, ask_clusters: bool = True) -> dict[str, Any]:
    """Nodes, addresses, OS majors, services with version, state and health; workloads.
    `ask_clusters=False` skips what costs a CLI call (the RabbitMQ cluster's members): lab up
    polls this until all is healthy."""
    sup = _supervisor_view(lab)
    states: Units = {(u["node"], u["unit"]): u for u in sup["units"]}
    checks = _health_checks(lab, states)
    nodes = [_node_row(lab, n, sup.get("down", []), states, checks) for n in lab.nodes()]
    wls = _workload_rows(lab, states)
    return {
        "lab": lab.spec["name"],
        "dir": str(lab.dir),
        "vip": lab.spec["vip"],
        "components": components(lab, ask_clusters),
        "supervisor": bool(sup["units"]) or lab.supervisor_alive(),
        "nodes": nodes,
        "workloads": wls,
        **({"servers": _servers(lab)} if ask_clusters else {}),
        "routers": _router_rows(lab, states),
        "quorum": {
            s: H.quorum(lab, s)[1] for s, v in lab.spec["services"].items() if v.get("cluster")
        },
        "database": mariadb.galera_status(lab),
    }


def _servers(lab: Lab) -> list[dict[str, Any]]:
    """Real nova's servers (the lab's own workloads when nova runs real), asked of its API;
    one row saying why when it does not answer. None without real nova."""
    from stepwise.lab.openstack import config, nova_cells

    if not config.is_real_placed(lab, "nova_api"):
        return []
    try:
        found = nova_cells.call(lab, "GET", "/servers/detail?all_tenants=1")["servers"]
    except Exception as exc:  # noqa: BLE001 - nova down is a state to show, not a failure
        return [{"name": "-", "status": f"nova's API did not answer: {exc}", "host": "-"}]
    return sorted(
        ({"name": s["name"], "status": s["status"], "host": nova_cells.host_of(s)} for s in found),
        key=lambda r: r["name"],
    )


def _supervisor_view(lab: Lab) -> dict[str, Any]:
    """The supervisor's units and down nodes; a lab whose supervisor is gone has every node
    down and nothing running."""
    try:
        return lab.call("status")
    except Exception:  # noqa: BLE001
        return {"units": [], "down": list(lab.nodes())}


def _health_checks(lab: Lab, states: Units) -> Checks:
    """Ask every active service its health, all at once (a slow answer costs 1.5 s, not one
    each)."""
    checks: Checks = {}

    def check(key: tuple[str, str]) -> None:
        checks[key] = http_health(lab, key[0], key[1], timeout=1.5)

    keys = [
        (n, s)
        for n in lab.nodes()
        for s in lab.node(n)["services"]
        if states.get((n, s), {}).get("state") == "active"
    ]
    threads = [threading.Thread(target=check, args=(k,)) for k in keys]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return checks


def _node_row(lab: Lab, n: str, down: list[str], states: Units, checks: Checks) -> dict[str, Any]:
    """One node: where it is, what it runs (OS, release, kernel) and its services."""
    return {
        "name": n,
        "address": lab.node(n)["address"],
        "role": lab.node(n)["role"],
        "os_major": lab.os_major(n),
        "release": S.release(lab, n),
        "kernel": (lab.read_state(n, "kernel.json", {}) or {}).get("running"),
        "down": n in down,
        "container_runtime": RUNTIME_NOTE if C.node_style(lab.spec, n) else None,
        "services": [_service_row(lab, n, s, states, checks) for s in lab.node(n)["services"]],
    }


def _service_row(lab: Lab, n: str, s: str, states: Units, checks: Checks) -> dict[str, Any]:
    """One service on one node; its health is the reason its health URL gave, else its state."""
    u = states.get((n, s), {})
    ok, detail = checks.get((n, s), (False, u.get("state", "inactive")))
    try:
        reason = json.loads(detail).get("reason", detail)
    except ValueError:
        reason = detail
    kind, runs = service_kind(lab, n, s, H.read_unit(lab, n, s))
    return {
        "name": s,
        "version": S.service_version(lab, n, s),
        "state": u.get("state", "inactive"),
        "kind": kind,
        "runs": runs,
        "restarts": u.get("restarts", 0),
        "healthy": ok,
        "health": reason,
    }


def _workload_rows(lab: Lab, states: Units) -> list[dict[str, Any]]:
    """The workloads (instances): a running one whose process is gone is down."""
    wls = []
    from stepwise.lab import nova

    nova.settle(lab)  # nova's periodic work: a live migration whose time has come completes
    for vm, st in S.workloads(lab).items():
        w = lab.spec["workloads"][vm]
        alive = (
            st["state"] == "running" and states.get((st["host"], vm), {}).get("state") == "active"
        )
        wls.append(
            {
                "name": vm,
                "host": st["host"],
                "address": f"{w['address']}:{w['port']}",
                "state": st["state"] if alive or st["state"] != "running" else "down",
                # the lab's nova is a stand-in (stepwise/lab/nova.py): its API status
                "status": nova.status_of(st),
                "healthy": alive,
            }
        )
    return wls


def _router_rows(lab: Lab, states: Units) -> list[dict[str, Any]]:
    """The workloads' routers (stand-ins): floating IP, master, whether it forwards."""
    from stepwise.lab import routers

    rows = []
    for r, st in sorted(routers.state(lab).items()):
        spec = lab.spec["routers"][r]
        master = st["master"]
        up = bool(master) and states.get((master, r), {}).get("state") == "active"
        rows.append(
            {
                "name": r,
                "fip": f"{spec['fip']}:{spec['port']}",
                "workload": spec["workload"],
                "master": master,
                "hosts": st["hosts"],
                "forwarding": up and routers.forwarding(lab, master)[0],
            }
        )
    return rows
