"""The verify layer: prove a plan keeps the cloud available before anything runs.

`verify_plan` is the only maker of a `VerifiedPlan`, and the engine runs nothing else: what
runs is exactly what was checked.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping
from dataclasses import dataclass, fields
from types import MappingProxyType
from typing import Any

from stepwise.errors import Problem, UnsafePlanError
from stepwise.model.deployment import Deployment
from stepwise.model.facts import Facts
from stepwise.model.vocab import Workflow
from stepwise.plan import (
    PLAN_VARIABLES,
    Selection,
    check_variables,
    checked_variables,
    make_plan,
)
from stepwise.plan.units import Plan
from stepwise.verify.bounds import lower_bound, prestage_bound
from stepwise.verify.invariants import check, prepare
from stepwise.verify.replay import perturbed_times
from stepwise.verify.workloads import workload_windows

#: Replays with randomly stretched durations: the DAG, not just the estimate, must be safe.
PERTURBATIONS = 3

_minting = threading.local()


@dataclass(frozen=True, eq=False)
class VerifiedPlan(Plan):
    """A plan the verifier accepted, with its downtime windows and lower bound. Only
    `verify_plan` makes one; changing it (dataclasses.replace, `with_units`) is refused, so a
    plan cannot be altered between verification and execution."""

    def __post_init__(self) -> None:
        if not getattr(_minting, "on", False):
            raise TypeError("a VerifiedPlan is made only by stepwise.verify.verify_plan()")

    def with_units(self, *args, **kwargs):  # type: ignore[override]
        raise TypeError("a verified plan cannot be changed; plan and verify again")


def verify_plan(
    plan: Plan, deployment: Deployment, *, perturbations: int = PERTURBATIONS
) -> VerifiedPlan:
    """Check every invariant on the planned schedule and on perturbed ones.

    Returns the plan, verified, with its downtime windows and lower bound filled in; raises
    UnsafePlanError listing each violation (when, which unit, which rule) otherwise.
    """
    if plan.deployment != deployment.name:
        raise UnsafePlanError(
            Problem(f"the plan is for cloud '{plan.deployment}', not '{deployment.name}'")
        )
    prepared = prepare(plan, deployment)
    problems, windows = check(plan, deployment, prepared=prepared)
    if not problems:
        for seed in range(perturbations):
            more, _ = check(plan, deployment, perturbed_times(plan.units, seed), prepared=prepared)
            if more:
                problems = [f"{m} (when steps take other times than estimated)" for m in more[:5]]
                break
    if problems:
        shown = list(dict.fromkeys(problems))[:20]
        extra = len(set(problems)) - len(shown)
        ps = [Problem(p) for p in shown]
        if extra:
            ps.append(Problem(f"... and {extra} more"))
        ps[-1] = Problem(ps[-1].message, hint="the plan is refused; nothing was run")
        raise UnsafePlanError(ps)
    values = {f.name: getattr(plan, f.name) for f in fields(Plan)}
    # the workloads a compute's leave may stop in place are announced like a service's outage
    windows = sorted(
        [*windows, *workload_windows(plan, deployment)], key=lambda w: (w.start_s, w.service)
    )
    values.update(
        windows=tuple(windows),
        lower_bound_s=lower_bound(plan, deployment),
        prestage_bound_s=prestage_bound(plan, deployment),
    )
    _minting.on = True
    try:
        return VerifiedPlan(**values)
    finally:
        _minting.on = False


def plan_verified(
    workflow: Workflow | str,
    deployment: Deployment,
    facts: Facts,
    selection: Selection,
    *,
    variables: Mapping[str, Any] | None = None,
    runnable: bool = True,
    preview: bool = False,
) -> VerifiedPlan:
    """The one path from a deployment to a verified plan (run, resume, demo, plan, export,
    report): plan the selection, record in the plan the -e variables its units read, refuse a
    plan that would miss one when it is to run (`runnable`), verify.

    `preview`: see `make_plan` (steps earlier commands would have done are assumed done)."""
    # checked here too: a resumed run's variables are read back from the store
    chosen = checked_variables({k: v for k, v in (variables or {}).items() if k in PLAN_VARIABLES})
    plan = make_plan(
        workflow, deployment, facts, selection=selection, variables=chosen, preview=preview
    )
    if chosen:
        plan = plan.with_units(plan.units, params=MappingProxyType({**plan.params, **chosen}))
    if runnable:
        check_variables(plan)
    return verify_plan(plan, deployment)


__all__ = ["verify_plan", "plan_verified", "VerifiedPlan", "check", "lower_bound"]
