"""The plan layer: from a deployment (and facts) to a deterministic DAG of units, cut down to
what the operator selected."""

from __future__ import annotations

import math
from collections.abc import Mapping
from types import MappingProxyType
from typing import Any

from stepwise.errors import InputError, Problem
from stepwise.model.deployment import Deployment
from stepwise.model.facts import NO_FACTS, Facts
from stepwise.model.vocab import Step, Workflow
from stepwise.plan.builder import PlanBuilder
from stepwise.plan.changes import image_params
from stepwise.plan.limits import resolve_limit
from stepwise.plan.options import PLANES, STAGES, selection_for
from stepwise.plan.progress import refuse_prepared_nodes
from stepwise.plan.schedule import asap
from stepwise.plan.select import check_requires, select
from stepwise.plan.selection import Selection
from stepwise.plan.table import WORKFLOW_TABLE, entry, workflow_label
from stepwise.plan.units import WORKFLOWS, Plan, Unit, Window
from stepwise.plan.variables import RULED, checked_variables

#: the -e variables the plans read, from the workflow table (the one list): recorded in a
#: plan's params, read back by a resumed run, checked (`plan.variables`) before planning
PLAN_VARIABLES = tuple(dict.fromkeys(v for e in WORKFLOW_TABLE.values() for v in e.variables))
assert RULED >= set(PLAN_VARIABLES), "every plan variable needs a rule in plan/variables.py"


#: the names an operator may type for a workflow besides its own: the management node's
#: upgrade is `management-upgrade` in every command (`management-upgrade run`, `plan
#: management-upgrade`); `undercloud-upgrade`, TripleO's word, stays accepted and stored
WORKFLOW_ALIASES = {e.label: wf for wf, e in WORKFLOW_TABLE.items() if e.label}


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


def make_plan(
    workflow: str | Workflow,
    deployment: Deployment,
    facts: Facts = NO_FACTS,
    limit: str | None = None,
    *,
    selection: Selection | None = None,
    variables: Mapping[str, Any] | None = None,
    preview: bool = False,
) -> Plan:
    """Plan `workflow` for `deployment`, cut down to the selection.

    `limit`: Ansible-style host/role pattern (without a `selection`); `selection` (from
    `selection_for`) also selects a stage (upgrade: prepare|run|converge) and a plane
    (control|data), e.g. to run the control plane now and the data plane next week, and steps
    by tags/skip-tags. `variables` (-e): the management
    node's upgrade includes its OS upgrade when `system_upgrade_mode` is given. The result is
    exactly what runs. `preview` (a plan only shown): steps of a multi-command procedure that
    earlier commands would have done are assumed done (`params["assumed"]`) instead of refused.
    Raises InputError on bad options, UnsafePlanError on a selection the seed's rules refuse.
    """
    wf = parse_workflow(workflow)
    sel = selection or selection_for(wf, limit)
    nodes = resolve_limit(deployment, sel.limit)
    builder = PlanBuilder()
    table_entry = entry(wf)
    table_entry.planner(builder, deployment, facts, nodes, sel, variables or {})
    units, makespan = asap(builder.units)
    _check_total(makespan, deployment)
    params = {"facts": facts.source if facts.known else None, **builder.params}
    images = image_params(deployment, facts, _image_namespace(wf, deployment, variables or {}))
    if images:
        # what the container nodes' switch and prestage read (packages clouds have none)
        params["images"] = images
    plan = Plan(
        wf, deployment.name, tuple(units), duration_s=makespan, params=MappingProxyType(params)
    )
    selected = select(plan, deployment, sel, nodes)
    if any(u.requires for u in plan.units):
        selected = check_requires(selected, plan, facts.progress, deployment.path, preview=preview)
        assumed = selected.params.get("assumed")
        if assumed:  # a preview: each pass reaches more, so this ends
            earlier = _earlier_marks(plan, selected)
            return _as_if_done(wf, deployment, facts, sel, variables, assumed, earlier)
    if table_entry.rolling:
        refuse_prepared_nodes(selected, facts, deployment.path)
    return selected


def _as_if_done(
    wf: Workflow,
    deployment: Deployment,
    facts: Facts,
    sel: Selection,
    variables: Mapping[str, Any] | None,
    assumed: list[dict[str, str]],
    earlier: set[str],
) -> Plan:
    """A preview planned from the cloud the earlier commands would leave: the milestones it
    assumed reached and those of every step before it (`earlier`), so the planner starts from
    their state (RPC pinned, the old nodes' services stopped, the first nodes on the new OS)
    instead of proving the step against a cloud that no run would meet. What it needed and
    assumed stays said, the first pass's first."""
    done = {a["milestone"] for a in assumed} | earlier
    reached = facts.with_progress(facts.progress | done)
    plan = make_plan(wf, deployment, reached, selection=sel, variables=variables, preview=True)
    more = [a for a in plan.params.get("assumed", ()) if a not in assumed]
    return plan.with_units(
        plan.units, params=MappingProxyType({**plan.params, "assumed": [*assumed, *more]})
    )


def _earlier_marks(full: Plan, selected: Plan) -> set[str]:
    """The milestones of the procedure's units before the first selected one: the steps
    the operator runs before this command."""
    from stepwise.plan.progress import implicit_marks

    chosen = {u.id for u in selected.units if not u.is_barrier}  # a kept gate does no step
    out: set[str] = set()
    for u in full.units:
        if u.id in chosen:
            break
        out.update(u.marks, implicit_marks(u))
    return out


def _image_namespace(
    wf: Workflow, deployment: Deployment, variables: Mapping[str, Any]
) -> str | None:
    """The namespace of a workflow's target images: a major upgrade goes to the next
    release's (`-e target_namespace=NS`, default the deployment's `upgrade_namespace`)."""
    if wf not in (Workflow.UPGRADE, Workflow.SYSTEM_UPGRADE) or deployment.containers is None:
        return None
    given = checked_variables(variables).get("target_namespace")
    return given or deployment.containers.upgrade_namespace


def check_variables(plan: Plan) -> None:
    """Plan variables the units need: refused now rather than as an undefined variable on a
    node halfway through."""
    if any(u.step is Step.REPOS for u in plan.units) and not plan.params.get("target_release"):
        raise InputError(
            Problem(
                f"the {plan.workflow} plan switches repositories and needs the target release",
                field="-e",
                hint="add -e target_release=R2 (the release to upgrade to)",
            )
        )


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
    "check_variables",
    "checked_variables",
    "PLAN_VARIABLES",
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
    "WORKFLOW_TABLE",
    "entry",
]
