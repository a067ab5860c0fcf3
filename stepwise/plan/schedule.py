"""Estimated times of a plan: every unit starts as soon as the units it waits for end."""

from __future__ import annotations

from dataclasses import replace

from stepwise.plan.units import Unit


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
        out.append(
            replace(u, start_s=start, end_s=finish)
            if (u.start_s, u.end_s) != (start, finish)
            else u
        )
    return out, makespan
