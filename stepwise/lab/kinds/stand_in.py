"""The stand-in: a Python process that is the service for the lab (no real code runs it).

It reads its installed version and configuration at start and refuses a configuration
rendered for another release or a schema older than its code (it exits, the supervisor
restarts it: the restart loop an operator sees); its health is the lab's rules (schema,
quorum, RPC peers: stepwise.lab.health). Real infrastructure kinds run these same checks
before they start their server (`check_installed`).
"""

from __future__ import annotations

import time

from stepwise.lab import containers, corosync, podman, repos
from stepwise.lab import health as lab_health
from stepwise.lab.kinds import LabKind, register
from stepwise.lab.unit import Unit, fail, read_config


def check_installed(unit: Unit) -> None:
    """What a packaged service's start checks: its package (or container) is there, its
    configuration is for the installed release, its schema is not older than its code. Sets
    the unit's version and major and reads its RPC pin; exits through `fail` otherwise."""
    lab, node, name = unit.lab, unit.node, unit.name
    svc = lab.service(name)
    pkgs = lab.read_state(node, "packages.json", {}) or {}
    main = svc.packages[0] if svc.packages else None
    if containers.containerized(lab.spec, node, name):
        # the runtime stand-in: the service runs the version its container's image holds
        unit.version = podman.container_version(lab, node, name) or ""
        if not unit.version:
            fail(f"{name}: no such container, or its image is not in the node's store")
        main = None
    elif main and main not in pkgs:
        fail(f"{name}: package {main} is not installed")
    else:
        unit.version = pkgs[main]["version"] if main else "1.0.0"
    # An OS-shipped package (e.g. mariadb) has no OpenStack release: it never needs new config.
    unit.major = 1 if main in repos.SYSTEM_PACKAGES else repos.major(unit.version)
    time.sleep(lab.spec.start_delay)
    want = read_config(lab, node, name).get("DEFAULT", "config_for", fallback="")
    if want != f"R{repos.major(unit.version)}" and main not in repos.SYSTEM_PACKAGES:
        fail(
            f"{name} {unit.version}: configuration is for '{want or 'nothing'}', "
            f"not R{repos.major(unit.version)}: unknown options / missing required options "
            "(apply the configuration of the new version)"
        )
    if svc.schema:
        v = lab_health.schema_version(lab, svc.project, ttl=0)
        if v is None:
            fail(f"{name}: cannot reach the database")
        if v < unit.major:
            fail(
                f"{name} {unit.version}: database schema version {v} is older than this code "
                f"({unit.major}); run '{svc.project}-manage db sync'"
            )
    unit.read_pin()


@register
class StandIn(LabKind):
    """A service the lab imitates in Python."""

    name = "stand_in"

    def start(self, unit: Unit) -> tuple[str, int, bool]:
        check_installed(unit)
        lab = unit.lab
        if lab.service(unit.name).cluster in corosync.KINDS:
            why = corosync.cannot_start(lab, unit.node, unit.name)
            if why:
                fail(why)
        return lab.node(unit.node).address, lab.service(unit.name).port, False

    def health(self, unit: Unit) -> tuple[bool, str]:
        return lab_health.service_health(unit.lab, unit.name, unit.major)


class PackagedServer(LabKind):
    """A real server (Debian's) that a packaged service's unit runs as its child, after the
    checks a stand-in makes at its start (its package, its configuration's release)."""

    real = True

    def run(self, unit: Unit) -> None:
        """Start the server as `unit.child`; exits through `fail` when it cannot."""
        raise NotImplementedError(self.name)

    def start(self, unit: Unit) -> tuple[str, int, bool]:
        check_installed(unit)
        self.run(unit)
        return unit.lab.node(unit.node).address, unit.lab.service(unit.name).port, False
