"""Compose node visits into the control-plane part then the data-plane part of a rollout.

Used by `update` (everything rolls) and by the `run` stage of `upgrade` (schema-sensitive
services, `rolling: false`, stop on all their nodes together for the migration; the rest
rolls). Inside a part, services are taken in dependency levels: a level starts only when
the levels it depends on are done everywhere. A node whose kernel changes is rebooted in a
last visit, after all its services are upgraded.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from stepwise.model.availability import service_allowances
from stepwise.model.catalog import effective_rule, node_step_seconds
from stepwise.model.deployment import Deployment
from stepwise.model.vocab import Phase, Plane, Section, Stage, Step
from stepwise.plan.batching import schedule_rolling
from stepwise.plan.builder import PlanBuilder
from stepwise.plan.changes import NodeChange, dependency_levels
from stepwise.plan.visits import Visit, make_visit

CONTROL, DATA = Phase.CONTROLPLANE, Phase.DATAPLANE


@dataclass
class Cursor:
    """Where the plan is: the unit the next work waits for, and its estimated time."""

    after: str | None
    t: float = 0.0


def home_part(dep: Deployment, node: str) -> Phase:
    return CONTROL if dep.role_of(node).is_controlplane else DATA


def service_part(dep: Deployment, service: str) -> Phase:
    """Infra and control-plane services are upgraded first, wherever they run; data-plane
    services after them (the catalog refuses a control service depending on a data one)."""
    return DATA if dep.catalog[service].plane == Plane.DATA else CONTROL


def rollout(
    builder: PlanBuilder,
    dep: Deployment,
    changes: dict[str, NodeChange],
    workflow: Section,
    stage: Stage,
    cur: Cursor,
    *,
    parts: tuple[Phase, ...] = (CONTROL, DATA),
    tags: tuple[str, ...] = (),
) -> Cursor:
    """Emit the run stage of a major upgrade for `changes` (only touched nodes) and return
    the cursor after it.

    Schema-sensitive (`rolling: false`) services stop together for their migration; the rest
    roll, a dependency level at a time (new code of a service needs the new code of what it
    depends on everywhere). A node is visited once per level where it has changing services;
    its reboot (new kernel) and its packages no service owns ride on its last and first
    visits, so a node that changes in one level is taken out of service once.
    """
    catalog = dep.catalog
    order = {n.name: i for i, n in enumerate(dep.nodes)}
    allowance, instances = service_allowances(dep)
    role_serial = {r.name: r.update_serial for r in dep.roles}

    # An infra/control service on a data-plane node that nothing in the control plane
    # depends on (openvswitch on a compute) waits for the node's data-plane visit: one visit
    # instead of two.
    changing = {s for ch in changes.values() for s in ch.services}
    needed_by_control = {
        d for s in changing if service_part(dep, s) == CONTROL for d in catalog[s].depends_on
    }

    def part_of(node: str, s: str) -> Phase:
        p = service_part(dep, s)
        if (
            p == CONTROL
            and DATA in parts
            and home_part(dep, node) == DATA
            and catalog[s].rolling
            and s not in needed_by_control
        ):
            return DATA
        return p

    # per part: (node -> its rolling services), (grouped service -> nodes), levels
    layout: dict[Phase, tuple[dict[str, list[str]], dict[str, list[str]], dict[str, int]]] = {}
    for part in parts:
        rolling: dict[str, list[str]] = {}
        grouped: dict[str, list[str]] = {}
        for node, ch in changes.items():
            for s in ch.services:
                if part_of(node, s) != part:
                    continue
                if not catalog[s].rolling:
                    grouped.setdefault(s, []).append(node)
                else:
                    rolling.setdefault(node, []).append(s)
        services = {s for ss in rolling.values() for s in ss} | set(grouped)
        layout[part] = (rolling, grouped, dependency_levels(dep, services))
    # a rebooting node reboots in its last rolling visit (or, without one, at the very end)
    last_visit: dict[str, tuple[int, int]] = {}
    for i, part in enumerate(parts):
        rolling, _, levels = layout[part]
        for node, ss in rolling.items():
            if changes[node].reboot:
                last_visit[node] = max(
                    last_visit.get(node, (-1, -1)), (i, max(levels[s] for s in ss))
                )
    visited: dict[str, list[str]] = {}
    for i, part in enumerate(parts):
        rolling, grouped, levels = layout[part]
        # extra (unowned) packages ride on the node's first visit in its home part
        extra_pending = {
            n: ch.extra_packages
            for n, ch in changes.items()
            if ch.extra_packages and home_part(dep, n) == part and not ch.reboot
        }
        for level in sorted(set(levels.values())):
            reboot_here = {
                n: changes[n].extra_packages for n, at in last_visit.items() if at == (i, level)
            }
            visits = _level_visits(
                dep, rolling, levels, level, workflow, order, extra_pending, reboot_here, visited
            )
            if visits:
                level_svcs = sorted({s for vs in visits.values() for v in vs for s in v.services})
                cur = _schedule(
                    builder,
                    dep,
                    visits,
                    role_serial,
                    allowance,
                    instances,
                    cur,
                    stage,
                    part,
                    tags,
                    f"{part} level {level}: {', '.join(level_svcs)}",
                )
            group = sorted(s for s in grouped if levels.get(s) == level)
            if group:
                cur = _group(
                    builder,
                    dep,
                    {s: grouped[s] for s in group},
                    workflow,
                    stage,
                    part,
                    cur,
                    order,
                    tags,
                )
        # packages no service owns; after the last part, reboots of nodes with no rolling visit
        tail: dict[str, list[Visit]] = {}
        for node in sorted(extra_pending, key=order.__getitem__):
            tail.setdefault(dep.role_of(node).name, []).append(
                make_visit(dep, node, (), workflow, extra_packages=extra_pending[node])
            )
        if part == parts[-1]:
            for node, ch in sorted(changes.items(), key=lambda kv: order[kv[0]]):
                if ch.reboot and node not in last_visit:
                    tail.setdefault(dep.role_of(node).name, []).append(
                        make_visit(
                            dep,
                            node,
                            (),
                            workflow,
                            extra_packages=ch.extra_packages,
                            reboot=True,
                            stop_all=dep.services_on(node),
                        )
                    )
        if tail:
            cur = _schedule(
                builder,
                dep,
                tail,
                role_serial,
                allowance,
                instances,
                cur,
                stage,
                part,
                tags,
                f"{part}: packages no service owns, and reboots for a new kernel after every "
                "service is upgraded",
            )
    return cur


def rollout_merged(
    builder: PlanBuilder,
    dep: Deployment,
    changes: dict[str, NodeChange],
    workflow: Section,
    stage: Stage,
    cur: Cursor,
    *,
    tags: tuple[str, ...] = (),
) -> Cursor:
    """One visit per touched node (a minor update: schema and RPC stay compatible).

    Each node is taken out of service at most once and rebooted at most once: its changed
    services (in dependency order inside the visit), its packages no service owns and its
    reboot for a new kernel. Nodes of control-plane roles go first; the others follow once
    they are all done (TripleO's order: controllers, then computes and the rest).
    """
    order = {n.name: i for i, n in enumerate(dep.nodes)}
    allowance, instances = service_allowances(dep)
    role_serial = {r.name: r.update_serial for r in dep.roles}
    by_part: dict[Phase, dict[str, list[Visit]]] = {CONTROL: {}, DATA: {}}
    led: set[str] = set()
    for node in sorted(changes, key=lambda n: _bootstrap_first(dep, order, n)):
        ch = changes[node]
        leads = _take_leads(dep, node, ch.services, workflow, led, changes)
        visit = make_visit(
            dep,
            node,
            ch.services,
            workflow,
            leads=leads,
            extra_packages=ch.extra_packages,
            reboot=ch.reboot,
            stop_all=dep.services_on(node) if ch.reboot else None,
        )
        by_part[home_part(dep, node)].setdefault(dep.role_of(node).name, []).append(visit)
    for part, visits in by_part.items():
        if visits:
            cur = _schedule(
                builder,
                dep,
                visits,
                role_serial,
                allowance,
                instances,
                cur,
                stage,
                part,
                tags,
                f"{part}: one visit per node (its changed services, packages no service owns, "
                f"and its reboot when the kernel changes)",
                done="done on every node of the part before the next part starts",
            )
    return cur


def _take_leads(
    dep: Deployment,
    node: str,
    services: tuple[str, ...],
    workflow: Section,
    led: set[str],
    visiting: dict,
) -> tuple[str, ...]:
    """Services whose once-only migration this visit of `node` runs: each service's first
    visit on its bootstrap node, or on the first node visited when its bootstrap node is not
    among `visiting`. Adds them to `led`."""
    leads = []
    for s in services:
        if s in led or not dep.catalog[s].has_step(workflow, Step.MIGRATE):
            continue
        boot = dep.bootstrap_node(s)
        if boot is None or boot.name == node or boot.name not in visiting:
            leads.append(s)
            led.add(s)
    return tuple(leads)


def _bootstrap_first(dep: Deployment, order: dict[str, int], node: str) -> tuple[int, int]:
    """Nodes by role, the role's bootstrap node first: once-only work runs there."""
    role = dep.role_of(node)
    boot = role.bootstrap_node
    return (
        order[role.nodes[0].name],
        0 if boot is not None and boot.name == node else 1 + order[node],
    )


def _level_visits(
    dep: Deployment,
    rolling: dict[str, list[str]],
    levels: dict[str, int],
    level: int,
    workflow: Section,
    order: dict[str, int],
    extra_pending: dict[str, tuple[str, ...]],
    reboot: dict[str, tuple[str, ...]],
    visited: dict[str, list[str]],
) -> dict[str, list[Visit]]:
    by_role: dict[str, list[Visit]] = {}
    led: set[str] = set()
    # the bootstrap node of a service goes first in its role: its once-only migration runs there
    nodes = sorted(rolling, key=lambda n: _bootstrap_first(dep, order, n))
    for node in nodes:
        svcs = tuple(s for s in rolling[node] if levels.get(s) == level)
        if not svcs:
            continue
        leads = _take_leads(dep, node, svcs, workflow, led, rolling)
        again = ""
        if node in visited:
            needs = sorted(
                {d for s in svcs for d in _all_deps(dep, s) if d in levels and levels[d] < level}
            )
            verb = "needs" if len(svcs) == 1 else "need"
            again = (
                f"{node} is visited again: {', '.join(svcs)} {verb} {', '.join(needs)} "
                "on the new release everywhere first (depends_on)"
                if needs
                else f"{node} is visited again: its data-plane services ({', '.join(svcs)}) "
                f"wait until the infrastructure and control plane ({', '.join(visited[node])} "
                "here) run the new release everywhere"
            )
        visited.setdefault(node, []).extend(svcs)
        extra = extra_pending.pop(node, ())
        ch_reboot = node in reboot
        if ch_reboot:
            extra = tuple(dict.fromkeys(extra + reboot[node]))
        v = make_visit(
            dep,
            node,
            svcs,
            workflow,
            leads=leads,
            extra_packages=extra,
            reboot=ch_reboot,
            stop_all=dep.services_on(node) if ch_reboot else None,
        )
        by_role.setdefault(dep.role_of(node).name, []).append(
            replace(v, again=again) if again else v
        )
    return by_role


def _all_deps(dep: Deployment, service: str) -> set[str]:
    out: set[str] = set()
    todo = list(dep.catalog[service].depends_on)
    while todo:
        d = todo.pop()
        if d not in out and d in dep.catalog:
            out.add(d)
            todo.extend(dep.catalog[d].depends_on)
    return out


def _schedule(
    builder,
    dep,
    visits,
    role_serial,
    allowance,
    instances,
    cur: Cursor,
    stage,
    part,
    tags,
    what,
    done: str = "done on every node before the next level starts",
) -> Cursor:
    rank = {r.name: (0 if r.is_controlplane else 1, i) for i, r in enumerate(dep.roles)}
    visits = dict(sorted(visits.items(), key=lambda kv: rank[kv[0]]))
    res = schedule_rolling(
        builder,
        visits,
        role_serial=role_serial,
        allowance=allowance,
        instances=instances,
        start_s=cur.t,
        after=cur.after,
        stage=stage,
        phase=part,
        describe=lambda s: describe_rule(dep, s),
        tags=tags,
    )
    gate = builder.gate(res.last_units, f"{what}: {done}", stage, part)
    return Cursor(gate, res.end_s)


def _group(
    builder: PlanBuilder,
    dep: Deployment,
    group: dict[str, list[str]],
    workflow: Section,
    stage: Stage,
    part: Phase,
    cur: Cursor,
    order: dict[str, int],
    tags: tuple[str, ...],
) -> Cursor:
    """Schema-sensitive services stop on all their nodes, update, migrate once, start together."""
    catalog = dep.catalog
    names = sorted(group)
    nodes = sorted({n for ns in group.values() for n in ns}, key=order.__getitem__)
    on_node = {n: tuple(s for s in names if n in group[s]) for n in nodes}
    label = ", ".join(names)
    after = cur.after
    t = cur.t

    def unit(step: Step, work: dict[str, tuple[str, ...]], why: str, **kw) -> None:
        nonlocal after, t
        seconds = max(
            (node_step_seconds([catalog[s] for s in ss], step) for ss in work.values()), default=0.0
        )
        after = builder.add(
            step,
            nodes=list(work),
            services=sorted({s for ss in work.values() for s in ss}),
            after=[after],
            why=why,
            stage=stage,
            phase=part,
            duration_s=seconds,
            work=work,
            batch=f"group:{label}",
            tags=tags,
            **kw,
        )
        t += seconds

    instances = {s: group[s] for s in names}
    unit(
        Step.STOP,
        on_node,
        f"{label}: new code refuses the old schema and old code breaks on the new one, so every "
        f"instance stops together ({len(nodes)} node(s)); downtime window starts",
        stops=instances,
    )
    unit(Step.PACKAGES, on_node, f"{label}: new packages on all their nodes while stopped")
    cfg = {
        n: tuple(s for s in ss if catalog[s].has_step(workflow, Step.CONFIG))
        for n, ss in on_node.items()
    }
    cfg = {n: ss for n, ss in cfg.items() if ss}
    if cfg:
        unit(Step.CONFIG, cfg, f"{label}: configuration for the new version before any start")
    mig: dict[str, list[str]] = {}
    for s in names:
        if catalog[s].has_step(workflow, Step.MIGRATE):
            boot = dep.bootstrap_node(s)
            where = boot.name if boot is not None and boot.name in group[s] else group[s][0]
            mig.setdefault(where, []).append(s)
    if mig:
        unit(
            Step.MIGRATE,
            {n: tuple(ss) for n, ss in mig.items()},
            f"{label}: schema migration once, on the bootstrap node, while no old reader runs",
        )
    unit(
        Step.START,
        on_node,
        f"{label}: start on the new schema; downtime window ends",
        starts=instances,
    )
    ver = {
        n: tuple(s for s in ss if catalog[s].has_step(workflow, Step.VERIFY) or catalog[s].health)
        for n, ss in on_node.items()
    }
    unit(
        Step.VERIFY,
        {n: ss for n, ss in ver.items() if ss} or {nodes[0]: ()},
        f"{label}: health checks before going on",
    )
    gate = builder.gate([after], f"{part}: {label} upgraded everywhere", stage, part)
    return Cursor(gate, t)


def describe_rule(dep: Deployment, service: str) -> str:
    rule = effective_rule(dep.catalog[service], len(dep.instances.get(service, ())))
    return rule.describe() if rule else "no rule"
