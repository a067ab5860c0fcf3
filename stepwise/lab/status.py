"""What `lab status` reports: nodes, their services (version, state, health, real or stand-in),
workloads, quorum and the Galera cluster, as the supervisor and each service's health URL say."""

from __future__ import annotations

import json
import threading
from typing import TYPE_CHECKING, Any

from stepwise.lab import containers, galera
from stepwise.lab import health as lab_health
from stepwise.lab import services as lab_services
from stepwise.lab.kinds import REAL, STAND_IN, kind_named, kinds_in
from stepwise.lab.nodecmd import http_health
from stepwise.lab.nodes import Lab, read_unit

if TYPE_CHECKING:
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
        "lab": lab.spec.name,
        "dir": str(lab.dir),
        "vip": lab.spec.vip,
        "components": components(lab, ask_clusters),
        "supervisor": bool(sup["units"]) or lab.supervisor_alive(),
        "nodes": nodes,
        "workloads": wls,
        **({"servers": _servers(lab)} if ask_clusters else {}),
        "routers": _router_rows(lab, states),
        "quorum": {
            s: lab_health.quorum(lab, s)[1] for s, v in lab.spec.services.items() if v.cluster
        },
        "database": galera.galera_status(lab),
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
        for s in lab.node(n).services
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
        "address": lab.node(n).address,
        "role": lab.node(n).role,
        "os_major": lab.os_major(n),
        "release": lab_services.release(lab, n),
        "kernel": (lab.read_state(n, "kernel.json", {}) or {}).get("running"),
        "down": n in down,
        "container_runtime": RUNTIME_NOTE if containers.node_style(lab.spec, n) else None,
        "services": [_service_row(lab, n, s, states, checks) for s in lab.node(n).services],
    }


def _service_row(lab: Lab, n: str, s: str, states: Units, checks: Checks) -> dict[str, Any]:
    """One service on one node; its health is the reason its health URL gave, else its state."""
    u = states.get((n, s), {})
    ok, detail = checks.get((n, s), (False, u.get("state", "inactive")))
    try:
        reason = json.loads(detail).get("reason", detail)
    except ValueError:
        reason = detail
    kind, runs = service_kind(lab, n, s, read_unit(lab, n, s))
    return {
        "name": s,
        "version": lab_services.service_version(lab, n, s),
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
    for vm, st in lab_services.workloads(lab).items():
        w = lab.spec.workloads[vm]
        alive = (
            st["state"] == "running" and states.get((st["host"], vm), {}).get("state") == "active"
        )
        wls.append(
            {
                "name": vm,
                "host": st["host"],
                "address": f"{w.address}:{w.port}",
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
        spec = lab.spec.routers[r]
        master = st["master"]
        up = bool(master) and states.get((master, r), {}).get("state") == "active"
        rows.append(
            {
                "name": r,
                "fip": f"{spec.fip}:{spec.port}",
                "workload": spec.workload,
                "master": master,
                "hosts": st["hosts"],
                "forwarding": up and routers.forwarding(lab, master)[0],
            }
        )
    return rows


def service_kind(lab: Lab, node: str, service: str, published: dict | None) -> tuple[str, str]:
    """(real | stand-in, what exactly) for one service on one node, as its kind says."""
    kind = kind_named(lab.service(service).kind)
    return (REAL if kind.real else STAND_IN), kind.describe(lab, node, service, published)


def components(lab: Lab, ask_clusters: bool = True) -> list[dict[str, str]]:
    """The lab-wide parts: the VIP, the registry and runtime, each kind's rows for its
    services (`ask_clusters`: each RabbitMQ member's state, one `rabbitmqctl` call), and the
    stand-in nova and routers the workloads live on."""
    out = [{"name": "VIP", "kind": REAL, "detail": f"HAProxy on {lab.spec.vip} (Debian's haproxy)"}]
    out += _container_components(lab)
    for kind, services in sorted(kinds_in(lab.spec).items(), key=lambda kv: _ORDER.index(kv[0])
                                 if kv[0] in _ORDER else len(_ORDER)):  # fmt: skip
        out += kind_named(kind).components(lab, services, ask_clusters)
    if lab.spec.workloads:
        detail = "instances, live and cold migration, stop/start (stepwise/lab/nova.py)"
        out.append({"name": "nova API", "kind": STAND_IN, "detail": detail})
    if lab.spec.routers:
        detail = (
            "L3 HA routers forwarding each floating IP to its workload while the master's L3 "
            "agent runs; no real neutron (stepwise/lab/routers.py)"
        )
        out.append({"name": "routers, floating IPs", "kind": STAND_IN, "detail": detail})
    return out


#: the order of the kinds' rows in `lab status` (the infrastructure first, stand-ins last)
_ORDER = ("galera", "rabbitmq", "memcached", "openstack_api", "openstack_process", "stand_in")


def _container_components(lab: Lab) -> list[dict[str, str]]:
    """The registry (real, and whether it answers) and the runtime (a stand-in)."""
    c = lab.spec.containers
    if not c:
        return []
    from stepwise.lab import registry

    up = "serving" if registry.ping(lab) else "NOT answering"
    db = lab.spec.db_service
    held = db and any(containers.node_style(lab.spec, n) for n in lab.spec.services[db].instances)
    note = (
        [{"name": db, "kind": REAL, "detail": "on a container-style role: its container holds "
          "no MariaDB, the node runs the real Galera member from the packages"}]
        if held
        else []
    )  # fmt: skip
    return note + [
        {
            "name": "registry",
            "kind": REAL,
            "detail": f"Debian's docker-registry on {c.lab_registry} ({up}), standing for "
            f"{c.registry}; images pushed and pulled with skopeo",
        },
        {
            "name": "container runtime",
            "kind": STAND_IN,
            "detail": "no container engine runs here: a unit starts the service from its "
            "container's image (a stand-in at the image's version, real OpenStack code from the "
            "venv unpacked from the image's layer); images, layers, digests, tags, registry "
            "are real",
        },
    ]
