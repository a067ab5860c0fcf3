"""What changes where: from facts to the services each node must cycle (change-aware plans)."""

from __future__ import annotations

from dataclasses import dataclass

from stepwise.model.choices import DeployStyle
from stepwise.model.containers import image_ref
from stepwise.model.deployment import Deployment
from stepwise.model.facts import Facts


@dataclass(frozen=True, slots=True)
class NodeChange:
    """What an update/upgrade must do on one node."""

    node: str
    services: tuple[str, ...]  # services that must stop and start (deployment order)
    extra_packages: tuple[str, ...]  # changing packages no service on the node owns
    reboot: bool  # a reboot package (kernel) changes
    #: services whose packages do not change but whose rendered configuration does: they
    #: restart (config, stop, start) without a package step
    reconfigured: tuple[str, ...] = ()
    #: container styles: what moves, one `image REF RUNNING -> TARGET` per changing service
    images: tuple[str, ...] = ()

    @property
    def touched(self) -> bool:
        return bool(self.services or self.extra_packages or self.reboot or self.reconfigured)


def node_changes(
    deployment: Deployment, facts: Facts, *, config: bool = False
) -> dict[str, NodeChange]:
    """Per node: which of its services change, which unowned packages change, reboot or not,
    and (with `config`, the minor update) which services only restart for a changed
    configuration.

    Without facts every service changes and nothing reboots. A reboot is planned as the
    node's last visit (after all its services are upgraded), so it does not force the
    services' own visits.
    """
    catalog = deployment.catalog
    reboot_pkgs = set(deployment.reboot_packages)
    out: dict[str, NodeChange] = {}
    for role in deployment.roles:
        services = role.services
        owned = {p for s in services for p in catalog[s].packages}
        # in a container the image is the package: a service changes when its container's
        # digest is not the target's; on the host, when its packages do
        boxed = set(deployment.containerized(role))
        for node in role.nodes:
            if not facts.known:
                out[node.name] = NodeChange(node.name, services, (), False)
                continue
            changed_pkgs = set(facts.changed_packages(node.name))
            reboot = bool(changed_pkgs & reboot_pkgs)
            changing = tuple(
                s
                for s in services
                if (
                    facts.image_changes(node.name, s)
                    if s in boxed
                    else facts.changes(node.name, catalog[s].packages)
                )
            )
            images = tuple(_image_note(facts, node.name, s) for s in changing if s in boxed)
            extra = tuple(sorted(p for p in changed_pkgs if p not in owned))
            reconfigured = (
                tuple(
                    s for s in services if s not in changing and facts.config_changes(node.name, s)
                )
                if config
                else ()
            )
            out[node.name] = NodeChange(node.name, changing, extra, reboot, reconfigured, images)
    return out


def _image_note(facts: Facts, node: str, service: str) -> str:
    """What a batch's why says of a changing container service."""
    fact = facts.image(node, service)
    return fact.describe() if fact is not None else f"image of {service}: no facts"


def dependency_levels(deployment: Deployment, services: set[str]) -> dict[str, int]:
    """Level of each service among `services`: 0 when none of its depends_on is in the set,
    else one more than its deepest dependency in the set. Equal levels may run together;
    a level starts only after the lower ones are done everywhere (catalog has no cycles)."""
    catalog = deployment.catalog
    levels: dict[str, int] = {}

    def level(name: str, trail: tuple[str, ...] = ()) -> int:
        if name in levels:
            return levels[name]
        deps = [d for d in catalog[name].depends_on if d in services and d not in trail]
        value = 0 if not deps else 1 + max(level(d, trail + (name,)) for d in deps)
        levels[name] = value
        return value

    for s in sorted(services):
        level(s)
    return levels


def image_params(
    deployment: Deployment, facts: Facts, namespace: str | None = None
) -> dict[str, dict]:
    """node -> service -> {ref, target} for the container nodes: what their switch and prestage
    tasks read (`stepwise_images`). The reference is the model's, in `namespace` when given (a
    major upgrade's target release); the target digest is the facts' when discover asked about
    that same reference, else empty, which the prestage's digest check refuses (a digest of
    another reference must never be switched to)."""
    containers = deployment.containers
    out: dict[str, dict] = {}
    if containers is None:
        return out
    for role in deployment.roles:
        if role.style is DeployStyle.PACKAGES:
            continue
        for node in role.nodes:
            entry = {}
            for s in deployment.containerized(role):  # a host-level service has no image
                ref = image_ref(
                    s,
                    role.style,
                    containers,
                    image=deployment.catalog[s].image,
                    namespace=namespace,
                )
                fact = facts.image(node.name, s)
                same = fact is not None and fact.ref in (None, ref)
                entry[s] = {"ref": ref, "target": (fact.target if same else None) or ""}
            out[node.name] = entry
    return out
