"""A Galera member: Debian's MariaDB with galera-4, run by the unit as its child
(stepwise/lab/galera.py starts, bootstraps or joins it); its health is clustercheck's."""

from __future__ import annotations

from typing import TYPE_CHECKING

from stepwise.lab import galera, mariadb
from stepwise.lab.kinds import REAL, LabKind, register
from stepwise.lab.unit import Unit, fail

if TYPE_CHECKING:
    from stepwise.lab.labspec import LabService, LabSpec
    from stepwise.lab.nodes import Lab


@register
class GaleraMember(LabKind):
    """The cloud's SQL database, one real member per node."""

    name = "galera"
    real = True
    protocol = "mysql"

    def start(self, unit: Unit) -> tuple[str, int, bool]:
        """mysqld_safe-like: check the datadir format, then bootstrap or join the cluster."""
        lab, node, name = unit.lab, unit.node, unit.name
        svc = lab.service(name)
        pkgs = lab.read_state(node, "packages.json", {}) or {}
        unit.version = pkgs.get(svc.packages[0], {}).get("version", "") if svc.packages else ""
        unit.major = 1
        try:
            unit.child = galera.start(
                lab,
                node,
                name,
                mariadb.installed_format(pkgs),
                on_spawn=lambda child: setattr(unit, "child", child),
            )
        except galera.StartError as exc:
            fail(str(exc))
        return lab.node(node).address, svc.port, False

    def health(self, unit: Unit) -> tuple[bool, str]:
        # The clustercheck of a Galera node: the local member is Synced in a primary component.
        if not unit.child_running():
            return False, "mariadbd not running"
        return galera.clustercheck(unit.lab.node_root(unit.node))

    def quorum(self, lab: Lab, service: str) -> tuple[bool, str]:
        return galera.quorum(lab, service)  # what its members report

    def describe(self, lab: Lab, node: str, service: str, published: dict | None) -> str:
        return f"Galera member ({galera.versions()})"

    def components(self, lab: Lab, services: list[str], ask: bool) -> list[dict[str, str]]:
        detail = f"a Galera cluster ({galera.versions()}, Debian's packages)"
        return [{"name": s, "kind": REAL, "detail": detail} for s in services]

    def backend(self, spec: LabSpec, service: LabService, check: str) -> list[str]:
        # one member at a time takes the traffic (the others are backups), as TripleO's
        # HAProxy sends Galera's: checked through each member's clustercheck port
        return ["    mode tcp", "    option httpchk GET /"] + [
            f"    server {n} {spec.nodes[n].address}:{service.db_port} {check} port "
            f"{service.port}" + (" backup" if i else "")
            for i, n in enumerate(service.instances)
        ]
