"""Derive a lab from a deployment: which process emulates what, on which address and port.

Everything an emulated service does is derived from its catalog entry, so any catalog written
to the contract works: `plane`, `cluster` (quorum, leave/rejoin), `rpc` (versioned peers),
`health` (port and path), `packages` (its version), `rolling` (expand/contract schema) and
whether it has `migrate` tasks (it owns a DB schema).
"""

from __future__ import annotations

import re
import sys
from typing import Any

from stepwise.errors import InputError, Problem
from stepwise.lab import containers, routers
from stepwise.lab import repos as lab_repos
from stepwise.lab.labspec import STAND_IN, LabSpec, spec_from_json
from stepwise.lab.nodes import node_address, vip_address, workload_address
from stepwise.model import Deployment

DB_PORT = 3306
CLUSTERCHECK_PORT = 9200
WORKLOAD_PORT = 8080
#: systemd-like stop timeouts of the units that do real work when they stop
DB_STOP_TIMEOUT = 30.0
REAL_STOP_TIMEOUT = 30.0
#: how long `systemctl start` waits for a real RabbitMQ member to boot (and join its cluster)
REAL_START_TIMEOUT = 180.0
GALERA = "galera"
#: the kinds that run real OpenStack code (the services that need the database)
REAL_OPENSTACK = ("openstack_api", "openstack_process")


def _port(url: str | None) -> int | None:
    if not url:
        return None
    m = re.search(r":(\d+)(?:/|$)", url)
    return int(m.group(1)) if m else None


def _path(url: str | None) -> str:
    if not url:
        return "/healthcheck"
    m = re.match(r"^[a-z]+://[^/]+(/.*)?$", url)
    return (m.group(1) if m and m.group(1) else "/") if m else "/healthcheck"


def is_db_service(svc: Any) -> bool:
    """The service that is the cloud's SQL database (served by a real MariaDB)."""
    return svc.cluster == "galera" or any(p.startswith("mariadb") for p in svc.packages)


def project_of(name: str) -> str:
    return name.split("_")[0].split("-")[0]


def _has_migrate(svc: Any) -> bool:
    return any(steps.get("migrate") for steps in svc.tasks.values())


def _real_openstack(dep: Deployment, services: dict[str, Any]) -> dict[str, Any] | None:
    """Mark the services that run real OpenStack code (the deployment's `lab: {openstack:
    SERIES}`); their health checks are the real APIs' own unauthenticated paths."""
    from stepwise.lab.openstack import releases

    series = dep.lab.get("openstack")
    if not series:
        return None
    if series not in releases.SERIES:
        raise InputError(
            Problem(
                f"lab.openstack: the lab has no real OpenStack code for series {series!r}",
                file=dep.path,
                field="lab.openstack",
                hint=f"use one of {', '.join(releases.series_names())}, or remove it for stand-ins",
            )
        )
    rabbit = any(s.get("cluster") == "rabbitmq" for s in services.values())
    placed = [
        s
        for s in releases.series_services(series)
        if s in services
        and all(n in services for n in releases.SERVICES[s].needs)
        and (rabbit or not releases.SERVICES[s].messaging)
    ]
    for name in placed:
        # a real uWSGI finishes its requests before it exits: on 2 busy cores that can take
        # longer than the stand-ins' 3 s (systemd's own default is 90 s)
        services[name].update(
            # an API under uWSGI, or a console service (nova's conductor, scheduler, compute)
            # the unit runs as its child, health its own (stepwise/lab/openstack/process.py)
            kind="openstack_process" if releases.SERVICES[name].command else "openstack_api",
            schema=False,
            health_path=releases.SERVICES[name].health_path,
            stop_timeout=REAL_STOP_TIMEOUT,
            # the wrapper waits 90 s for uWSGI to answer; systemctl waited only 30 (a loaded
            # machine's keystone start "timed out" while it was still coming up)
            start_timeout=REAL_START_TIMEOUT,
        )
    from stepwise.lab import memcached, rabbitmq

    for name in rabbitmq.claim(services) + memcached.claim(services):
        # a member's graceful stop (and rabbit's boot and join) takes seconds on 2 busy cores
        services[name].update(stop_timeout=REAL_STOP_TIMEOUT, start_timeout=REAL_START_TIMEOUT)
    return {"series": series, "services": placed, "cloud": dep.name}


def build_spec(
    dep: Deployment, lab_dir: str, index: int, workloads_per_compute: int = 1
) -> LabSpec:
    """The whole `lab.json` of a new lab for `dep` (validated as a reader validates it)."""
    services, db_service = _lab_services(dep)
    real = _real_openstack(dep, services)
    needs_db = [n for n, s in services.items() if s["schema"] or s["kind"] in REAL_OPENSTACK]
    if needs_db and db_service is None:
        raise InputError(
            Problem(
                f"services {', '.join(needs_db)} own a DB schema but no database service "
                "(cluster: galera) is placed",
                file=dep.path,
                hint="place the galera service on a role; the lab runs a real MariaDB for it",
            )
        )
    # real nova's servers are the workloads of a compute running real nova-compute
    real_nova = services.get("nova_compute", {}).get("kind") in REAL_OPENSTACK
    compute = None if real_nova else _workload_host(services)
    if compute:
        services[compute]["workloads"] = True
    nodes = _lab_nodes(dep, index)
    workloads = _workloads(services, compute, index, workloads_per_compute)
    vip = vip_address(index)
    vips = {
        name: {"address": vip, "port": s["db_port"] if s["kind"] == GALERA else s["port"]}
        for name, s in services.items()
        if s["http"]
    }
    all_packages = sorted(
        {p for s in services.values() for p in s["packages"]}
        | set(lab_repos.BASE_PACKAGES)
        | {p for n in nodes.values() for p in n["tool_packages"]}
    )
    return spec_from_json(
        {
            "name": dep.name,
            "dir": lab_dir,
            "index": index,
            "deployment": dep.path,
            "python": sys.executable,
            "vip": vip,
            "vips": vips,
            "db_service": db_service,
            "nodes": nodes,
            "services": services,
            "workloads": workloads,
            # floating IPs of the workloads, on stand-in L3 HA routers (stepwise/lab/routers.py)
            "routers": routers.build(services, workloads, index),
            "repos": lab_repos.build_repos(all_packages),
            "projects": sorted({s["project"] for s in services.values() if s["schema"]}),
            "openstack": real,
            # container-style roles: the registry, each service's image and unit (lab/containers.py)
            "containers": containers.build(dep, index, services),
            "stop_timeout": 3.0,
            "start_delay": 0.8,
            "reboot_packages": list(dep.reboot_packages),
        }
    )


def _lab_services(dep: Deployment) -> tuple[dict[str, Any], str | None]:
    """Every placed service as the lab runs it, each on a port of its own (its health
    check's, else a spare one; the database's shared by its members), and the database
    service (the first placed, if any)."""
    cat = dep.catalog
    placed = [s for s in dep.instances]
    migrating_projects = {project_of(s) for s in placed if _has_migrate(cat[s])}
    services: dict[str, Any] = {}
    used_ports: set[int] = set()
    spare = 9100
    db_service = None
    for name in placed:
        svc = cat[name]
        health = dict(svc.health)
        db = is_db_service(svc)
        port = _port(health.get("http")) or _port(health.get("tcp"))
        if db:
            port = port or DB_PORT
            db_service = db_service or name
        if port is None or (port in used_ports and not db):
            while spare in used_ports:
                spare += 1
            port = spare
        used_ports.add(port)
        proj = project_of(name)
        schema = _has_migrate(svc) or (svc.plane == "control" and proj in migrating_projects)
        services[name] = _lab_service(dep, name, port, schema)
    return services, db_service


def _lab_service(dep: Deployment, name: str, port: int, schema: bool) -> dict[str, Any]:
    """One service's entry in `lab.json`: what its stand-in (or real code) needs to run and
    to fail the way the real one does."""
    svc = dep.catalog[name]
    health = dict(svc.health)
    db = is_db_service(svc)
    return {
        # a clean Galera shutdown leaves the group and flushes InnoDB: seconds on a loaded
        # machine (mariadb.service allows it minutes), where the stand-ins get 3 s
        **({"stop_timeout": DB_STOP_TIMEOUT} if db else {}),
        # what runs it in the lab (stepwise.lab.kinds): real code claims it later
        "kind": GALERA if db else STAND_IN,
        "plane": svc.plane,
        # the name `systemctl` knows it by on the node (its package's unit)
        "unit": svc.unit,
        "packages": list(svc.packages),
        "cluster": svc.cluster,
        # members on two OS majors cannot form a cluster (as the catalog declares it)
        "os_bound": bool(svc.cluster) and not svc.mixed_os,
        "rpc": svc.rpc,
        "rpc_mixing": str(svc.rpc_mixing),
        "port": CLUSTERCHECK_PORT if db else port,
        "db_port": port if db else None,
        "http": bool(health.get("http")) or db,
        # its backend in the load balancer, named as the catalog's drain names it
        "frontend": svc.frontend or name,
        "health_path": "/" if db else _path(health.get("http")),
        "project": project_of(name),
        "schema": schema and not db,
        "expand_contract": bool(svc.rolling),
        "instances": [n.name for n in dep.instances[name]],
        "bootstrap": dep.bootstrap_node(name).name,  # type: ignore[union-attr]
        "workloads": False,
    }


def _workload_host(services: dict[str, Any]) -> str | None:
    """The service whose nodes host the workloads: the hypervisor agent. An imported Compute
    role lists others with "compute" in their name first (ceilometer_agent_compute)."""
    return (
        "nova_compute"
        if services.get("nova_compute", {}).get("plane") == "data"
        else next((n for n, s in services.items() if s["plane"] == "data" and "compute" in n), None)
    )


def _lab_nodes(dep: Deployment, index: int) -> dict[str, Any]:
    """Every node with its own address in lab `index`, its role and services."""
    return {
        n.name: {
            "address": node_address(index, n.index),
            "role": n.role,
            "index": n.index,
            "services": list(dep.services_on(n)),
            # the management node's tool and content: packages of their own
            "tool_packages": list(dep.role_of(n.name).tool_packages),
        }
        for n in dep.nodes
    }


def _workloads(
    services: dict[str, Any], compute: str | None, index: int, per_compute: int
) -> dict[str, Any]:
    """`per_compute` workloads (stand-in VMs) on each node of the hypervisor service."""
    workloads = {}
    if compute:
        k = 0
        for host in services[compute]["instances"]:
            for _ in range(per_compute):
                workloads[f"vm-{k}"] = {
                    "address": workload_address(index, k),
                    "port": WORKLOAD_PORT,
                    "home": host,
                }
                k += 1
    return workloads
