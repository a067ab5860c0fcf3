"""The parts of a plan as the operator reads them, named the same wherever a plan is shown
(the CLI tree, `plan --json`, the HTML report).

A part is a run of units between level gates. It is named by its stage; a procedure whose
units carry the seed's step they belong to (`Unit.seed_step`: the OS upgrade) names its parts
by the steps they cover instead, since the units of one of its parts alternate between the
seed's tags (`system_upgrade_prepare`, `system_upgrade_run`, `upgrade`) node by node: "steps
1-8" holds the first node of each sensitive role (steps 1-7) and then the others one by one
(step 8), and its heading says so.
"""

from __future__ import annotations

from dataclasses import dataclass

from stepwise.model.vocab import Step
from stepwise.plan.units import Plan, Unit


@dataclass(frozen=True)
class Part:
    """Units between two level gates: `name` (the stage, or the seed steps), `heading` (why
    the gate that closes it waits, else why its first unit runs) and the units."""

    name: str
    heading: str
    units: tuple[Unit, ...]


def _span(steps: set[int]) -> str:
    lo, hi = min(steps), max(steps)
    return f"step {lo}" if lo == hi else f"steps {lo}-{hi}"


def _part(units: list[Unit], closing: Unit | None) -> Part:
    """The part of `units`, closed by the level gate `closing` (None: the plan's last part):
    named by its stage, or by the seed steps of its units and its gate; its heading is the
    gate's reason (else its first unit's), after the steps of the units before the gate's
    step when there are any ("steps 1-7, then step 8: the other nodes ...")."""
    heading = closing.why if closing is not None else units[0].why
    steps = {u.seed_step for u in units if u.seed_step is not None}
    if closing is not None and closing.seed_step is not None:
        earlier = {n for n in steps if n < closing.seed_step}
        if earlier:
            heading = f"{_span(earlier)}, then {heading}"
        steps.add(closing.seed_step)
    name = _span(steps) if steps else str(units[0].stage)
    return Part(name, heading, tuple(units))


def parts(plan: Plan) -> list[Part]:
    """The plan's parts in order; the level gates themselves belong to none (they run nothing)."""
    out: list[Part] = []
    cur: list[Unit] = []
    for u in plan.units:
        if u.step is Step.GATE:
            if cur:
                out.append(_part(cur, u))
            cur = []
        else:
            cur.append(u)
    if cur:
        out.append(_part(cur, None))
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
