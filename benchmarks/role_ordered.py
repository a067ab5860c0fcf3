"""The role-ordered workflow stepwise is compared with: all of one role, then the next, in
the deployment's role order, `update_serial` nodes at a time, every changed service of a
node cycled in one visit (what a role-oriented tool such as the pre-composable TripleO
workflow does)."""

from __future__ import annotations

from stepwise.model.deployment import Deployment
from stepwise.model.facts import NO_FACTS, Facts
from stepwise.model.vocab import Phase
from stepwise.plan.batching import schedule_rolling
from stepwise.plan.builder import PlanBuilder
from stepwise.plan.changes import node_changes
from stepwise.plan.schedule import asap
from stepwise.plan.visits import make_visit


def role_ordered_duration(
    dep: Deployment, workflow: str = "update", facts: Facts = NO_FACTS
) -> float:
    """Estimated duration of the role-ordered workflow, with the same step estimates."""
    builder = PlanBuilder()
    changes = node_changes(dep, facts)
    after, t = None, 0.0
    for role in dep.roles:
        visits = [
            make_visit(
                dep,
                n.name,
                changes[n.name].services,
                workflow,
                extra_packages=changes[n.name].extra_packages,
                reboot=changes[n.name].reboot,
            )
            for n in role.nodes
            if changes[n.name].touched
        ]
        if not visits:
            continue
        res = schedule_rolling(
            builder,
            {role.name: visits},
            role_serial={role.name: role.update_serial},
            allowance={},
            instances={},
            start_s=t,
            after=after,
            stage="run",
            phase=Phase.NONE,
        )
        after = builder.gate(res.last_units, f"{role.name} done", "run")
        t = res.end_s
    _, makespan = asap(builder.units)
    return makespan
