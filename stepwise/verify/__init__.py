"""The verify layer: prove a plan keeps the cloud available before anything runs."""

from __future__ import annotations

from dataclasses import replace

from stepwise.errors import Problem, UnsafePlanError
from stepwise.model.deployment import Deployment
from stepwise.plan.units import Plan
from stepwise.verify.bounds import lower_bound
from stepwise.verify.invariants import check
from stepwise.verify.replay import perturbed_times

#: Replays with randomly stretched durations: the DAG, not just the estimate, must be safe.
PERTURBATIONS = 3


def verify_plan(plan: Plan, deployment: Deployment, *, perturbations: int = PERTURBATIONS) -> Plan:
    """Check every invariant on the planned schedule and on perturbed ones.

    Returns the plan with its downtime windows and lower bound filled in; raises
    UnsafePlanError listing each violation (when, which unit, which rule) otherwise.
    """
    problems, windows = check(plan, deployment)
    if not problems:
        for seed in range(perturbations):
            more, _ = check(plan, deployment, perturbed_times(plan.units, seed))
            if more:
                problems = [f"{m} (when steps take other times than estimated)" for m in more[:5]]
                break
    if problems:
        shown = problems[:20]
        extra = len(problems) - len(shown)
        ps = [Problem(p) for p in shown]
        if extra:
            ps.append(Problem(f"... and {extra} more"))
        ps[-1] = Problem(ps[-1].message, hint="the plan is refused; nothing was run")
        raise UnsafePlanError(ps)
    return replace(plan, windows=tuple(windows), lower_bound_s=lower_bound(plan, deployment))


__all__ = ["verify_plan", "check", "lower_bound"]
