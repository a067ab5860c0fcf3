"""What a lab is, as `lab.json` holds it: its nodes, services, VIPs, workloads, routers,
repositories and containers, as frozen values (`LabSpec`), validated when read.

`lab.json` is written once, by `lab up` (`stepwise.lab.spec.build_spec` derives it from the
deployment), and read by every process of the lab: the supervisor, each unit, each node
command, `lab status`. The directory comes from the command line, so the file is input: it is
read into these values field by field, and a missing or mistyped field is refused with the
file and the field's path instead of surfacing later as a KeyError in a node command.

The conversion is generic over the dataclasses' own type hints (no model import, no
pydantic: a node command reads this file on every call and must start fast).
"""

from __future__ import annotations

import dataclasses
import functools
import json
import types
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

#: the kind a service runs as when nothing real can run it (stepwise.lab.kinds)
STAND_IN = "stand_in"


@dataclass(frozen=True)
class LabNode:
    """A node: its loopback address, role, index in its role, and the services placed on it."""

    address: str
    role: str
    index: int
    services: tuple[str, ...]
    #: the management node's tool and content: packages of their own
    tool_packages: tuple[str, ...] = ()


@dataclass(frozen=True)
class LabService:
    """A placed service as the lab runs it: which kind of process (`kind`, a registered lab
    service kind: stepwise.lab.kinds), on which port, with the catalog's traits its health
    and the node commands need."""

    kind: str
    plane: str
    #: the name `systemctl` knows it by on the node (its package's unit)
    unit: str
    packages: tuple[str, ...]
    cluster: str | None
    #: members on two OS majors cannot form a cluster (as the catalog declares it)
    os_bound: bool
    rpc: str | None
    port: int
    db_port: int | None
    #: it answers HTTP (its health check), so it has a VIP
    http: bool
    #: its backend in the load balancer, named as the catalog's drain names it
    frontend: str
    health_path: str
    project: str
    #: it checks its project's schema at start (a stand-in owning or reading a schema)
    schema: bool
    expand_contract: bool
    instances: tuple[str, ...]
    bootstrap: str
    #: its nodes host the lab's workloads (the stand-in hypervisor agent)
    workloads: bool = False
    stop_timeout: float | None = None
    start_timeout: float | None = None
    #: how its RPC group's old and new code keep talking (the catalog's `rpc_mixing`)
    rpc_mixing: str = "pinned"

    @property
    def database(self) -> bool:
        """The cloud's SQL database (a real Galera member on each of its nodes)."""
        return self.kind == "galera"

    @property
    def real_openstack(self) -> bool:
        """Real OpenStack code from PyPI (an API under uWSGI, or a console process)."""
        return self.kind in ("openstack_api", "openstack_process")


@dataclass(frozen=True)
class Vip:
    """A load-balanced frontend: HAProxy's address and port for one service."""

    address: str
    port: int


@dataclass(frozen=True)
class Workload:
    """A stand-in instance: it answers HTTP on its own address while its compute runs it."""

    address: str
    port: int
    home: str


@dataclass(frozen=True)
class Router:
    """A stand-in L3 HA router: a workload's floating IP, hosted by the L3 agents' nodes."""

    fip: str
    port: int
    workload: str
    hosts: tuple[str, ...]
    master: str


@dataclass(frozen=True)
class RealOpenStack:
    """The deployment's `lab: {openstack: SERIES}`: which services run real code."""

    series: str
    cloud: str
    services: tuple[str, ...] = ()
    #: the clouds.yaml the client probe uses (default: `<lab dir>/clouds.yaml`, which `lab
    #: up` writes; a test's own cloud gives its own)
    clouds_yaml: str | None = None
    #: seconds between the client probe's rounds (default: the probe's own)
    client_interval: float | None = None


@dataclass(frozen=True)
class ContainerService:
    """A containerized service's image name part, style, systemd unit and (for real code)
    the series whose venv its image carries."""

    image: str
    style: str
    unit: str
    series: str | None


@dataclass(frozen=True)
class ContainerLayout:
    """The registry, the namespaces and each container-style role's and service's image."""

    registry: str
    namespace: str
    name_suffix: str
    tag: str
    upgrade_namespace: str
    lab_registry: str
    roles: dict[str, str]
    services: dict[str, ContainerService]


@dataclass(frozen=True)
class LabSpec:
    """A whole lab (`lab.json`)."""

    name: str
    dir: str
    index: int
    deployment: str
    python: str
    vip: str
    vips: dict[str, Vip]
    db_service: str | None
    nodes: dict[str, LabNode]
    services: dict[str, LabService]
    workloads: dict[str, Workload]
    routers: dict[str, Router]
    #: repository -> package -> version (stepwise.lab.repos)
    repos: dict[str, dict[str, str]]
    projects: tuple[str, ...]
    openstack: RealOpenStack | None
    containers: ContainerLayout | None
    stop_timeout: float = 3.0
    start_delay: float = 0.4
    reboot_packages: tuple[str, ...] = ("kernel", "kernel-core")
    #: extra keys a later stepwise may add (kept, never read)
    extra: dict[str, Any] = field(default_factory=dict, compare=False)

    def to_json(self) -> dict[str, Any]:
        """The JSON form written to `lab.json`."""
        out = _to_json(self)
        out.pop("extra")
        return out

    def real_services(self) -> tuple[str, ...]:
        """The services that run real OpenStack code."""
        return self.openstack.services if self.openstack else ()


class SpecError(ValueError):
    """`lab.json` does not hold a lab: `field` is the path of what is wrong."""

    def __init__(self, message: str, field: str | None = None):
        super().__init__(message)
        self.field = field


def read_spec(path: Path) -> LabSpec:
    """`lab.json` at `path` as a `LabSpec`; SpecError naming the field otherwise."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError, RecursionError) as exc:
        raise SpecError(f"not a lab's description: {exc}") from None
    return spec_from_json(data)


def spec_from_json(data: Any) -> LabSpec:
    """A `LabSpec` from the JSON form; SpecError naming the field when it is not one."""
    if not isinstance(data, dict):
        raise SpecError(f"not a lab's description: a JSON {type(data).__name__}, not a mapping")
    known = {f.name for f in dataclasses.fields(LabSpec)}
    extra = {k: v for k, v in data.items() if k not in known}
    return _from_json(LabSpec, {**data, "extra": extra}, "")


def _to_json(value: Any) -> Any:
    if dataclasses.is_dataclass(value):
        return {f.name: _to_json(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, dict):
        return {k: _to_json(v) for k, v in value.items()}
    if isinstance(value, tuple | list):
        return [_to_json(v) for v in value]
    return value


@functools.cache
def _hints(cls: type) -> dict[str, Any]:
    return typing.get_type_hints(cls)


def _from_json(tp: Any, value: Any, where: str) -> Any:
    """`value` converted to type `tp` (a dataclass, a mapping, a tuple, a scalar, an optional
    of one of them), or SpecError at `where`."""
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if tp is Any:
        return value
    if origin in (typing.Union, types.UnionType):
        if value is None and type(None) in args:
            return None
        (inner,) = [a for a in args if a is not type(None)]
        return _from_json(inner, value, where)
    if dataclasses.is_dataclass(tp):
        return _dataclass(tp, value, where)
    if origin is dict:
        if not isinstance(value, dict):
            raise SpecError(f"{where or 'lab.json'}: not a mapping", where)
        return {k: _from_json(args[1], v, f"{where}.{k}".lstrip(".")) for k, v in value.items()}
    if origin is tuple:
        if not isinstance(value, list | tuple):
            raise SpecError(f"{where}: not a list", where)
        return tuple(_from_json(args[0], v, f"{where}[{i}]") for i, v in enumerate(value))
    return _scalar(tp, value, where)


def _dataclass(tp: type, value: Any, where: str) -> Any:
    if not isinstance(value, dict):
        raise SpecError(f"{where or 'lab.json'}: not a mapping", where or None)
    kwargs = {}
    for f in dataclasses.fields(tp):
        path = f"{where}.{f.name}".lstrip(".")
        if f.name not in value:
            if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
                raise SpecError(f"{path}: missing", path)
            continue
        kwargs[f.name] = _from_json(_hints(tp)[f.name], value[f.name], path)
    return tp(**kwargs)


def _scalar(tp: Any, value: Any, where: str) -> Any:
    if tp is float and isinstance(value, int | float) and not isinstance(value, bool):
        return float(value)
    if tp is int and isinstance(value, bool):
        raise SpecError(f"{where}: {value!r} is not a number", where)
    if not isinstance(value, tp):
        raise SpecError(f"{where}: {value!r} is not a {tp.__name__}", where)
    return value
