"""Compose node visits into the control-plane part then the data-plane part of a rollout.

Used by `update` (everything rolls) and by the `run` stage of `upgrade` (schema-sensitive
services, `rolling: false`, stop on all their nodes together for the migration; the rest
rolls). Inside a part, services are taken in dependency levels: a level starts only when
the levels it depends on are done everywhere. A node whose kernel changes is rebooted in a
last visit, after all its services are upgraded.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from functools import lru_cache

from stepwise.model.deployment import Deployment
from stepwise.model.vocab import Phase, Plane, Section, Stage, Step
from stepwise.plan.builder import PlanBuilder
from stepwise.plan.changes import NodeChange, dependency_levels
from stepwise.plan.feeders import Pick, all_deps, feeders
from stepwise.plan.offline_group import offline_group
from stepwise.plan.rollout_context import Cursor, RolloutContext, describe_rule
from stepwise.plan.streams import Streams
from stepwise.plan.visits import Visit, make_visit

CONTROL, DATA = Phase.CONTROLPLANE, Phase.DATAPLANE


def home_part(dep: Deployment, node: str) -> Phase:
    return CONTROL if dep.role_of(node).is_controlplane else DATA


def service_part(dep: Deployment, service: str) -> Phase:
    """Infra and control-plane services are upgraded first, wherever they run; data-plane
    services after them (the catalog refuses a control service depending on a data one)."""
    return DATA if dep.catalog[service].plane == Plane.DATA else CONTROL


@dataclass(frozen=True)
class _PartLayout:
    """One part of a rollout: node -> its rolling services, grouped (schema-sensitive)
    service -> its nodes, and each service's dependency level."""

    part: Phase
    rolling: dict[str, list[str]]
    grouped: dict[str, list[str]]
    levels: dict[str, int]


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
    ctx = RolloutContext.of(builder, dep, workflow, stage, tags)
    layout = _layout(dep, changes, parts)
    last_visit = _reboot_visits(changes, layout)
    visited: dict[str, list[str]] = {}
    for i, pl in enumerate(layout):
        streams = Streams(ctx, pl.part, cur)
        # extra (unowned) packages ride on the node's first visit in its home part
        extra_pending = {
            n: ch.extra_packages
            for n, ch in changes.items()
            if ch.extra_packages and home_part(dep, n) == pl.part and not ch.reboot
        }
        for level in sorted(set(pl.levels.values())):
            reboot_here = {
                n: changes[n].extra_packages for n, at in last_visit.items() if at == (i, level)
            }
            _roll_level(ctx, pl, level, extra_pending, reboot_here, visited, streams)
        cur = streams.join(f"{pl.part}: every level done on every node")
        last_part = i == len(layout) - 1
        tail = _tail_visits(ctx, changes, extra_pending, last_visit if last_part else None)
        if tail:
            cur = ctx.schedule(
                tail,
                cur,
                pl.part,
                f"{pl.part}: packages no service owns, and reboots for a new kernel after every "
                "service is upgraded",
            )
    return cur


def _layout(
    dep: Deployment, changes: dict[str, NodeChange], parts: tuple[Phase, ...]
) -> list[_PartLayout]:
    """Each part's rolling and grouped services, node by node, and their dependency levels."""
    catalog = dep.catalog
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

    # a node's parts depend on its role and its changed services: worked out once per pair
    memo: dict[tuple[str, tuple[str, ...]], tuple[Phase, ...]] = {}
    rolling: dict[Phase, dict[str, list[str]]] = {part: {} for part in parts}
    grouped: dict[Phase, dict[str, list[str]]] = {part: {} for part in parts}
    for node, ch in changes.items():
        key = (dep.node_by_name[node].role, ch.services)
        if key not in memo:
            memo[key] = tuple(part_of(node, s) for s in ch.services)
        for s, p in zip(ch.services, memo[key], strict=True):
            if p not in rolling:
                continue
            if not catalog[s].rolling:
                grouped[p].setdefault(s, []).append(node)
            else:
                rolling[p].setdefault(node, []).append(s)
    layout = []
    for part in parts:
        services = {s for ss in rolling[part].values() for s in ss} | set(grouped[part])
        levels = dependency_levels(dep, services)
        layout.append(_PartLayout(part, rolling[part], grouped[part], levels))
    return layout


def _reboot_visits(
    changes: dict[str, NodeChange], layout: list[_PartLayout]
) -> dict[str, tuple[int, int]]:
    """node -> (part index, level) of its last rolling visit, for each node that reboots: it
    reboots there (a rebooting node with no rolling visit reboots at the very end)."""
    last_visit: dict[str, tuple[int, int]] = {}
    for i, pl in enumerate(layout):
        for node, ss in pl.rolling.items():
            if changes[node].reboot:
                last_visit[node] = max(
                    last_visit.get(node, (-1, -1)), (i, max(pl.levels[s] for s in ss))
                )
    return last_visit


def _roll_level(
    ctx: RolloutContext,
    pl: _PartLayout,
    level: int,
    extra_pending: dict[str, tuple[str, ...]],
    reboot_here: dict[str, tuple[str, ...]],
    visited: dict[str, list[str]],
    streams: Streams,
) -> None:
    """One dependency level of a part: its rolling visits in batches (each independent
    stream after what it needs), then its grouped (schema-sensitive) services together,
    after everything before them."""
    early, first = feeders(ctx.dep, pl.levels, pl.grouped, level, ctx.allowance)
    last = frozenset() if first else early
    if early and first:
        # the feeders' own visits first; a node keeps its reboot for its last visit
        alone = {n: r for n, r in reboot_here.items() if set(_at(pl, n, level)) <= early}
        own = _level_visits(ctx, pl, level, extra_pending, alone, visited, Pick(keep=early))
        names = ", ".join(sorted(early))
        streams.schedule_level(own, level, f"{pl.part} level {level}: {names} first")
    # a node whose feeders go last keeps its reboot for that last visit
    here = reboot_here
    if last:
        here = {n: r for n, r in reboot_here.items() if not last & set(_at(pl, n, level))}
    visits = _level_visits(ctx, pl, level, extra_pending, here, visited, Pick(skip=early))
    if visits:
        level_svcs = sorted({s for vs in visits.values() for v in vs for s in v.services})
        streams.schedule_level(visits, level, f"{pl.part} level {level}: {', '.join(level_svcs)}")
    if last:
        own = _level_visits(
            ctx, pl, level, extra_pending, reboot_here, visited, Pick(keep=last, last=True)
        )
        names = ", ".join(sorted(last))
        streams.schedule_level(own, level, f"{pl.part} level {level}: {names} last")
    group = sorted(s for s in pl.grouped if pl.levels.get(s) == level)
    if group:
        cur = streams.join(f"{pl.part} level {level}: done before {', '.join(group)} stop")
        streams.base = offline_group(ctx, {s: pl.grouped[s] for s in group}, pl.part, cur)


def _tail_visits(
    ctx: RolloutContext,
    changes: dict[str, NodeChange],
    extra_pending: dict[str, tuple[str, ...]],
    last_visit: dict[str, tuple[int, int]] | None,
) -> dict[str, list[Visit]]:
    """Visits at the end of a part: packages no service owns still pending; after the last
    part (`last_visit` given), reboots of nodes with no rolling visit."""
    dep, order, workflow = ctx.dep, ctx.order, ctx.workflow
    tail: dict[str, list[Visit]] = {}
    for node in sorted(extra_pending, key=order.__getitem__):
        tail.setdefault(dep.role_of(node).name, []).append(
            make_visit(dep, node, (), workflow, extra_packages=extra_pending[node])
        )
    if last_visit is not None:
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
                    )
                )
    return tail


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
    ctx = RolloutContext.of(builder, dep, workflow, stage, tags)
    by_part: dict[Phase, dict[str, list[Visit]]] = {CONTROL: {}, DATA: {}}
    led: set[str] = set()
    for node in sorted(changes, key=lambda n: _bootstrap_first(dep, ctx.order, n)):
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
            reconfigured=ch.reconfigured,
        )
        if ch.images:
            visit = replace(visit, images=ch.images)
        by_part[home_part(dep, node)].setdefault(dep.role_of(node).name, []).append(visit)
    for part, visits in by_part.items():
        if visits:
            cur = ctx.schedule(
                visits,
                cur,
                part,
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
    migrating = _migrating(dep, workflow)
    for s in services:
        if s in led or s not in migrating:
            continue
        boot = dep.bootstrap_node(s)
        if boot is None or boot.name == node or boot.name not in visiting:
            leads.append(s)
            led.add(s)
    return tuple(leads)


@lru_cache(maxsize=64)
def _migrating(dep: Deployment, workflow: Section) -> frozenset[str]:
    """The services with a migration in `workflow` (asked once per visited node)."""
    return frozenset(
        s for s in dep.catalog.services if dep.catalog[s].has_step(workflow, Step.MIGRATE)
    )


def _bootstrap_first(dep: Deployment, order: dict[str, int], node: str) -> tuple[int, int]:
    """Nodes by role, the role's bootstrap node first: once-only work runs there."""
    role = dep.role_of(node)
    boot = role.bootstrap_node
    return (
        order[role.nodes[0].name],
        0 if boot is not None and boot.name == node else 1 + order[node],
    )


def _level_visits(
    ctx: RolloutContext,
    pl: _PartLayout,
    level: int,
    extra_pending: dict[str, tuple[str, ...]],
    reboot: dict[str, tuple[str, ...]],
    visited: dict[str, list[str]],
    pick: Pick,
) -> dict[str, list[Visit]]:
    """role -> the visits of one level: each node with the rolling services of the level
    `pick` takes, with its pending unowned packages on its first visit and its reboot on its
    last."""
    dep, rolling = ctx.dep, pl.rolling
    by_role: dict[str, list[Visit]] = {}
    led: set[str] = set()
    needs: dict[tuple[str, ...], list[str]] = {}
    # the bootstrap node of a service goes first in its role: its once-only migration runs there
    nodes = sorted(rolling, key=lambda n: _bootstrap_first(dep, ctx.order, n))
    for node in nodes:
        svcs = pick.of(_at(pl, node, level))
        if not svcs:
            continue
        leads = _take_leads(dep, node, svcs, ctx.workflow, led, rolling)
        again = pick.again(node, _at(pl, node, level), svcs) or _visited_again(
            dep, node, svcs, pl.levels, level, visited, needs
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
            ctx.workflow,
            leads=leads,
            extra_packages=extra,
            reboot=ch_reboot,
        )
        by_role.setdefault(dep.role_of(node).name, []).append(
            replace(v, again=again) if again else v
        )
    return by_role


def _visited_again(
    dep: Deployment,
    node: str,
    svcs: tuple[str, ...],
    levels: dict[str, int],
    level: int,
    visited: dict[str, list[str]],
    memo: dict[tuple[str, ...], list[str]],
) -> str:
    """Why `node`, already visited in an earlier level, is visited again for `svcs` ("" on
    its first visit). `memo`: what each `svcs` needs from earlier levels, kept per level."""
    if node not in visited:
        return ""
    if svcs not in memo:  # nodes of a role ask the same question
        memo[svcs] = sorted(
            {d for s in svcs for d in all_deps(dep, s) if d in levels and levels[d] < level}
        )
    needs = memo[svcs]
    verb = "needs" if len(svcs) == 1 else "need"
    return (
        f"{node} is visited again: {', '.join(svcs)} {verb} {', '.join(needs)} "
        "on the new release everywhere first (depends_on)"
        if needs
        else f"{node} is visited again: its data-plane services ({', '.join(svcs)}) "
        f"wait until the infrastructure and control plane ({', '.join(visited[node])} "
        "here) run the new release everywhere"
    )


def _at(pl: _PartLayout, node: str, level: int) -> list[str]:
    """`node`'s rolling services of dependency level `level`."""
    return [s for s in pl.rolling.get(node, ()) if pl.levels.get(s) == level]


__all__ = ["Cursor", "describe_rule", "home_part", "service_part", "rollout", "rollout_merged"]
