"""Node visits: what one pass over a node is (`Visit`, its `VisitStep`s) and how it is made:
which step runs which services' tasks on the node, and for how long."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import lru_cache
from types import MappingProxyType
from typing import Any

from stepwise.model.catalog import node_step_seconds
from stepwise.model.choices import DeployStyle
from stepwise.model.deployment import Deployment
from stepwise.model.vocab import VISIT_STEPS, Section, Step


@dataclass(frozen=True, slots=True)
class VisitStep:
    """One step of a visit: the services with work in it on this node, and its time."""

    step: Step
    services: tuple[str, ...]  # services with work in this step on this node
    seconds: float  # estimated time of the step on this node
    extra: tuple[str, ...] = ()  # unowned packages (packages step only)
    tags: tuple[str, ...] = ()  # what --tags matches, beyond stage and step (first one: the stage)
    #: what the step's tasks read besides the node's services (the same on every node of a
    #: batch: a join's forming node)
    vars: Mapping[str, Any] = field(
        default_factory=lambda: MappingProxyType({}), hash=False, compare=False
    )


@dataclass(frozen=True, slots=True)
class Visit:
    """One pass over one node: the services it takes down, and its steps in order."""

    node: str
    role: str
    services: tuple[str, ...]
    steps: tuple[VisitStep, ...]
    leads: tuple[str, ...] = ()  # services whose once-only work (migrate) this visit does
    again: str = ""  # why the node is visited a second time, if it is
    #: services restarted only because their configuration changed (no package change)
    reconfigured: tuple[str, ...] = ()
    #: container styles: `image REF RUNNING -> TARGET` of each service that switches image
    images: tuple[str, ...] = ()

    @property
    def seconds(self) -> float:
        return sum(s.seconds for s in self.steps)


#: Steps a visit always has, even when no service has tasks there: they carry the
#: built-in work (package transaction, health checks).
ALWAYS = frozenset({Step.PACKAGES, Step.VERIFY})


def make_visit(
    dep: Deployment,
    node: str,
    services: tuple[str, ...],
    workflow: Section,
    *,
    leads: tuple[str, ...] = (),
    extra_packages: tuple[str, ...] = (),
    reboot: bool = False,
    reconfigured: tuple[str, ...] = (),
) -> Visit:
    """Build one visit of `node` that cycles `services`.

    `leads`: services whose once-only migration runs in this visit (bootstrap node).
    `reboot`: a reboot visit (after all services are upgraded): every service on the node
    goes down with it, so all of them leave, stop, start and rejoin.
    `reconfigured`: services whose configuration changed but not their packages: they
    leave, stop, get their configuration, start and rejoin, with no package step.
    """
    services = in_dependency_order(dep, services)
    cycled = in_dependency_order(dep, services + reconfigured) if reconfigured else services
    down = in_dependency_order(dep, dep.services_on(node)) if reboot else cycled
    style = dep.role_of(node).style
    steps = _steps(dep, services, workflow, leads, extra_packages, reboot, down, style)
    if reboot and style is not DeployStyle.PACKAGES:
        steps = _switch_only_changed(dep, steps, cycled, style)
    return Visit(
        node=node,
        role=dep.node_by_name[node].role,
        services=down,
        steps=steps,
        leads=leads,
        reconfigured=reconfigured,
    )


@lru_cache(maxsize=65536)
def in_dependency_order(dep: Deployment, services: tuple[str, ...]) -> tuple[str, ...]:
    """`services` with every service after the ones it depends on (transitively, through the
    catalog); ties keep their given order. A visit starts them in this order and stops them
    in the reverse one, so a service never runs without what it needs on the same node."""
    if len(services) < 2:
        return services
    catalog = dep.catalog
    depth: dict[str, int] = {}

    def level(name: str, trail: tuple[str, ...] = ()) -> int:
        if name not in depth:
            deps = [d for d in catalog[name].depends_on if d in catalog.services and d not in trail]
            depth[name] = 1 + max((level(d, trail + (name,)) for d in deps), default=-1)
        return depth[name]

    pos = {s: i for i, s in enumerate(services)}
    return tuple(sorted(services, key=lambda s: (level(s), pos[s])))


@lru_cache(maxsize=65536)
def _steps(
    dep: Deployment,
    services: tuple[str, ...],
    workflow: Section,
    leads: tuple[str, ...],
    extra_packages: tuple[str, ...],
    reboot: bool,
    down: tuple[str, ...],
    style: DeployStyle = DeployStyle.PACKAGES,
) -> tuple[VisitStep, ...]:
    # Nodes of a role share a handful of visit shapes: computing each shape once keeps
    # planning 10,000 nodes fast.
    catalog = dep.catalog
    # the services as the node's style runs them (one place answers: Service.styled)
    svc = {s: catalog[s].styled(style) for s in down}
    steps: list[VisitStep] = []
    for step in VISIT_STEPS:
        if step is Step.PACKAGES:
            # a containerized service has no package step: the image is the package (its
            # switch is the config step); one the style runs on the host keeps its packages
            with_work = tuple(s for s in services if not catalog[s].in_container(style))
            extra = extra_packages
        elif step is Step.REBOOT:
            if not reboot:
                continue
            with_work, extra = (), ()
        elif step is Step.MIGRATE:
            with_work, extra = (
                tuple(s for s in leads if svc[s].has_step(workflow, Step.MIGRATE)),
                (),
            )
        elif step is Step.VERIFY:
            with_work = tuple(
                s for s in down if svc[s].has_step(workflow, Step.VERIFY) or svc[s].health
            )
            extra = ()
        else:
            with_work, extra = tuple(s for s in down if svc[s].has_step(workflow, step)), ()
            if step is Step.LEAVE:
                with_work = tuple(s for s in with_work if not lone_infrastructure(dep, s))
            if step in (Step.LEAVE, Step.STOP):
                with_work = with_work[::-1]  # dependents leave and stop before what they need
        if not with_work and not extra and step not in ALWAYS and step is not Step.REBOOT:
            continue
        if step is Step.PACKAGES and not with_work and not extra and (reboot or down):
            # a reboot-only visit whose kernel package is listed as extra elsewhere, or a
            # visit that only restarts services for their new configuration
            continue
        seconds = node_step_seconds([svc[s] for s in with_work], step)
        if step is Step.REBOOT:
            seconds = max(
                [svc[s].seconds(Step.REBOOT) for s in down] or [node_step_seconds([], Step.REBOOT)]
            )
        if step is Step.VERIFY and not with_work:
            seconds = node_step_seconds([], Step.VALIDATE)
        steps.append(VisitStep(step, with_work, seconds, extra))
    return tuple(steps)


def lone_infrastructure(dep: Deployment, service: str) -> bool:
    """An infrastructure service with one instance in the whole cloud (a lone controller's
    cluster manager, load balancer, database, message bus). Its leave moves its traffic
    nowhere: there is no peer to take it. It only takes away what the node's own services need
    to start later in the same visit: pacemaker's standby holds the VIPs (the database behind
    one) away until the rejoin, which comes after every start, so an API that opens its
    database as it starts (nova-api) would wait there until its start timeout. Its visit
    stops it without a leave (its window is announced as every lone instance's is)."""
    return dep.catalog[service].plane == "infra" and len(dep.instances.get(service, ())) == 1


@lru_cache(maxsize=4096)
def _switch_only_changed(
    dep: Deployment, steps: tuple[VisitStep, ...], cycled: tuple[str, ...], style: DeployStyle
) -> tuple[VisitStep, ...]:
    """A reboot visit's steps on a container node with the image switch (its config step)
    kept for the containers the visit changes (`cycled`) and the host-level services.

    The reboot takes every service of the node down, but a container switched to its target
    image here before its own visit would start new code ahead of its dependencies and of its
    schema's migration; the others come back from the image they run."""
    catalog = dep.catalog
    out = []
    for vs in steps:
        if vs.step is Step.CONFIG:
            kept = tuple(
                s for s in vs.services if s in cycled or not catalog[s].in_container(style)
            )
            if not kept:
                continue
            if kept != vs.services:
                seconds = node_step_seconds([catalog[s].styled(style) for s in kept], Step.CONFIG)
                vs = VisitStep(vs.step, kept, seconds, vs.extra, vs.tags)
        out.append(vs)
    return tuple(out)
