"""Which of a dependency level's services get visits of their own, and when.

A node's services of one level share one visit, so whatever needs one of them waits for all
of them. A service that lives on one role only and feeds a chain of its own (the networkers'
agent, which the storage chain needs) gets a visit of its own: before the rest of the level
when its chain is the longer, after it when the rest leads the longer chain (the compute
chain's first link also runs on the networkers). Kept apart from the part's layout
(`planes.py`) as a small decision over the catalog's dependencies and the roles' rates.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import lru_cache

from stepwise.model.deployment import Deployment


@dataclass(frozen=True)
class Pick:
    """Which of a level's services a pass over its nodes visits: only `keep` (the feeders'
    own visits), none of `skip` (they have visits of their own), `last`: `keep` go after the
    rest of the level (see `feeders`)."""

    keep: frozenset[str] | None = None
    skip: frozenset[str] = frozenset()
    last: bool = False

    def of(self, level_services: list[str]) -> tuple[str, ...]:
        """The services of a node's level this pass visits."""
        return tuple(
            s
            for s in level_services
            if (self.keep is None or s in self.keep) and s not in self.skip
        )

    def again(self, node: str, level_services: list[str], svcs: tuple[str, ...]) -> str:
        """Why the node is visited again in this level because of the split ("": it is not)."""
        split = sorted(self.skip.intersection(level_services))
        done = sorted(set(level_services) - set(svcs)) if self.last else []
        if split:
            return (
                f"{node} is visited again: {', '.join(split)} went first in a visit of "
                "their own, so that what needs only them starts sooner"
            )
        if done:
            return (
                f"{node} is visited again: {', '.join(svcs)} go last in a visit of their own, "
                f"so that {', '.join(done)} (a longer chain needs them) are done sooner"
            )
        return ""


def feeders(
    dep: Deployment,
    levels: dict[str, int],
    grouped: Mapping[str, object],
    level: int,
    allowance: Mapping[str, int],
) -> tuple[frozenset[str], bool]:
    """Services of `level` that get a visit of their own before the rest of the level.

    A node's services of one level share one visit, so what depends on one of them waits for
    all of them. That costs time when a service (the networkers' agent) lives on one role
    only and the services needing it (the storage chain) need nothing else of that role's
    level, while the role's other services of the level (the compute chain's first link)
    also run on other roles, in a longer stream the first cannot overtake. Such a service is
    upgraded first in a visit of its own, and those needing it start as soon as that is done.
    Empty (one visit per node and level, as before) in every other case.

    When the others lead a longer chain than the feeders (more dependency levels below them:
    the compute chain of seven links beside a storage chain of one), the feeders go last
    instead, so that the longer chain is not kept waiting for them. Returns the feeders and
    whether they go first. `levels`: the part's services -> their dependency level;
    `grouped`: its schema-sensitive services, which stop together instead; `allowance`: each
    ruled service's instances down at once."""
    here = [s for s in levels if levels[s] == level and s not in grouped]
    # from the roles' service lists, not the instances: 60 services run ~80,000 instances
    roles_of = {s: {r.name for r in dep.roles if r.nodes and s in r.services} for s in here}
    later = [s for s in levels if levels[s] > level]
    out: set[str] = set()
    for s in here:
        if len(roles_of[s]) != 1:
            continue
        (role,) = roles_of[s]
        others = [o for o in here if o != s and role in roles_of[o]]
        users = [u for u in later if s in all_deps(dep, u)]
        if (
            users
            and others
            and all(len(roles_of[o]) > 1 for o in others)
            and not any(o in all_deps(dep, u) for u in users for o in others)
        ):
            out.add(s)
    if not out:
        return frozenset(), True

    tail = _Tails(dep, levels, allowance)
    feeders = max(tail(s) for s in out)
    roles = {r for s in out for r in roles_of[s]}
    others = max((tail(o) for o in here if o not in out and roles & roles_of[o]), default=0)
    return frozenset(out), feeders >= others


@dataclass
class _Tails:
    """Rounds of batches the longest chain of a service's users in this part needs at least
    after it (each user's rounds: its most crowded role's nodes over what its serial and the
    user's allowance let down at once): what waits for the service. Each service once."""

    dep: Deployment
    levels: dict[str, int]
    allowance: Mapping[str, int]
    memo: dict[str, int] = field(default_factory=dict)

    def __call__(self, service: str) -> int:
        if service not in self.memo:
            users = [u for u in self.levels if service in self.dep.catalog[u].depends_on]
            self.memo[service] = max((self.rounds(u) + self(u) for u in users), default=0)
        return self.memo[service]

    def rounds(self, service: str) -> int:
        allow = self.allowance.get(service)
        out = 1
        for r in self.dep.roles:
            if r.nodes and service in r.services:
                at_once = max(1, min(r.update_serial, allow or r.update_serial))
                out = max(out, -(-len(r.nodes) // at_once))
        return out


@lru_cache(maxsize=4096)
def all_deps(dep: Deployment, service: str) -> frozenset[str]:
    """What `service` depends on, transitively (asked once per visit: cached)."""
    return dep.catalog.needs(service)


__all__ = ["Pick", "all_deps", "feeders"]
