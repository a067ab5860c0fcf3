"""The prestage stage's static invariant (`prestage_first`): checked once per plan, beside
`units_in_order`, because it is about the plan's edges, not its timing."""

from __future__ import annotations

from stepwise.model.vocab import Step
from stepwise.plan.units import Plan, Unit
from stepwise.verify.replay import where

#: the steps that take a node's services away (what a failed prestage must never reach)
DISRUPTS: frozenset[Step] = frozenset(
    {Step.LEAVE, Step.STOP, Step.REBOOT, Step.SYSTEM_UPGRADE_RUN, Step.SYSTEM_UPGRADE_PREPARE}
)


def prestage_first(plan: Plan) -> list[str]:
    """A prestage unit stops and starts nothing, and a unit that disrupts a node waits,
    directly or not, for that node's prestage.

    Why: the prestage runs while every service serves (fetching must not count against any
    allowance); and a node whose prestage failed (a repository or registry down) must not be
    disrupted: a failed unit stops the run only before the units that wait for it."""
    prestaged = {n for u in plan.units if u.step is Step.PRESTAGE for n in u.nodes}
    if not prestaged:
        return []
    problems = [
        f"{where(u)} is a prestage and takes services down: fetching must disrupt nothing"
        for u in plan.units
        if u.step is Step.PRESTAGE and (u.stops or u.starts)
    ]
    before = _prestaged_before(plan)
    for u in plan.units:
        if not (u.stops or u.step in DISRUPTS):
            continue
        # the unit's few nodes first: `prestaged - before` would be a set of thousands for
        # each of thousands of units (`-` binds before `&`)
        for n in sorted((_disrupted(u) - before[u.id]) & prestaged):
            problems.append(
                f"{where(u)} disrupts {n} without waiting for its prestage: "
                "a failed fetch would leave the node down"
            )
    return problems


def _disrupted(u: Unit) -> set[str]:
    return {n for ns in u.stops.values() for n in ns} | (
        set(u.nodes) if u.step in DISRUPTS else set()
    )


def _prestaged_before(plan: Plan) -> dict[str, frozenset[str]]:
    """unit -> the nodes whose prestage it waits for. Sets are shared, not copied, where a
    unit adds nothing to its one predecessor's (after the stage's gate every unit shares
    one): linear in the plan's size."""
    out: dict[str, frozenset[str]] = {}
    empty: frozenset[str] = frozenset()
    for u in plan.units:
        sets = {id(s): s for s in (out[a] for a in u.after)}
        got = next(iter(sets.values())) if len(sets) == 1 else frozenset().union(*sets.values())
        out[u.id] = got | set(u.nodes) if u.step is Step.PRESTAGE else (got or empty)
    return out
