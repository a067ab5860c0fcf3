"""Estimated times of a plan: every unit starts as soon as the units it waits for end."""

from __future__ import annotations

from dataclasses import replace

from stepwise.plan.units import Plan, Unit


def asap(units: tuple[Unit, ...] | list[Unit]) -> tuple[list[Unit], float]:
    """Give each unit start_s/end_s (units must be in topological order); return the makespan."""
    end: dict[str, float] = {}
    out: list[Unit] = []
    makespan = 0.0
    for u in units:
        start = max((end[a] for a in u.after if a in end), default=0.0)
        finish = start + u.duration_s
        end[u.id] = finish
        makespan = max(makespan, finish)
        out.append(replace(u, start_s=start, end_s=finish))
    return out, makespan


def select(plan: Plan, *, stage: str | None = None, plane: str | None = None) -> Plan:
    """Keep the units of one stage and/or plane; waits on dropped units are dropped too
    (they are assumed done: the operator runs the stages in order)."""
    if stage is None and plane is None:
        return plan
    keep: list[Unit] = []
    kept: set[str] = set()
    for u in plan.units:
        if stage is not None and u.stage != stage:
            continue
        if plane is not None and u.phase and u.phase != plane:
            continue
        if plane is not None and not u.phase and u.step == "gate":
            continue
        keep.append(replace(u, after=tuple(a for a in u.after if a in kept)))
        kept.add(u.id)
    units, makespan = asap(keep)
    return plan.with_units(units, duration_s=makespan)
