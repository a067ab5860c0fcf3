"""Cut the units to run into chains: the units one ansible-playbook process executes, one play
per unit, in order.

A unit joins the chain whose last unit it waits for (directly or through barriers); a unit
that waits for none of the chains' last units, or whose candidates were all taken by an
earlier unit, starts a chain of its own. This is a greedy path cover of the DAG: a plan that
is one path (a rolling update of one role after another) is one process, as plain
`ansible-playbook` would run it, and independent branches are separate processes that run
at the same time. Every unit still waits at its gate for all of its predecessors, including
those in other chains; since a chain's order follows the DAG, a chain only ever waits for
units that come before its own next unit, so the chains never wait on each other in a
circle. Barriers run in no process (the scheduler passes them), and a once-only unit is a
chain of its own (it runs detached, see ansible_env.WRAPPER_DETACHED).

Why not one process per unit or per rolling batch: each ansible-playbook start-up costs
about two seconds of CPU here, which a batch-per-process engine paid 8 times for a 3+6 node
update (1.69x plain ansible-playbook, benchmarks/run_overhead.py).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from stepwise.plan.units import Unit


@dataclass
class Chain:
    """Units executed in order by one playbook."""

    id: str
    units: list[Unit] = field(default_factory=list)
    detached: bool = False

    @property
    def first(self) -> Unit:
        return self.units[0]


def make_chains(units: Sequence[Unit], has_play: Mapping[str, bool]) -> list[Chain]:
    """Chains of the units that have a play, in the order of their first units (`units` must
    be in a topological order; predecessors outside `units` are done already)."""
    ids = {u.id for u in units}
    order = {u.id: i for i, u in enumerate(units)}
    # for each barrier: the units with a play it waits for, directly or through barriers
    barrier_waits: dict[str, set[str]] = {}
    chains: list[Chain] = []
    tails: dict[str, Chain] = {}  # a chain's last unit -> the chain, while it is open
    for u in units:
        waits: set[str] = set()
        for a in u.after:
            if a not in ids:
                continue
            if has_play.get(a):
                waits.add(a)
            else:
                waits |= barrier_waits.get(a, set())
        if not has_play.get(u.id):
            barrier_waits[u.id] = waits
            continue
        chain = None
        if u.idempotent:
            open_tails = [t for t in waits if t in tails and not tails[t].detached]
            if open_tails:
                chain = tails.pop(max(open_tails, key=order.__getitem__))
        if chain is None:
            chain = Chain(f"c{len(chains) + 1}", detached=not u.idempotent)
            chains.append(chain)
        chain.units.append(u)
        if not chain.detached:
            tails[u.id] = chain
    return chains
