"""What a lab knows of a containerized deployment: the registry, each service's image and unit.

The names are the model's (stepwise/model/containers.py: image reference, container, unit), so
a rehearsal and a real node agree on them; they are written into `lab.json` when the lab is
built, so node commands and service processes read them without importing the model.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from stepwise.lab.nodes import lab_address

if TYPE_CHECKING:
    from stepwise.lab.labspec import LabSpec
    from stepwise.model import Deployment

# The model is imported only where a lab is built (`settings`, `build`): node commands and
# service processes import this module and must start without it (~0.4 s each).
#: the lab's registry sits on this address of the lab's own 127.L.0.0/16 (the VIP is .0.1)
REGISTRY_FOURTH = 2
#: tag -> which lab release version it carries (lab/repos.py: R1, R1-updates, R2)
DEPLOYED_TAG = "1.0.0"


def settings(dep: Deployment) -> dict[str, Any]:
    """The deployment's `containers:` (model/containers.py), with the lab's defaults where the
    model leaves one open: the upgrade namespace (`{namespace}-next`)."""
    c = dep.containers
    if c is None:  # the model requires it for a container-style role; kept for safety
        raise ValueError("a container-style deployment without containers:")
    return {
        "registry": c.registry,
        "namespace": c.namespace,
        "name_suffix": c.name_suffix,
        "tag": c.tag,
        "upgrade_namespace": c.upgrade_namespace or f"{c.namespace}-next",
    }


def container_styles() -> frozenset[str]:
    """The container-style deployment styles."""
    from stepwise.model.containers import CONTAINER_STYLES

    return CONTAINER_STYLES


def build(dep: Deployment, index: int, services: dict[str, Any]) -> dict[str, Any] | None:
    """The `containers` part of lab.json: None when no role is container-style. The database
    service stays the real Galera (its container holds no MariaDB: it keeps its package
    version source); a real OpenStack service's image carries its release's venv (`series`)."""
    styled = {r.name: str(r.style) for r in dep.roles if r.style in container_styles()}
    if not styled:
        return None
    from stepwise.model import containers as model_containers

    cfg = settings(dep)
    series = dep.lab.get("openstack")
    images: dict[str, Any] = {}
    for role in dep.roles:
        if role.name not in styled:
            continue
        for s in dep.containerized(role):  # not what the style runs on the host (pacemaker)
            lab_svc = services.get(s)
            if lab_svc is None or lab_svc["kind"] == "galera" or s in images:
                continue
            ref = model_containers.image_ref(
                s, role.style, dep.containers, image=dep.catalog[s].image
            )
            images[s] = {
                # the reference's name part: {prefix}{image}{suffix}
                "image": ref.rsplit("/", 1)[1].rsplit(":", 1)[0],
                "style": styled[role.name],
                "unit": model_containers.unit_name(s, role.style),
                "series": series if lab_svc["kind"].startswith("openstack_") else None,
            }
    return {
        **cfg,
        "lab_registry": f"{lab_address(index, 0, REGISTRY_FOURTH)}:{_port(cfg['registry'])}",
        "roles": styled,
        "services": images,
    }


def _port(registry: str) -> int:
    _host, _, port = registry.rpartition(":")
    return int(port) if port.isdigit() else 5000


def ref(lab_spec: LabSpec, service: str, tag: str, namespace: str | None = None) -> str:
    """The full reference of a service's image as the deployment names it."""
    c = lab_spec.containers
    return f"{c.registry}/{namespace or c.namespace}/{c.services[service].image}:{tag}"


def node_style(lab_spec: LabSpec, node: str) -> str | None:
    """The container style of a node's role, None for a packages-style node."""
    c = lab_spec.containers
    if not c:
        return None
    return c.roles.get(lab_spec.nodes[node].role)


def containerized(lab_spec: LabSpec, node: str, service: str) -> bool:
    """Whether a service runs from a container on this node."""
    return node_style(lab_spec, node) is not None and service in lab_spec.containers.services


def to_lab_registry(lab_spec: LabSpec, reference: str) -> str:
    """The deployment's registry in a reference replaced by the lab's own address, as a
    registries.conf mirror does on a node (several labs cannot all listen on 127.0.0.1:8787)."""
    c = lab_spec.containers
    if reference.startswith(c.registry + "/"):
        return c.lab_registry + reference[len(c.registry) :]
    return reference


def from_lab_registry(lab_spec: LabSpec, reference: str) -> str:
    """The inverse of `to_lab_registry`: a name as the deployment's registry gives it."""
    c = lab_spec.containers
    if reference.startswith(c.lab_registry + "/"):
        return c.registry + reference[len(c.lab_registry) :]
    return reference
