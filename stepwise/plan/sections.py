"""The parts of a plan as the operator reads them, named the same wherever a plan is shown
(the CLI tree, `plan --json`, the HTML report).

A part is a run of units between level gates. It is named by its stage; the OS upgrade's
parts are named by the seed's steps they cover instead, since the units of one of its parts
alternate between the seed's tags (`system_upgrade_prepare`, `system_upgrade_run`, `upgrade`)
node by node: "steps 1-8" holds the first node of each sensitive role (steps 1-7) and then the
others one by one (step 8).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from stepwise.model.vocab import Step, Workflow
from stepwise.plan.units import Plan, Unit

_SEED_STEP = re.compile(r"^(?:[\w-]+: )?step (\d+)\b")


@dataclass(frozen=True)
class Part:
    """Units between two level gates: `name` (the stage, or the seed steps), `heading` (why
    the gate that closes it waits, else why its first unit runs) and the units."""

    name: str
    heading: str
    units: tuple[Unit, ...]


def seed_step(why: str) -> int | None:
    """The seed's step number a reason starts with ("step 5: ..."), if any."""
    m = _SEED_STEP.match(why or "")
    return int(m.group(1)) if m else None


def _name(plan: Plan, units: list[Unit], closing_why: str) -> str:
    if plan.workflow is Workflow.SYSTEM_UPGRADE:
        steps = {n for n in (seed_step(u.why) for u in units) if n is not None}
        closing = seed_step(closing_why)
        if closing is not None:
            steps.add(closing)
        if steps:
            lo, hi = min(steps), max(steps)
            return f"step {lo}" if lo == hi else f"steps {lo}-{hi}"
    return str(units[0].stage)


def parts(plan: Plan) -> list[Part]:
    """The plan's parts in order; the level gates themselves belong to none (they run nothing)."""
    out: list[Part] = []
    cur: list[Unit] = []
    for u in plan.units:
        if u.step is Step.GATE:
            if cur:
                out.append(Part(_name(plan, cur, u.why), u.why, tuple(cur)))
            cur = []
        else:
            cur.append(u)
    if cur:
        out.append(Part(_name(plan, cur, ""), cur[0].why, tuple(cur)))
    return out


def unit_count(plan: Plan) -> str:
    """How many units the plan has, said the same everywhere: the units that run, and the
    level gates (they run nothing) apart."""
    gates = sum(1 for u in plan.units if u.step is Step.GATE)
    work = len(plan.units) - gates
    return f"{work} unit{'s' if work != 1 else ''}" + (
        f" (+{gates} level gate{'s' if gates != 1 else ''})" if gates else ""
    )


def parts_json(plan: Plan) -> list[dict[str, object]]:
    """The parts for `plan --json`: name, heading and unit ids."""
    return [
        {"name": p.name, "heading": p.heading, "units": [u.id for u in p.units]}
        for p in parts(plan)
    ]
