"""The kinds of unit a lab runs, real or stand-in, and the registry that finds them.

Every unit of a lab (a service on a node, a workload, a router) is of one kind, named in
`lab.json` (`LabService.kind`; workloads and routers by what they are). A kind says how such
a unit starts, answers its health, reloads, keeps its cluster's quorum, sits in the load
balancer and the probe, and what `lab status` says of it. Each kind is one module of this
package, named as the kind, which registers its class (`@register`); the registry imports a
kind's module the first time the kind is asked for, so a unit's process imports only its own
kind, and this module imports none of them (no circle: the kinds import the registry).

Adding a kind: a module here named as the kind, a subclass of `LabKind` registered with
`@register`, and the lab's spec (`stepwise/lab/spec.py`) naming it for the services it claims.
The defaults below are what most kinds share (a stand-in's description, an HTTP backend).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, ClassVar

if TYPE_CHECKING:
    from stepwise.lab.labspec import LabService, LabSpec
    from stepwise.lab.nodes import Lab
    from stepwise.lab.unit import Unit

#: what `lab status` says a unit is
REAL = "real"
STAND_IN = "stand-in"
#: the kinds of the units that are not services
WORKLOAD = "workload"
ROUTER = "router"


class LabKind:
    """What the lab needs of one kind of unit; every method has a stand-in's default."""

    #: the kind's name in lab.json and its module's name
    name: ClassVar[str] = ""
    #: real software (Debian's or PyPI's), not the lab's Python stand-in
    real: ClassVar[bool] = False
    #: a SIGHUP reloads it (a service: it re-reads its RPC pin); workloads and routers have none
    reloads: ClassVar[bool] = True
    #: how the probe and the load balancer check it: "http" (its health path) or "mysql"
    protocol: ClassVar[str] = "http"

    def start(self, unit: Unit) -> tuple[str, int, bool]:
        """Start the unit; the address and port its health answers on, and whether another
        unit may hold them at once (SO_REUSEPORT). Exits through `unit.fail` on a refusal; a
        kind whose own server answers on the unit's port (uWSGI) never returns."""
        raise NotImplementedError(self.name)

    def health(self, unit: Unit) -> tuple[bool, str]:
        """Whether the unit is healthy now, and why (its HTTP health answer)."""
        raise NotImplementedError(self.name)

    def reload(self, unit: Unit) -> None:
        """What a SIGHUP does beyond re-reading the RPC pin (a stand-in: nothing)."""

    def render_config(self, lab: Lab, node: str, service: str) -> bool:
        """Render what the service reads on this node when its kind has its own
        configuration (real code); False: the lab's stand-in configuration applies."""
        return False

    def quorum(self, lab: Lab, service: str) -> tuple[bool, str] | None:
        """Its cluster's quorum as the members report it, or None: the lab's own rule."""
        return None

    def describe(self, lab: Lab, node: str, service: str, published: dict | None) -> str:
        """What `lab status` says runs this service on this node."""
        return "lab stand-in (Python)"

    def components(self, lab: Lab, services: list[str], ask: bool) -> list[dict[str, str]]:
        """`lab status`'s lab-wide rows for this kind's `services` (`ask`: query clusters)."""
        return [
            {"name": ", ".join(services), "kind": STAND_IN, "detail": "the lab's Python stand-ins"}
        ]

    def backend(self, spec: LabSpec, service: LabService, check: str) -> list[str]:
        """HAProxy's lines for this service's `listen` section after its `bind` (`check`:
        the load balancer's health-check options of a server)."""
        lines = [
            f"    option httpchk GET {service.health_path}",
            # uWSGI closes every connection after its response without saying so (no
            # keep-alive): an idle server connection HAProxy kept for reuse can be closed
            # under a request sent on it, which the client sees as a 502
            "    option http-server-close",
        ]
        return lines + [
            f"    server {n} {spec.nodes[n].address}:{service.port} {check}"
            for n in service.instances
        ]


_KINDS: dict[str, LabKind] = {}


def register(cls: type[LabKind]) -> type[LabKind]:
    """Class decorator: make `cls` the kind named `cls.name`."""
    _KINDS[cls.name] = cls()
    return cls


def kind_named(name: str) -> LabKind:
    """The registered kind `name`, its module imported on first use; ValueError if no module
    of this package defines it."""
    if name not in _KINDS:
        if not name.isidentifier():
            raise ValueError(f"no lab service kind {name!r}")
        try:
            importlib.import_module(f"{__name__}.{name}")
        except ModuleNotFoundError:
            raise ValueError(f"no lab service kind {name!r}") from None
    if name not in _KINDS:
        raise ValueError(f"no lab service kind {name!r}")
    return _KINDS[name]


def kind_of(lab: Lab, unit: str) -> LabKind:
    """The kind of a lab unit: a router, a workload or a service (its `kind`)."""
    if unit in lab.spec.routers:
        return kind_named(ROUTER)
    if unit in lab.spec.workloads:
        return kind_named(WORKLOAD)
    return kind_named(lab.service(unit).kind)


def kinds_in(spec: LabSpec) -> dict[str, list[str]]:
    """kind name -> the lab's services of that kind, in lab.json's order."""
    out: dict[str, list[str]] = {}
    for name, svc in spec.services.items():
        out.setdefault(svc.kind, []).append(name)
    return out
