"""What changes where: from facts to the services each node must cycle (change-aware plans)."""

from __future__ import annotations

from dataclasses import dataclass

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
        for node in role.nodes:
            if not facts.known:
                out[node.name] = NodeChange(node.name, services, (), False)
                continue
            changed_pkgs = set(facts.changed_packages(node.name))
            reboot = bool(changed_pkgs & reboot_pkgs)
            changing = tuple(s for s in services if facts.changes(node.name, catalog[s].packages))
            extra = tuple(sorted(p for p in changed_pkgs if p not in owned))
            reconfigured = (
                tuple(
                    s for s in services if s not in changing and facts.config_changes(node.name, s)
                )
                if config
                else ()
            )
            out[node.name] = NodeChange(node.name, changing, extra, reboot, reconfigured)
    return out


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
