"""The plan layer: from a deployment (and facts) to a deterministic DAG of units, cut down to
what the operator selected."""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from types import MappingProxyType
from typing import Any

from stepwise.errors import InputError, Problem
from stepwise.model.deployment import Deployment
from stepwise.model.facts import NO_FACTS, Facts
from stepwise.model.vocab import UPGRADE_STAGES, Plane, Stage, Workflow
from stepwise.plan.builder import PlanBuilder
from stepwise.plan.limits import resolve_limit
from stepwise.plan.progress import refuse_prepared_nodes
from stepwise.plan.schedule import asap
from stepwise.plan.select import Selection, check_requires, select, split_list
from stepwise.plan.system_upgrade import plan_system_upgrade
from stepwise.plan.undercloud import plan_undercloud_upgrade
from stepwise.plan.units import WORKFLOWS, Plan, Unit, Window
from stepwise.plan.update_upgrade import plan_update, plan_upgrade

STAGES = {Workflow.UPGRADE: UPGRADE_STAGES}
PLANES = tuple(Plane)


#: the names an operator may type for a workflow besides its own: the management node's
#: upgrade is `management-upgrade` in every command (`management-upgrade run`, `plan
#: management-upgrade`); `undercloud-upgrade`, TripleO's word, stays accepted and stored
WORKFLOW_ALIASES = {"management-upgrade": Workflow.UNDERCLOUD_UPGRADE}


def workflow_label(workflow: Workflow) -> str:
    """The name an operator types for `workflow` (`management-upgrade`, not the stored value)."""
    return next((alias for alias, wf in WORKFLOW_ALIASES.items() if wf is workflow), str(workflow))


def parse_workflow(workflow: str | Workflow) -> Workflow:
    """The workflow an operator named (its name or an alias), or a clear error."""
    if isinstance(workflow, str) and workflow in WORKFLOW_ALIASES:
        return WORKFLOW_ALIASES[workflow]
    try:
        return Workflow(workflow)
    except ValueError:
        raise InputError(
            Problem(
                f"unknown workflow '{workflow}'",
                field="WORKFLOW",
                hint=f"one of: {', '.join([*WORKFLOWS, *WORKFLOW_ALIASES])}",
            )
        ) from None


def selection_for(
    workflow: Workflow,
    limit: str | None = None,
    *,
    stage: str | Stage | None = None,
    plane: str | Plane | None = None,
    tags: Iterable[str] | str | None = (),
    skip_tags: Iterable[str] | str | None = (),
) -> Selection:
    """Check the operator's options against the workflow and return them as a Selection."""
    st: Stage | None = None
    if stage is not None:
        valid = STAGES.get(workflow, ())
        if stage not in valid:
            raise InputError(
                Problem(
                    f"--stage '{stage}' is not a stage of {workflow}",
                    field="--stage",
                    hint=f"stages are: {', '.join(valid)}"
                    if valid
                    else f"{workflow} has no stages",
                )
            )
        st = Stage(stage)
    pl: Plane | None = None
    if plane is not None:
        if plane not in PLANES:
            raise InputError(
                Problem(
                    f"--plane '{plane}' is not a plane", field="--plane", hint="use control or data"
                )
            )
        pl = Plane(plane)
    return Selection(
        limit=limit, tags=split_list(tags), skip_tags=split_list(skip_tags), stage=st, plane=pl
    )


def make_plan(
    workflow: str | Workflow,
    deployment: Deployment,
    facts: Facts = NO_FACTS,
    limit: str | None = None,
    *,
    stage: str | Stage | None = None,
    plane: str | Plane | None = None,
    tags: Iterable[str] | str | None = (),
    skip_tags: Iterable[str] | str | None = (),
    selection: Selection | None = None,
    variables: Mapping[str, Any] | None = None,
    preview: bool = False,
) -> Plan:
    """Plan `workflow` for `deployment`, cut down to the selection.

    `limit`: Ansible-style host/role pattern; `stage` (upgrade: prepare|run|converge) and
    `plane` (control|data) select part of the plan, e.g. to run the control plane now and the
    data plane next week; `tags`/`skip-tags` select steps. `variables` (-e): the management
    node's upgrade includes its OS upgrade when `system_upgrade_mode` is given. The result is
    exactly what runs. `preview` (a plan only shown): steps of a multi-command procedure that
    earlier commands would have done are assumed done (`params["assumed"]`) instead of refused.
    Raises InputError on bad options, UnsafePlanError on a selection the seed's rules refuse.
    """
    wf = parse_workflow(workflow)
    sel = selection or selection_for(
        wf, limit, stage=stage, plane=plane, tags=tags, skip_tags=skip_tags
    )
    nodes = resolve_limit(deployment, sel.limit)
    builder = PlanBuilder()
    if wf is Workflow.UPDATE:
        plan_update(builder, deployment, facts, nodes)
    elif wf is Workflow.UPGRADE:
        plan_upgrade(builder, deployment, facts, nodes)
    elif wf is Workflow.SYSTEM_UPGRADE:
        plan_system_upgrade(builder, deployment, facts, nodes, sel.limit)
    else:
        plan_undercloud_upgrade(
            builder,
            deployment,
            facts,
            nodes,
            os_mode=(variables or {}).get("system_upgrade_mode"),
            target_release=(variables or {}).get("target_release"),
        )
    units, makespan = asap(builder.units)
    _check_total(makespan, deployment)
    params = {"facts": facts.source if facts.known else None, **builder.params}
    plan = Plan(
        wf, deployment.name, tuple(units), duration_s=makespan, params=MappingProxyType(params)
    )
    selected = select(plan, deployment, sel, nodes)
    if any(u.requires for u in plan.units):
        selected = check_requires(selected, plan, facts.progress, deployment.path, preview=preview)
    if wf in (Workflow.UPDATE, Workflow.UPGRADE):
        refuse_prepared_nodes(selected, facts, deployment.path)
    return selected


def _check_total(seconds: float, deployment: Deployment) -> None:
    """Bound the sum as well as its parts: each step's duration is bounded (a week), yet a
    hostile catalog and a big cloud could still add up to a plan no report can draw (every
    time of a stored plan must stay below stored.MAX_SECONDS)."""
    from stepwise.plan.stored import MAX_SECONDS

    if not math.isfinite(seconds) or seconds > MAX_SECONDS:
        raise InputError(
            Problem(
                f"the plan would take {seconds:.3g} seconds (more than a century)",
                file=deployment.path,
                field="durations",
                hint="check the catalog's durations: they are seconds per step and node",
            )
        )


__all__ = [
    "make_plan",
    "selection_for",
    "parse_workflow",
    "workflow_label",
    "Plan",
    "Unit",
    "Window",
    "WORKFLOWS",
    "STAGES",
    "PLANES",
    "Selection",
    "resolve_limit",
]
