"""Cut the units to run into chains: runs of units one after another with nothing else
waiting in between, each executed by one ansible-playbook process.

A unit joins the chain of its predecessor when that predecessor is its only one and it is
the predecessor's only successor, so only a chain's first unit waits for other chains and
only its last unit is waited for. A rolling batch (leave, stop, packages, ... verify) is one
chain; independent batches are separate chains that run at the same time. Barriers run in
no process (the scheduler passes them), and a once-only unit is a chain of its own (it runs
detached, see ansible_env.WRAPPER_DETACHED).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Mapping, Sequence

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
    preds = {u.id: [a for a in u.after if a in ids] for u in units}
    succs: dict[str, list[str]] = {u.id: [] for u in units}
    for u in units:
        for a in preds[u.id]:
            succs[a].append(u.id)
    by_id = {u.id: u for u in units}
    chain_of: dict[str, Chain] = {}
    chains: list[Chain] = []
    for u in units:
        if not has_play.get(u.id):
            continue
        p = preds[u.id]
        if (u.idempotent and len(p) == 1 and p[0] in chain_of and len(succs[p[0]]) == 1
                and not chain_of[p[0]].detached and chain_of[p[0]].units[-1].id == p[0]):
            c = chain_of[p[0]]
        else:
            c = Chain(f"c{len(chains) + 1}", detached=not u.idempotent)
            chains.append(c)
        c.units.append(by_id[u.id])
        chain_of[u.id] = c
    return chains
