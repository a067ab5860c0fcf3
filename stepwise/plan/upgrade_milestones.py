"""The milestones of the major upgrade's units: what each of its three commands reaches and
needs, so that `upgrade run` follows `upgrade prepare`, the data plane follows the control
plane on every node, and `upgrade converge` (RPC unpin, online migrations, contract) follows
the new code on every node that changes. Judged from the store's milestones and the facts
(a node the facts show on the target already is not waited for), never assumed."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace

from stepwise.model.deployment import Deployment
from stepwise.model.vocab import Phase, Stage
from stepwise.plan import progress
from stepwise.plan.builder import PlanBuilder
from stepwise.plan.changes import NodeChange
from stepwise.plan.planes import home_part, service_part


def control_part_nodes(dep: Deployment, changes: Mapping[str, NodeChange]) -> list[str]:
    """The control-plane nodes with work in the control-plane part of the run: what the data
    plane waits for. Only nodes of control-plane roles: the part a data-plane node's infra
    service falls in depends on what else changes, so it cannot be asked of another command."""
    out = []
    for n, ch in changes.items():
        if not ch.touched or home_part(dep, n) is not Phase.CONTROLPLANE:
            continue
        control = any(service_part(dep, s) is Phase.CONTROLPLANE for s in ch.services)
        if control or (ch.extra_packages and not ch.reboot):
            out.append(n)
    return sorted(out)


def annotate_upgrade(
    builder: PlanBuilder,
    dep: Deployment,
    all_changes: Mapping[str, NodeChange],
    prepare_gate: str,
    run_start: int,
    converge_start: int,
) -> None:
    """Give the upgrade's units their milestones: the prepare stage's gate marks its nodes
    prepared; a run unit needs its nodes prepared (and, in the data plane, every control-plane
    node's control part done) and a node's last one marks its new code; every converge unit
    needs the new code on every node that changes (`all_changes`, the whole cloud's)."""
    units = builder.units
    touched = [n for n, ch in all_changes.items() if ch.touched]
    control = [progress.control_plane_done(n) for n in control_part_nodes(dep, all_changes)]
    everyone = tuple(progress.new_code(n) for n in sorted(touched))
    last_control: dict[str, int] = {}
    last_run: dict[str, int] = {}
    for i in range(run_start, converge_start):
        for n in units[i].nodes:
            last_run[n] = i
            if units[i].phase is Phase.CONTROLPLANE:
                last_control[n] = i
    for i, u in enumerate(units):
        if u.id == prepare_gate:
            marks = tuple(progress.upgrade_prepared(n) for n in all_changes if n in last_run)
            units[i] = replace(u, marks=marks)
        elif u.is_barrier or i < run_start:
            continue
        elif i < converge_start:
            requires = [progress.upgrade_prepared(n) for n in u.nodes]
            if u.phase is Phase.DATAPLANE:
                requires += control
            marks = [progress.control_plane_done(n) for n in u.nodes if last_control.get(n) == i]
            marks += [progress.new_code(n) for n in u.nodes if last_run.get(n) == i]
            units[i] = replace(u, marks=tuple(marks), requires=tuple(requires))
        elif u.stage is Stage.CONVERGE:
            units[i] = replace(u, requires=everyone)
