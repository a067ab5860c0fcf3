"""Build small clouds in memory for planner tests (no files, so hypothesis stays fast)."""

from __future__ import annotations

from types import MappingProxyType
from typing import Any

from stepwise.model.catalog import Catalog, service_from_spec
from stepwise.model.catalog_checks import check_catalog
from stepwise.model.deployment import Deployment, build_deployment
from stepwise.model.facts import Facts, NodeFacts, PackageFact
from stepwise.model.specs import DeploymentSpec, ServiceSpec
from stepwise.plan.units import Plan


def task(cmd: str) -> dict[str, Any]:
    return {"name": cmd, "ansible.builtin.command": cmd}


def service(
    name: str,
    plane: str = "control",
    *,
    rolling: bool = True,
    deps: tuple[str, ...] = (),
    rule: dict | None = None,
    cluster: str | None = None,
    rpc: str | None = None,
    migrate: bool = False,
    leave: bool = False,
    health: bool = True,
    backup: bool = False,
    converge: bool = False,
    transfer: bool = False,
    durations: dict | None = None,
    schema: str | None = None,
) -> dict[str, Any]:
    steps: dict[str, list] = {
        "stop": [task(f"systemctl stop {name}")],
        "start": [task(f"systemctl start {name}")],
        "config": [task("os-apply-config")],
    }
    if leave:
        steps["leave"] = [task(f"pcs node standby # {name}")]
        steps["rejoin"] = [task(f"pcs node unstandby # {name}")]
    up = dict(steps)
    if migrate and schema is None:
        up["migrate"] = [task(f"{name}-manage db sync")]
    if rpc:
        up["pin"] = [task(f"crudini --set /etc/{name}.conf upgrade_levels {rpc} auto")]
        up["unpin"] = [task(f"crudini --del /etc/{name}.conf upgrade_levels {rpc}")]
    if backup:
        up["backup"] = [task("mysqldump")]
    spec: dict[str, Any] = {
        "name": name,
        "plane": plane,
        "packages": [f"pkg-{name}"],
        "depends_on": list(deps),
        "rolling": rolling,
        "update": steps,
        "upgrade": up,
    }
    if rule:
        spec["availability"] = rule
    if cluster:
        spec["cluster"] = cluster
    if rpc:
        spec["rpc"] = rpc
    if health:
        spec["health"] = {"command": f"systemctl is-active {name}"}
    if converge:
        spec["converge"] = [task(f"{name}-manage db online_data_migrations")]
    if transfer:
        spec["system_upgrade"] = {
            "transfer_data": [
                task(
                    "rsync -a --delete {{ system_upgrade_source }}:/var/lib/mysql/ /var/lib/mysql/"
                )
            ],
            "prepare": [task("leapp upgrade")],
        }
    if durations:
        spec["durations"] = durations
    if schema == "expand_contract":
        spec["schema"] = {
            "strategy": schema,
            "expand": [task(f"{name}-manage db expand")],
            "migrate": [task(f"{name}-manage db migrate")],
            "contract": [task(f"{name}-manage db contract")],
        }
    elif schema == "offline":
        spec["schema"] = {"strategy": schema, "migrate": [task(f"{name}-manage db sync")]}
    return spec


def catalog(*specs: dict[str, Any]) -> Catalog:
    services = {
        s["name"]: service_from_spec(ServiceSpec.model_validate(s), "<test>") for s in specs
    }
    cat = Catalog(MappingProxyType(dict(sorted(services.items()))), "<test>")
    problems = check_catalog(cat)
    assert not problems, problems
    return cat


def deployment(cat: Catalog, roles: list[dict[str, Any]], name: str = "test") -> Deployment:
    return build_deployment(DeploymentSpec.model_validate({"name": name, "roles": roles}), cat)


def facts(
    dep: Deployment, changes: dict[str, list[str]], os: dict[str, int] | None = None
) -> Facts:
    """Facts where exactly the listed packages change on the listed nodes."""
    nodes = {}
    for n in dep.nodes:
        pk = {
            p: PackageFact("1.0.0", "1.1.0" if p in changes.get(n.name, ()) else "1.0.0")
            for r in [dep.role_of(n)]
            for s in r.services
            for p in dep.catalog[s].packages
        }
        for p in changes.get(n.name, ()):
            pk.setdefault(p, PackageFact("1.0.0", "1.1.0"))
        major = (os or {}).get(n.name, 8)
        nodes[n.name] = NodeFacts(MappingProxyType(pk), major, 9)
    return Facts(MappingProxyType(nodes), True, "<test>")


def expand_contract_cloud() -> Deployment:
    """3 controllers: galera (quorum), glance (expand/contract schema), heat (offline schema)."""
    cat = catalog(
        service("galera", "infra", rule={"quorum": "majority"}, cluster="galera", leave=True),
        service(
            "glance",
            "control",
            deps=("galera",),
            rule={"min_available": 1},
            schema="expand_contract",
        ),
        service("heat", "control", deps=("galera",), schema="offline"),
    )
    return deployment(
        cat,
        [
            {
                "name": "Controller",
                "tags": ["controlplane"],
                "services": ["galera", "glance", "heat"],
                "nodes": {"count": 3, "name": "controller-{index}"},
            }
        ],
    )


def classic() -> Deployment:
    """3 controllers (galera/rabbit quorum, keystone rolling with expand/contract, nova_api
    schema-sensitive), 4 computes, 3 ceph storage nodes."""
    cat = catalog(
        service(
            "galera",
            "infra",
            rule={"quorum": "majority"},
            cluster="galera",
            leave=True,
            backup=True,
            transfer=True,
        ),
        service("rabbitmq", "infra", rule={"quorum": "majority"}, cluster="rabbitmq", leave=True),
        service("ceph_mon", "infra", rule={"quorum": "majority"}, cluster="ceph-mon"),
        service(
            "keystone",
            "control",
            deps=("galera",),
            rule={"min_available": 2},
            migrate=True,
            converge=True,
        ),
        service(
            "nova_api",
            "control",
            rolling=False,
            deps=("keystone", "rabbitmq"),
            rpc="nova",
            migrate=True,
        ),
        service(
            "nova_compute",
            "data",
            deps=("nova_api",),
            rule={"max_unavailable": "50%"},
            rpc="nova",
            leave=True,
        ),
        service(
            "ceph_osd",
            "data",
            deps=("ceph_mon",),
            rule={"max_unavailable": 1},
            leave=True,
            durations={"verify": 120},
        ),
    )
    return deployment(
        cat,
        [
            {
                "name": "Controller",
                "tags": ["controlplane"],
                "services": ["galera", "rabbitmq", "ceph_mon", "keystone", "nova_api"],
                "nodes": {"count": 3, "name": "controller-{index}"},
            },
            {
                "name": "Compute",
                "update_serial": 2,
                "services": ["nova_compute"],
                "nodes": {"count": 4, "name": "compute-{index}"},
            },
            {
                "name": "CephStorage",
                "update_serial": 2,
                "services": ["ceph_osd"],
                "nodes": {"count": 3, "name": "ceph-{index}"},
            },
        ],
    )


def cycles(plan: Plan) -> dict[tuple[str, str], tuple[int, int]]:
    """(service, node) -> (times stopped, times started)."""
    out: dict[tuple[str, str], list[int]] = {}
    for u in plan.units:
        for s, ns in u.stops.items():
            for n in ns:
                out.setdefault((s, n), [0, 0])[0] += 1
        for s, ns in u.starts.items():
            for n in ns:
                out.setdefault((s, n), [0, 0])[1] += 1
    return {k: (v[0], v[1]) for k, v in out.items()}


def visits_per_node(plan: Plan) -> dict[str, set[str]]:
    """node -> the batches (visits) that take some of its services out of service."""
    out: dict[str, set[str]] = {}
    for u in plan.units:
        for ns in u.stops.values():
            for n in ns:
                out.setdefault(n, set()).add(u.batch or u.id)
    return out


def max_down(plan: Plan) -> dict[str, int]:
    """Independent replay: the most instances of each service down at once (ends before starts
    at equal times, zero-length units handled by sweeping per instant)."""
    changes: list[tuple[float, int, str, str]] = []
    for u in plan.units:
        for s, ns in u.stops.items():
            for n in ns:
                changes.append((u.start_s, 1, s, n))
        for s, ns in u.starts.items():
            for n in ns:
                changes.append((u.end_s, 0, s, n))
    changes.sort()
    down: dict[str, set[str]] = {}
    worst: dict[str, int] = {}
    for _, kind, s, n in changes:
        d = down.setdefault(s, set())
        if kind:
            d.add(n)
        else:
            d.discard(n)
        worst[s] = max(worst.get(s, 0), len(d))
    return worst
