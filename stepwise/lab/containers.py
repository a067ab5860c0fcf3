"""What a lab knows of a containerized deployment: the registry, each service's image and unit.

Names follow docs/containers contract (issue #23): the image of a service is the catalog's
`image:` or, tripleo, `openstack-` + the service with `_` -> `-`, kolla the service with `_` ->
`-`; the container is named after the service; its unit is `tripleo_<service>` or
`kolla-<service>-container`.

Until the model's `containers:` block (model/containers.py) lands, `settings` reads it from the
deployment's `vars.containers` (or defaults): the one function to switch to
`dep.containers`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from stepwise.lab.nodes import lab_address

if TYPE_CHECKING:
    from stepwise.model import Deployment

# The model is imported only where a lab is built (`settings`, `build`, `unit_name`): node
# commands and service processes import this module and must start without it (~0.4 s each).
DEFAULT_REGISTRY = "127.0.0.1:8787"
#: the lab's registry sits on this address of the lab's own 127.L.0.0/16 (the VIP is .0.1)
REGISTRY_FOURTH = 2
#: tag -> which lab release version it carries (lab/repos.py: R1, R1-updates, R2)
DEPLOYED_TAG = "1.0.0"


def settings(dep: Deployment) -> dict[str, Any]:
    """The deployment's `containers:` settings with the contract's defaults (the deployment's
    first container style decides the name prefix's default)."""
    from stepwise.model.vocab import DeployStyle

    given = dict(getattr(dep, "containers", None) or dep.vars.get("containers") or {})
    style = next((r.style for r in dep.roles if r.style in container_styles()), dep.style)
    namespace = str(given.get("namespace", "tripleo" if style == DeployStyle.TRIPLEO else "kolla"))
    return {
        "registry": str(given.get("registry", DEFAULT_REGISTRY)),
        "namespace": namespace,
        "name_prefix": str(
            given.get("name_prefix", "openstack-" if style == DeployStyle.TRIPLEO else "")
        ),
        "name_suffix": str(given.get("name_suffix", "")),
        "tag": str(given.get("tag", "current")),
        "upgrade_namespace": str(given.get("upgrade_namespace", f"{namespace}-next")),
    }


def image_name(service: str, catalog_image: str | None = None) -> str:
    """The image's base name (before prefix and suffix) of a service: the same rule in
    both styles (`_` -> `-`); the styles differ by their default prefix."""
    if catalog_image:
        return catalog_image
    return service.replace("_", "-")


def container_styles() -> tuple[str, ...]:
    """The container-style deployment styles."""
    from stepwise.model.vocab import DeployStyle

    return (DeployStyle.TRIPLEO, DeployStyle.KOLLA)


def unit_name(style: str, service: str) -> str:
    """The systemd unit that runs a service's container."""
    from stepwise.model.vocab import DeployStyle

    if style == DeployStyle.KOLLA:
        return f"kolla-{service}-container"
    return f"tripleo_{service}"


def build(dep: Deployment, index: int, services: dict[str, Any]) -> dict[str, Any] | None:
    """The `containers` part of lab.json: None when no role is container-style. The database
    service stays the real Galera (its container holds no MariaDB), real OpenStack code stays
    in its venvs: both keep their package version source."""
    styled = {r.name: str(r.style) for r in dep.roles if r.style in container_styles()}
    if not styled:
        return None
    cfg = settings(dep)
    images: dict[str, Any] = {}
    for role in dep.roles:
        if role.name not in styled:
            continue
        for s in role.services:
            lab_svc = services.get(s)
            if lab_svc is None or lab_svc["db"] or lab_svc.get("real") or s in images:
                continue
            entry = dep.catalog[s]
            name = cfg["name_prefix"] + image_name(s, getattr(entry, "image", None))
            images[s] = {
                "image": name + cfg["name_suffix"],
                "style": styled[role.name],
                "unit": unit_name(styled[role.name], s),
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


def ref(lab_spec: dict[str, Any], service: str, tag: str, namespace: str | None = None) -> str:
    """The full reference of a service's image as the deployment names it."""
    c = lab_spec["containers"]
    return f"{c['registry']}/{namespace or c['namespace']}/{c['services'][service]['image']}:{tag}"


def node_style(lab_spec: dict[str, Any], node: str) -> str | None:
    """The container style of a node's role, None for a packages-style node."""
    c = lab_spec.get("containers")
    if not c:
        return None
    return c["roles"].get(lab_spec["nodes"][node]["role"])


def containerized(lab_spec: dict[str, Any], node: str, service: str) -> bool:
    """Whether a service runs from a container on this node."""
    return node_style(lab_spec, node) is not None and service in lab_spec["containers"]["services"]


def to_lab_registry(lab_spec: dict[str, Any], reference: str) -> str:
    """The deployment's registry in a reference replaced by the lab's own address, as a
    registries.conf mirror does on a node (several labs cannot all listen on 127.0.0.1:8787)."""
    c = lab_spec["containers"]
    if reference.startswith(c["registry"] + "/"):
        return c["lab_registry"] + reference[len(c["registry"]) :]
    return reference


def from_lab_registry(lab_spec: dict[str, Any], reference: str) -> str:
    """The inverse of `to_lab_registry`: a name as the deployment's registry gives it."""
    c = lab_spec["containers"]
    if reference.startswith(c["lab_registry"] + "/"):
        return c["registry"] + reference[len(c["lab_registry"]) :]
    return reference
