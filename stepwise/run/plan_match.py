"""Whether a run planned now is the run the store holds: a resumed run continues only the
plan it started (the same units, planned with the same -e variables its workflow reads),
and a finished run is "done before" only for the same units."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from stepwise.plan.table import WORKFLOW_TABLE
from stepwise.plan.units import Plan


def plan_difference(plan: Plan, stored: Mapping[str, Any]) -> str:
    """'' when the stored plan has the same units, else what differs first."""
    if str(stored.get("workflow")) != str(plan.workflow):
        return f"workflow {stored.get('workflow')} instead of {plan.workflow}"
    old = [dict(u) for u in stored.get("units", [])]
    new = [u.to_json() for u in plan.units]
    if len(old) != len(new):
        return f"{len(old)} units stored, {len(new)} planned now"
    for o, n in zip(old, new, strict=True):
        if o != n:
            keys = sorted(k for k in set(o) | set(n) if o.get(k) != n.get(k))
            k = keys[0]
            return (
                f"unit {n['id']} ({n['step']}): {k} is {_short(o.get(k))} in the store, "
                f"{_short(n.get(k))} now"
            )
    # the -e variables the workflow's plans read (its table entry's trait): a resumed run
    # must plan with the values the stored plan was made with
    for var in WORKFLOW_TABLE[plan.workflow].variables:
        if dict(stored.get("params", {})).get(var) != plan.params.get(var):
            return (
                f"{var} is {stored.get('params', {}).get(var)} in the store, "
                f"{plan.params.get(var)} now"
            )
    return ""


def _short(v: Any) -> str:
    text = json.dumps(v, default=str)
    return text if len(text) <= 120 else text[:117] + "..."


def same_units(plan: Plan, stored: Mapping[str, Any]) -> bool:
    """The stored plan has exactly the units planned now."""
    return [u.to_json() for u in plan.units] == [dict(u) for u in stored.get("units", [])]
