"""Synthetic reference clouds for the benchmarks (built in memory from the input schemas)."""

from __future__ import annotations

from pathlib import Path
from types import MappingProxyType
from typing import Any

from stepwise.model.catalog import Catalog, service_from_spec
from stepwise.model.catalog_checks import check_catalog
from stepwise.model.deployment import Deployment, build_deployment
from stepwise.model.facts import Facts, NodeFacts, PackageFact
from stepwise.model.specs import DeploymentSpec, ServiceSpec


def _t(cmd: str) -> dict[str, Any]:
    return {"name": cmd, "ansible.builtin.command": cmd}


def _svc(
    name: str,
    plane: str,
    deps=(),
    rule=None,
    rolling=True,
    cluster=None,
    rpc=None,
    leave=False,
    migrate=False,
    durations=None,
    schema: str | None = None,
) -> dict[str, Any]:
    steps = {
        "stop": [_t(f"systemctl stop {name}")],
        "start": [_t(f"systemctl start {name}")],
        "config": [_t(f"os-apply-config --service {name}")],
        "verify": [_t(f"healthcheck {name}")],
    }
    if leave:
        steps["leave"] = [_t(f"leave {name}")]
        steps["rejoin"] = [_t(f"rejoin {name}")]
    up = dict(steps)
    if migrate and schema is None:
        up["migrate"] = [_t(f"{name}-manage db sync")]
    if rpc:
        up["pin"] = [_t("pin")]
        up["unpin"] = [_t("unpin")]
    spec = {
        "name": name,
        "plane": plane,
        "packages": [f"openstack-{name}"],
        "depends_on": list(deps),
        "rolling": rolling,
        "update": steps,
        "upgrade": up,
        "durations": durations or {},
    }
    if rule:
        spec["availability"] = rule
    if schema == "expand_contract":  # upstream's rolling upgrade: no downtime window
        spec["schema"] = {
            "strategy": schema,
            "expand": [_t(f"{name}-manage db expand")],
            "migrate": [_t(f"{name}-manage db migrate")],
            "contract": [_t(f"{name}-manage db contract")],
        }
    if cluster:
        spec["cluster"] = cluster
    if rpc:
        spec["rpc"] = rpc
    return spec


def _catalog(specs: list[dict[str, Any]]) -> Catalog:
    services = {
        s["name"]: service_from_spec(ServiceSpec.model_validate(s), "<bench>") for s in specs
    }
    cat = Catalog(MappingProxyType(services), "<bench>")
    assert not check_catalog(cat)
    return cat


def deployment_of(specs: list[dict[str, Any]], dep: dict[str, Any]) -> Deployment:
    """A deployment built in memory (no files) from service specs and a deployment spec."""
    return build_deployment(DeploymentSpec.model_validate(dep), _catalog(specs))


def big_cloud_specs(
    nodes: int = 10_000, services: int = 60
) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """The service specs and the deployment spec of `big_cloud`, as plain input data: `services`
    services on a composed layout totalling `nodes` nodes: 10 infra, 30 control-plane (a third
    schema-sensitive), 20 data-plane across computes, networkers and storage."""
    assert services == 60
    infra = [
        _svc(f"infra{i}", "infra", rule={"quorum": "majority"}, cluster="pacemaker", leave=True)
        for i in range(10)
    ]
    control = [
        _svc(
            f"api{i}",
            "control",
            deps=(f"infra{i % 10}",),
            rule={"min_available": 2},
            rolling=i % 3 != 0,
            rpc=f"rpc{i % 5}",
            migrate=True,
        )
        for i in range(30)
    ]
    data = [
        _svc(
            f"agent{i}",
            "data",
            deps=(f"api{i % 30}",),
            rule={"max_unavailable": "10%"},
            rpc=f"rpc{i % 5}",
            leave=i % 4 == 0,
        )
        for i in range(20)
    ]
    compute = [f"agent{i}" for i in range(0, 8)]
    network = [f"agent{i}" for i in range(8, 14)]
    storage = [f"agent{i}" for i in range(14, 20)]
    fixed = 3 + 3 + 3 + 12
    storage_n = nodes // 10
    leaves = 4
    compute_n = nodes - fixed - storage_n
    roles = [
        {
            "name": "ControllerOpenstack",
            "tags": ["controlplane"],
            "services": [s["name"] for s in control],
            "nodes": {"count": 3, "name": "controller-{index}"},
        },
        {
            "name": "Database",
            "tags": ["controlplane"],
            "services": [f"infra{i}" for i in range(0, 5)],
            "nodes": {"count": 3, "name": "database-{index}"},
        },
        {
            "name": "Messaging",
            "tags": ["controlplane"],
            "services": [f"infra{i}" for i in range(5, 10)],
            "nodes": {"count": 3, "name": "messaging-{index}"},
        },
        {
            "name": "Networker",
            "update_serial": 2,
            "services": network,
            "nodes": {"count": 12, "name": "networker-{index}"},
        },
    ]
    for leaf in range(leaves):
        n = compute_n // leaves + (1 if leaf < compute_n % leaves else 0)
        roles.append(
            {
                "name": f"ComputeLeaf{leaf}",
                "update_serial": 25,
                "services": compute,
                "nodes": {"count": n, "name": f"compute-l{leaf}-{{index}}"},
            }
        )
    roles.append(
        {
            "name": "CephStorage",
            "update_serial": 10,
            "services": storage,
            "nodes": {"count": storage_n, "name": "ceph-{index}"},
        }
    )
    return infra + control + data, {"name": f"bench{nodes}", "roles": roles}


def big_cloud(nodes: int = 10_000, services: int = 60) -> Deployment:
    """`big_cloud_specs` built in memory (no files)."""
    return deployment_of(*big_cloud_specs(nodes, services))


def write_big_cloud(directory: Path, nodes: int = 10_000, services: int = 60) -> Path:
    """Write `big_cloud` as an operator would keep it: a deployment YAML (counted node
    templates, so it stays small) next to a catalog directory with one file per service.
    Returns the deployment file's path."""
    import yaml

    class _Plain(yaml.SafeDumper):
        # a service file is read by people: spell out shared task lists instead of &id001 anchors
        def ignore_aliases(self, data: Any) -> bool:
            return True

    specs, dep = big_cloud_specs(nodes, services)
    cat = directory / "catalog"
    cat.mkdir(parents=True, exist_ok=True)
    for spec in specs:
        (cat / f"{spec['name']}.yaml").write_text(
            yaml.dump(spec, Dumper=_Plain, sort_keys=False), encoding="utf-8"
        )
    path = directory / f"{dep['name']}.yaml"
    path.write_text(
        yaml.dump(
            {"name": dep["name"], "catalog": "catalog", "roles": dep["roles"]},
            Dumper=_Plain,
            sort_keys=False,
        ),
        encoding="utf-8",
    )
    return path


def reference_cloud() -> Deployment:
    """The 1,000-node reference cloud: the seed's composed control plane, four compute racks
    (spine-leaf, one role per rack as TripleO deploys them), two storage racks, networkers."""
    specs = [
        _svc("haproxy", "infra", rule={"quorum": "majority"}, leave=True),
        _svc("galera", "infra", rule={"quorum": "majority"}, cluster="galera", leave=True),
        _svc("rabbitmq", "infra", rule={"quorum": "majority"}, cluster="rabbitmq", leave=True),
        _svc("ceph_mon", "infra", rule={"quorum": "majority"}, cluster="ceph-mon"),
        _svc("keystone", "control", deps=("galera",), rule={"min_available": 2}, migrate=True),
        _svc("glance_api", "control", deps=("keystone",), schema="expand_contract", migrate=True),
        _svc(
            "nova_api",
            "control",
            deps=("keystone", "rabbitmq"),
            schema="expand_contract",
            rpc="nova",
            migrate=True,
        ),
        _svc(
            "nova_conductor",
            "control",
            deps=("keystone", "rabbitmq"),
            schema="expand_contract",
            rpc="nova",
            migrate=True,
        ),
        _svc(
            "neutron_server",
            "control",
            deps=("keystone", "rabbitmq"),
            schema="expand_contract",
            rpc="neutron",
            migrate=True,
        ),
        _svc(
            "cinder_api",
            "control",
            deps=("keystone",),
            schema="expand_contract",
            rpc="cinder",
            migrate=True,
        ),
        _svc(
            "nova_compute",
            "data",
            deps=("nova_conductor",),
            rule={"max_unavailable": "10%"},
            rpc="nova",
            leave=True,
            durations={"leave": 120.0},
        ),
        _svc("neutron_ovs_agent", "data", deps=("neutron_server",), rpc="neutron"),
        _svc(
            "neutron_l3_agent",
            "data",
            deps=("neutron_server",),
            rule={"min_available": 4},
            rpc="neutron",
            leave=True,
            durations={"leave": 30.0},
        ),
        _svc(
            "ceph_osd",
            "data",
            deps=("ceph_mon",),
            rule={"max_unavailable": "5%"},
            leave=True,
            durations={"verify": 180.0, "rejoin": 30.0},
        ),
    ]
    cat = _catalog(specs)
    ctrl = [
        "haproxy",
        "keystone",
        "glance_api",
        "nova_api",
        "nova_conductor",
        "neutron_server",
        "cinder_api",
        "ceph_mon",
    ]
    roles = [
        {
            "name": "ControllerOpenstack",
            "tags": ["controlplane"],
            "services": ctrl,
            "nodes": {"count": 3, "name": "controller-{index}"},
        },
        {
            "name": "Database",
            "tags": ["controlplane"],
            "services": ["galera"],
            "nodes": {"count": 3, "name": "database-{index}"},
        },
        {
            "name": "Messaging",
            "tags": ["controlplane"],
            "services": ["rabbitmq"],
            "nodes": {"count": 3, "name": "messaging-{index}"},
        },
        {
            "name": "Networker",
            "update_serial": 1,
            "services": ["neutron_ovs_agent", "neutron_l3_agent"],
            "nodes": {"count": 6, "name": "networker-{index}"},
        },
    ]
    for rack, n in enumerate((200, 200, 200, 200)):
        roles.append(
            {
                "name": f"ComputeRack{rack}",
                "update_serial": 20,
                "services": ["nova_compute", "neutron_ovs_agent"],
                "nodes": {"count": n, "name": f"compute-r{rack}-{{index}}"},
            }
        )
    for rack, n in enumerate((93, 92)):
        roles.append(
            {
                "name": f"CephRack{rack}",
                "update_serial": 5,
                "services": ["ceph_osd"],
                "nodes": {"count": n, "name": f"ceph-r{rack}-{{index}}"},
            }
        )
    return build_deployment(
        DeploymentSpec.model_validate({"name": "reference1000", "roles": roles}), cat
    )


def facts_with_kernel(dep: Deployment) -> Facts:
    """Facts where every service's packages and the kernel change on every node."""
    nodes = {}
    for n in dep.nodes:
        pkgs = {
            p: PackageFact("1.0.0", "2.0.0")
            for s in dep.services_on(n)
            for p in dep.catalog[s].packages
        }
        pkgs["kernel"] = PackageFact("4.18.0", "4.18.1")
        nodes[n.name] = NodeFacts(MappingProxyType(pkgs))
    return Facts(MappingProxyType(nodes), True, "<bench: everything and the kernel change>")


def chain_cloud_specs(
    nodes: int = 10_000, length: int = 4
) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """Service specs and the deployment spec of `chain_cloud`: services that depend on each
    other in chains of `length`, in the control plane (ctl0 <- ctl1 <- ... on the controllers,
    the first on the database) and in the data plane (agentA0 <- agentA1 <- ... on every
    compute, the first on the control chain's last; agentB0 <- ... on the storage nodes, the
    first on the networkers' agent), over a layout of `nodes` nodes like `big_cloud`'s."""
    assert length >= 1
    infra = [
        _svc("db", "infra", rule={"quorum": "majority"}, cluster="galera", leave=True),
        _svc("mq", "infra", rule={"quorum": "majority"}, cluster="rabbitmq", leave=True),
    ]
    ctl = [
        _svc(
            f"ctl{i}",
            "control",
            deps=("db", "mq") if i == 0 else (f"ctl{i - 1}",),
            rule={"min_available": 2},
            rolling=i % 4 != 1,  # some schema-sensitive links: an offline window in the chain
            rpc="rpc",
            migrate=True,
        )
        for i in range(length)
    ]
    last_ctl = f"ctl{length - 1}"
    compute = [
        _svc(
            f"agentA{i}",
            "data",
            deps=(last_ctl,) if i == 0 else (f"agentA{i - 1}",),
            rule={"max_unavailable": "10%"},
            rpc="rpc",
            leave=i == 0,
            durations={"leave": 60.0} if i == 0 else None,
        )
        for i in range(length)
    ]
    net = _svc("netagent", "data", deps=(last_ctl,), rule={"min_available": 4}, rpc="rpc")
    storage = [
        _svc(
            f"agentB{i}",
            "data",
            deps=("netagent",) if i == 0 else (f"agentB{i - 1}",),
            rule={"max_unavailable": "5%"},
            durations={"verify": 120.0} if i == length - 1 else None,
        )
        for i in range(length)
    ]
    storage_n = nodes // 10
    compute_n = nodes - 3 - 3 - 12 - storage_n
    roles: list[dict[str, Any]] = [
        {
            "name": "Controller",
            "tags": ["controlplane"],
            "services": [s["name"] for s in ctl],
            "nodes": {"count": 3, "name": "controller-{index}"},
        },
        {
            "name": "Database",
            "tags": ["controlplane"],
            "services": ["db", "mq"],
            "nodes": {"count": 3, "name": "database-{index}"},
        },
        {
            "name": "Networker",
            "update_serial": 2,
            "services": ["netagent", "agentA0"],
            "nodes": {"count": 12, "name": "networker-{index}"},
        },
    ]
    for leaf in range(4):
        n = compute_n // 4 + (1 if leaf < compute_n % 4 else 0)
        roles.append(
            {
                "name": f"ComputeLeaf{leaf}",
                "update_serial": 25,
                "services": [s["name"] for s in compute],
                "nodes": {"count": n, "name": f"compute-l{leaf}-{{index}}"},
            }
        )
    roles.append(
        {
            "name": "Storage",
            "update_serial": 10,
            "services": [s["name"] for s in storage],
            "nodes": {"count": storage_n, "name": "storage-{index}"},
        }
    )
    specs = infra + ctl + compute + [net] + storage
    return specs, {"name": f"chain{length}-{nodes}", "roles": roles}


def chain_cloud(nodes: int = 10_000, length: int = 4) -> Deployment:
    """`chain_cloud_specs` built in memory (no files)."""
    return deployment_of(*chain_cloud_specs(nodes, length))
