"""Steps 8-9 of the OS upgrade: the nodes after the first wave, one visit each (prepare,
into the new OS, upgrade, external services back), rolled in batches."""

from __future__ import annotations

from dataclasses import dataclass, replace
from types import MappingProxyType

from stepwise.model.vocab import Phase, Stage, Step, SystemUpgradeKey
from stepwise.plan import os_clusters
from stepwise.plan.batching import schedule_rolling
from stepwise.plan.builder import PlanBuilder
from stepwise.plan.os_cloud import UPGRADE_TAGS, WF, OsCloud, secs
from stepwise.plan.planes import Cursor, describe_rule
from stepwise.plan.visits import Visit, VisitStep


@dataclass(frozen=True)
class Pass:
    """One rolling pass over nodes: its phase, each role's batch size, and why it runs."""

    phase: Phase
    serial: dict[str, int]
    what: str


@dataclass(frozen=True)
class Rules:
    """The availability rules a pass keeps: per service, instances down at once, and totals."""

    allowance: dict[str, int]
    instances: dict[str, int]


def role_visits(c: OsCloud, nodes: list[str], *, evacuate: bool) -> dict[str, list[Visit]]:
    """role -> the visits of its nodes among `nodes`, in their order."""
    visits: dict[str, list[Visit]] = {}
    # nodes of a role at the same point of the procedure get the same visit: build each
    # shape once (10,000 nodes are a handful of shapes)
    shapes: dict[tuple, Visit] = {}
    for n in nodes:
        role = c.dep.node_by_name[n].role
        key = (
            role,
            c.prepared(n),
            c.new_os(n),
            c.ext_prepared(n),
            c.ext_started(n),
            c.started(n),
        )
        if key not in shapes:
            shapes[key] = visit(c, n, evacuate=evacuate)
        v = shapes[key]
        visits.setdefault(role, []).append(v if v.node == n else replace(v, node=n))
    return visits


def visit(c: OsCloud, node: str, *, evacuate: bool) -> Visit:
    """What is left for one node after the first wave: prepare, reboot, upgrade, external."""
    internal, external = c.internal(node), c.external(node)
    steps = [
        *_prepare_steps(c, node, evacuate=evacuate),
        *_reboot_steps(c, node),
        *_upgrade_steps(c, node),
        *_external_run_steps(c, node),
    ]
    down = (() if c.prepared(node) and not c.new_os(node) else internal) + (
        external if not c.ext_prepared(node) or (c.new_os(node) and not c.ext_started(node)) else ()
    )
    return Visit(node, c.dep.role_of(node).name, down, tuple(steps))


def _prepare_steps(c: OsCloud, node: str, *, evacuate: bool) -> list[VisitStep]:
    """Leave (evacuated nodes), stop and prepare the OS upgrade; the external services out."""
    dep, catalog = c.dep, c.dep.catalog
    internal, external = c.internal(node), c.external(node)
    steps: list[VisitStep] = []
    if not c.prepared(node):
        if evacuate:
            lv = c.leaving(node)
            if lv:
                steps.append(
                    VisitStep(
                        Step.LEAVE,
                        lv,
                        secs(dep, lv, Step.LEAVE),
                        tags=(Stage.SYSTEM_UPGRADE_PREPARE,),
                    )
                )
        prep = tuple(s for s in internal if catalog[s].system_upgrade.get(SystemUpgradeKey.PREPARE))
        steps.append(
            VisitStep(
                Step.SYSTEM_UPGRADE_PREPARE,
                prep,
                secs(dep, internal, Step.STOP) + secs(dep, [], SystemUpgradeKey.PREPARE),
                tags=(Stage.SYSTEM_UPGRADE_PREPARE,),
            )
        )
    if not c.ext_prepared(node):
        ext = tuple(s for s in external if catalog[s].system_upgrade.get(SystemUpgradeKey.PREPARE))
        if ext:
            steps.append(
                VisitStep(
                    Step.EXTERNAL_SYSTEM_UPGRADE_PREPARE,
                    ext,
                    secs(dep, ext, Step.STOP) or 1.0,
                    tags=(Stage.SYSTEM_UPGRADE_PREPARE,),
                )
            )
    return steps


def _reboot_steps(c: OsCloud, node: str) -> list[VisitStep]:
    """Into the new OS, unless the node runs it."""
    if c.new_os(node):
        return []
    dep = c.dep
    return [
        VisitStep(
            Step.SYSTEM_UPGRADE_RUN,
            (),
            max(
                [secs(dep, [], SystemUpgradeKey.RUN)]
                + [dep.catalog[s].seconds(Step.REBOOT) for s in c.internal(node) + c.external(node)]
            ),
            tags=(Stage.SYSTEM_UPGRADE_RUN,),
        )
    ]


def _upgrade_steps(c: OsCloud, node: str) -> list[VisitStep]:
    """`upgrade run` on the node: packages, config, start, rejoin, verify."""
    dep, catalog = c.dep, c.dep.catalog
    internal = c.internal(node)
    if c.started(node) or not internal:
        return []
    steps = []
    packaged = c.packaged(node)  # a container's image comes with its config step
    if packaged:
        steps.append(
            VisitStep(
                Step.PACKAGES, packaged, secs(dep, packaged, Step.PACKAGES), tags=UPGRADE_TAGS
            )
        )
    for step in (Step.CONFIG, Step.START, Step.REJOIN):
        if step is Step.START:
            steps.extend(_join_steps(c, node))
        w = tuple(s for s in internal if catalog[s].has_step(WF, step))
        if w:
            steps.append(VisitStep(step, w, secs(dep, w, step), tags=UPGRADE_TAGS))
    steps.append(
        VisitStep(
            Step.VERIFY,
            tuple(s for s in internal if catalog[s].health),
            secs(dep, [], Step.VERIFY),
            tags=UPGRADE_TAGS,
        )
    )
    return steps


def _join_steps(c: OsCloud, node: str) -> list[VisitStep]:
    """Before its services start, a later new-OS node joins the clusters the first new-OS
    nodes formed (its old-OS cluster is gone)."""
    join = os_clusters.joining(c, {node: c.internal(node)})
    if not join:
        return []
    return [
        VisitStep(
            Step.JOIN_CLUSTER,
            join[node],
            secs(c.dep, join[node], SystemUpgradeKey.JOIN_CLUSTER),
            tags=UPGRADE_TAGS,
            vars=MappingProxyType(os_clusters.seed_vars(c, join)),
        )
    ]


def _external_run_steps(c: OsCloud, node: str) -> list[VisitStep]:
    """The external services back on the node."""
    if c.ext_started(node):
        return []
    catalog = c.dep.catalog
    ext = tuple(s for s in c.external(node) if catalog[s].system_upgrade.get(SystemUpgradeKey.RUN))
    if not ext:
        return []
    return [
        VisitStep(
            Step.EXTERNAL_SYSTEM_UPGRADE_RUN,
            ext,
            secs(c.dep, ext, Step.START) or 1.0,
            tags=(Stage.SYSTEM_UPGRADE_RUN,),
        )
    ]


def roll(
    builder: PlanBuilder,
    c: OsCloud,
    visits: dict[str, list[Visit]],
    rules: Rules,
    cur: Cursor,
    part: Pass,
) -> Cursor:
    """Schedule the visits in batches after `cur`, closed by a gate saying what they did."""
    visits = {r: [v for v in vs if v.steps] for r, vs in visits.items()}
    visits = {r: vs for r, vs in visits.items() if vs}
    if not visits:
        return cur
    dep = c.dep
    res = schedule_rolling(
        builder,
        visits,
        role_serial=part.serial,
        allowance=rules.allowance,
        instances=rules.instances,
        start_s=cur.t,
        after=cur.after,
        stage=Stage.SYSTEM_UPGRADE_RUN,
        phase=part.phase,
        describe=lambda s: describe_rule(dep, s),
        tags=(),
    )
    return Cursor(builder.gate(res.last_units, part.what, Stage.SYSTEM_UPGRADE_RUN), res.end_s)
