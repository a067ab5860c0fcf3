"""What runs in a lab, real or stand-in, as `lab status` says it.

The lab runs the real thing wherever it can run on one machine: a Galera cluster of MariaDB
members, HAProxy (the VIPs),
and, when the deployment asks for it (`lab: {openstack: SERIES}`), keystone, placement and
glance (and nova: its API under uWSGI, its conductor, scheduler and compute as processes with
the fake virt driver) from PyPI under uWSGI, a RabbitMQ cluster (`rabbitmq.py`) and memcached
(`memcached.py`). Everything else (nova-compute and its instances without real nova, neutron,
pacemaker, ceph, leapp, reboots; rabbitmq and memcached without real OpenStack) is a stand-in
in Python that fails the way the real service fails in an upgrade.
"""

from __future__ import annotations

from typing import Any

REAL = "real"
STAND_IN = "stand-in"


def service_kind(lab: Any, node: str, service: str, unit: dict[str, Any] | None) -> tuple[str, str]:
    """(real | stand-in, what exactly) for one service on one node."""
    svc = lab.service(service)
    if svc.get("real"):
        from stepwise.lab.openstack import config as C
        from stepwise.lab.openstack import releases as RL

        release = C.release_on(lab, node, service)
        if release is None:
            return REAL, f"{RL.SERVICES[service].project} (not installed)"
        running = (unit or {}).get("code")
        code = running or f"{RL.SERVICES[service].project} {RL.version_of(release, service)}"
        where = (
            " from its container's image"
            if (unit or {}).get("venv", "").startswith(str(lab.node_root(node)))
            else ""
        )
        return REAL, f"{code} ({release.label}) {RL.SERVICES[service].runs}{where}"
    if svc.get("db"):
        from stepwise.lab.galera import versions

        return REAL, f"Galera member ({versions()})"
    if svc.get("kind"):
        from stepwise.lab import memcached, rabbitmq

        if svc["kind"] == rabbitmq.KIND:
            return REAL, f"RabbitMQ member {rabbitmq.node_name(lab, service, node)}"
        return REAL, f"Debian's memcached on port {memcached.PORT}"
    return STAND_IN, "lab stand-in (Python)"


def components(lab: Any, ask_clusters: bool = True) -> list[dict[str, str]]:
    """The lab-wide parts: the VIP and the database, and which services run real code
    (`ask_clusters`: each RabbitMQ member's state, one `rabbitmqctl` call)."""
    from stepwise.lab import memcached, rabbitmq
    from stepwise.lab.openstack import releases as RL

    out = [
        {"name": "VIP", "kind": REAL, "detail": f"HAProxy on {lab.spec['vip']} (Debian's haproxy)"}
    ]
    db = lab.spec.get("db_service")
    if db:
        from stepwise.lab.galera import versions

        out.append(
            {
                "name": db,
                "kind": REAL,
                "detail": f"a Galera cluster ({versions()}, Debian's packages)",
            }
        )
    out += _container_components(lab)
    out += rabbitmq.component(lab, ask_clusters) + [memcached.component(lab)]
    out = [row for row in out if row]
    real = lab.spec.get("openstack") or {}
    imaged = {s for s, v in (lab.spec.get("containers") or {}).get("services", {}).items()
              if v.get("series")}  # fmt: skip
    for s in real.get("services", []):
        how = ", the venv in its image, run from what a node pulled" if s in imaged else ""
        out.append(
            {
                "name": s,
                "kind": REAL,
                "detail": f"OpenStack {real['series']} code from PyPI {RL.SERVICES[s].runs}{how}",
            }
        )
    out += _stand_ins(lab)
    if lab.spec.get("workloads"):
        out.append(
            {
                "name": "nova API",
                "kind": STAND_IN,
                "detail": "instances, live and cold migration, stop/start (stepwise/lab/nova.py)",
            }
        )
    if lab.spec.get("routers"):
        out.append(
            {
                "name": "routers, floating IPs",
                "kind": STAND_IN,
                "detail": "L3 HA routers forwarding each floating IP to its workload while the "
                "master's L3 agent runs; no real neutron (stepwise/lab/routers.py)",
            }
        )
    return out


def _stand_ins(lab: Any) -> list[dict[str, str]]:
    """One row naming the services that run the lab's Python stand-ins (none: no row)."""
    others = sorted(
        s
        for s, v in lab.spec["services"].items()
        if not v.get("real") and not v.get("db") and not v.get("kind")
    )
    detail = "the lab's Python stand-ins"
    return [{"name": ", ".join(others), "kind": STAND_IN, "detail": detail}] if others else []


def _container_components(lab: Any) -> list[dict[str, str]]:
    """The registry (real, and whether it answers) and the runtime (a stand-in)."""
    c = lab.spec.get("containers")
    if not c:
        return []
    from stepwise.lab import containers as C
    from stepwise.lab import registry

    up = "serving" if registry.ping(lab) else "NOT answering"
    db = lab.spec.get("db_service")
    held = db and any(C.node_style(lab.spec, n) for n in lab.spec["services"][db]["instances"])
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
            "detail": f"Debian's docker-registry on {c['lab_registry']} ({up}), standing for "
            f"{c['registry']}; images pushed and pulled with skopeo",
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
