"""Schema-sensitive (`rolling: false`) services of a rollout level: they stop on all their
nodes together, get new packages and configuration, migrate their schema once and start
together on the new schema."""

from __future__ import annotations

from typing import Any

from stepwise.model.catalog import node_step_seconds
from stepwise.model.deployment import Deployment
from stepwise.model.vocab import Phase, Section, Step
from stepwise.plan.rollout_context import Cursor, RolloutContext


class _GroupUnits:
    """The units of one group of schema-sensitive services, one after another."""

    def __init__(self, ctx: RolloutContext, part: Phase, label: str, cur: Cursor) -> None:
        self.ctx = ctx
        self.part = part
        self.label = label
        self.after = cur.after
        self.t = cur.t

    def unit(self, step: Step, work: dict[str, tuple[str, ...]], why: str, **kw: Any) -> None:
        """A unit of `step` over `work` (node -> services), after the group's previous one."""
        catalog = self.ctx.dep.catalog
        seconds = max(
            (node_step_seconds([catalog[s] for s in ss], step) for ss in work.values()),
            default=0.0,
        )
        self.after = self.ctx.builder.add(
            step,
            nodes=list(work),
            services=sorted({s for ss in work.values() for s in ss}),
            after=[self.after],
            why=why,
            stage=self.ctx.stage,
            phase=self.part,
            duration_s=seconds,
            work=work,
            batch=f"group:{self.label}",
            tags=self.ctx.tags,
            **kw,
        )
        self.t += seconds


def offline_group(
    ctx: RolloutContext, group: dict[str, list[str]], part: Phase, cur: Cursor
) -> Cursor:
    """Schema-sensitive services stop on all their nodes, update, migrate once, start together."""
    workflow = ctx.workflow
    names = sorted(group)
    nodes = sorted({n for ns in group.values() for n in ns}, key=ctx.order.__getitem__)
    on_node = {n: tuple(s for s in names if n in group[s]) for n in nodes}
    label = ", ".join(names)
    units = _GroupUnits(ctx, part, label, cur)
    instances = {s: group[s] for s in names}
    # those behind a load balancer leave it first: the requests in flight finish before the stop
    _if_any(units, on_node, Step.LEAVE, "out of the load balancers and clusters")
    units.unit(
        Step.STOP,
        on_node,
        f"{label}: new code refuses the old schema and old code breaks on the new one, so every "
        f"instance stops together ({len(nodes)} node(s)); downtime window starts",
        stops=instances,
    )
    units.unit(Step.PACKAGES, on_node, f"{label}: new packages on all their nodes while stopped")
    cfg = {
        n: tuple(s for s in ss if ctx.dep.service_on(s, n).has_step(workflow, Step.CONFIG))
        for n, ss in on_node.items()
    }
    cfg = {n: ss for n, ss in cfg.items() if ss}
    if cfg:
        units.unit(Step.CONFIG, cfg, f"{label}: configuration for the new version before any start")
    mig = _group_migrations(ctx.dep, group, workflow)
    if mig:
        units.unit(
            Step.MIGRATE,
            mig,
            f"{label}: schema migration once, on the bootstrap node, while no old reader runs",
        )
    units.unit(
        Step.START,
        on_node,
        f"{label}: start on the new schema; downtime window ends",
        starts=instances,
    )
    _if_any(units, on_node, Step.REJOIN, "back into the load balancers once healthy")
    ver = {
        n: tuple(
            s
            for s in ss
            if ctx.dep.service_on(s, n).has_step(workflow, Step.VERIFY)
            or ctx.dep.service_on(s, n).health
        )
        for n, ss in on_node.items()
    }
    units.unit(
        Step.VERIFY,
        {n: ss for n, ss in ver.items() if ss} or {nodes[0]: ()},
        f"{label}: health checks before going on",
    )
    gate = ctx.builder.gate([units.after], f"{part}: {label} upgraded everywhere", ctx.stage, part)
    return Cursor(gate, units.t)


def _if_any(units: _GroupUnits, on_node: dict[str, tuple[str, ...]], step: Step, why: str) -> None:
    """A unit of `step` for the group's services with work in it, on their nodes, if any. A
    leave takes the APIs behind a load balancer out of service when it begins: every instance
    leaves, so their downtime window opens there rather than at the stop after it."""
    ctx = units.ctx
    work = {
        n: tuple(s for s in ss if ctx.dep.service_on(s, n).has_step(ctx.workflow, step))
        for n, ss in on_node.items()
    }
    work = {n: ss for n, ss in work.items() if ss}
    if not work:
        return
    stops = ctx.dep.catalog.behind_balancer(work) if step is Step.LEAVE else None
    units.unit(step, work, f"{units.label}: {why}", stops=stops)


def _group_migrations(
    dep: Deployment, group: dict[str, list[str]], workflow: Section
) -> dict[str, tuple[str, ...]]:
    """node -> the group's services migrated there: once each, on its bootstrap node when
    that is among its nodes (else its first node)."""
    mig: dict[str, list[str]] = {}
    for s in sorted(group):
        if dep.catalog[s].has_step(workflow, Step.MIGRATE):
            boot = dep.bootstrap_node(s)
            where = boot.name if boot is not None and boot.name in group[s] else group[s][0]
            mig.setdefault(where, []).append(s)
    return {n: tuple(ss) for n, ss in mig.items()}
