"""The plan layer: from a deployment (and facts) to a deterministic DAG of units."""

from __future__ import annotations

from types import MappingProxyType

from stepwise.errors import InputError, Problem
from stepwise.model.deployment import Deployment
from stepwise.model.facts import NO_FACTS, Facts
from stepwise.plan.builder import PlanBuilder
from stepwise.plan.limits import resolve_limit
from stepwise.plan.schedule import asap, select
from stepwise.plan.system_upgrade import plan_system_upgrade
from stepwise.plan.undercloud import plan_undercloud_upgrade
from stepwise.plan.units import WORKFLOWS, Plan, Unit, Window
from stepwise.plan.workflows import plan_update, plan_upgrade

STAGES = {"upgrade": ("prepare", "run", "converge")}
PLANES = ("control", "data")
_PLANE_PHASE = {"control": "controlplane", "data": "dataplane"}


def make_plan(workflow: str, deployment: Deployment, facts: Facts = NO_FACTS, limit: str | None = None, *,
              stage: str | None = None, plane: str | None = None) -> Plan:
    """Plan `workflow` for `deployment`.

    `limit`: Ansible-style host/role pattern; `stage` (upgrade: prepare|run|converge) and
    `plane` (control|data) select part of the plan, e.g. to run the control plane now and the
    data plane next week. Raises InputError on bad options.
    """
    if workflow not in WORKFLOWS:
        raise InputError(Problem(f"unknown workflow '{workflow}'", field="WORKFLOW", hint=f"one of: {', '.join(WORKFLOWS)}"))
    if stage is not None and stage not in STAGES.get(workflow, ()):
        valid = STAGES.get(workflow)
        raise InputError(Problem(f"--stage '{stage}' is not a stage of {workflow}", field="--stage",
                                 hint=f"stages are: {', '.join(valid)}" if valid else f"{workflow} has no stages"))
    if plane is not None and plane not in PLANES:
        raise InputError(Problem(f"--plane '{plane}' is not a plane", field="--plane", hint="use control or data"))
    nodes = resolve_limit(deployment, limit)
    builder = PlanBuilder()
    if workflow == "update":
        plan_update(builder, deployment, facts, nodes)
    elif workflow == "upgrade":
        plan_upgrade(builder, deployment, facts, nodes)
    elif workflow == "system-upgrade":
        plan_system_upgrade(builder, deployment, facts, nodes, limit)
    else:
        plan_undercloud_upgrade(builder, deployment, facts, nodes)
    units, makespan = asap(builder.units)
    params = {"limit": limit, "facts": facts.source if facts.known else None, "stage": stage, "plane": plane,
              **builder.params}
    plan = Plan(workflow, deployment.name, tuple(units), duration_s=makespan, params=MappingProxyType(params))
    return select(plan, stage=stage, plane=_PLANE_PHASE.get(plane) if plane else None)


__all__ = ["make_plan", "Plan", "Unit", "Window", "WORKFLOWS", "STAGES", "PLANES", "resolve_limit"]
