"""The facts file an operator fills in (`stepwise facts template`): per node the packages,
configuration hashes and (container nodes) image references of the services it runs, their
values left empty; a large cloud's in the shared form (docs/facts.md)."""

from __future__ import annotations

from typing import Any

from stepwise.model.choices import DeployStyle
from stepwise.model.containers import image_ref
from stepwise.model.deployment import Deployment
from stepwise.model.facts import DEFAULT_OS_MAJOR

#: the OS a template starts from: the major to fill in, no target (a target says that the
#: procedure changes the OS: a major upgrade's prestage then leaves the node out)
_OS = {"major": DEFAULT_OS_MAJOR, "target": None}


def _image_template(deployment: Deployment, node: str) -> dict:
    """A container node's image facts to fill in: each service's reference, digests empty."""
    role = deployment.role_of(node)
    if role.style is DeployStyle.PACKAGES or deployment.containers is None:
        return {}
    return {
        s: {
            "running": None,
            "target": None,
            "ref": image_ref(
                s, role.style, deployment.containers, image=deployment.catalog[s].image
            ),
        }
        for s in deployment.containerized(role)
    }


#: the most nodes a facts template lists with their packages each; a larger deployment's
#: template names them once in `defaults` (a 100,000-node per-node template was 80 MiB, five
#: times what the loader reads, and took minutes to write)
PER_NODE_TEMPLATE_NODES = 1000


def facts_template(deployment: Deployment, per_node: bool | None = None) -> dict:
    """A facts document to fill in for `deployment`: the OS shared by all nodes, and per node the
    packages of the services it runs, their versions left empty, the configuration hashes
    of those services, left empty too, and on a container node each service's image reference
    with its digests to fill in (docs/facts.md).

    `per_node` False (the default above PER_NODE_TEMPLATE_NODES nodes) writes the shared form:
    every package, configuration and image once in `defaults`, which every node reads, and each
    node an empty entry to override; its size grows by one short line per node."""
    if per_node is None:
        per_node = len(deployment.nodes) <= PER_NODE_TEMPLATE_NODES
    if not per_node:
        return _shared_template(deployment)
    nodes: dict[str, dict] = {}
    for node in deployment.nodes:
        packages = sorted(
            {p for s in deployment.services_on(node) for p in deployment.catalog[s].packages}
        )
        nodes[node.name] = {
            "packages": {p: {"installed": None, "available": None} for p in packages},
            "config": {
                s: {"current": None, "rendered": None} for s in deployment.services_on(node)
            },
        }
        images = _image_template(deployment, node.name)
        if images:
            nodes[node.name]["images"] = images
    return {
        "defaults": {"os": dict(_OS)},
        "nodes": nodes,
    }


def _shared_template(deployment: Deployment) -> dict:
    """The template with what nodes share in `defaults`: worked out per role (its nodes run the
    same services), so it is linear in the roles, plus one empty entry per node. An image whose
    reference differs between roles (two styles) stays on those roles' nodes."""
    packages: set[str] = set()
    services: set[str] = set()
    refs: dict[str, set[str]] = {}
    role_images: dict[str, dict] = {}
    for role in deployment.roles:
        if not role.nodes:
            continue
        images = _image_template(deployment, role.nodes[0].name)
        role_images[role.name] = images
        for s in deployment.services_on(role.nodes[0]):
            services.add(s)
            packages.update(deployment.catalog[s].packages)
        for s, fact in images.items():
            refs.setdefault(s, set()).add(fact["ref"])
    shared = {s for s, r in refs.items() if len(r) == 1}
    defaults: dict[str, Any] = {
        "os": dict(_OS),
        "packages": {p: {"installed": None, "available": None} for p in sorted(packages)},
        "config": {s: {"current": None, "rendered": None} for s in sorted(services)},
    }
    images_shared = {s: f for imgs in role_images.values() for s, f in imgs.items() if s in shared}
    if images_shared:
        defaults["images"] = dict(sorted(images_shared.items()))
    nodes: dict[str, dict] = {}
    for role in deployment.roles:
        own = {s: f for s, f in role_images.get(role.name, {}).items() if s not in shared}
        for node in role.nodes:
            nodes[node.name] = {"images": own} if own else {}
    return {"defaults": defaults, "nodes": nodes}
