"""The prestage stage: before anything is disrupted, each node that changes fetches what it
will install (its changing packages into dnf's cache; a container style's images), while
every service keeps serving. Units after it only switch.

What bounds the fetch is not the planner's choice but the operator's: how many nodes the
mirror (or registry) serves at once at full speed (`--prestage-parallel`, by default
thousands: a large cloud's mirror is sized for its nodes), and how many the connection
reaches at once (Ansible's `--forks` per ansible-playbook process, times the processes the
engine runs side by side). `parallel` is the smaller of the two (`nodes_at_once`).

Concurrency is expressed as the rest of the plan expresses it, by edges: the nodes of a role
are fetched in units of up to `forks` nodes (one play, one ansible-playbook host list), the
units run in at most `processes` lanes (each waits for the one before it in its lane), so at
most `parallel` nodes fetch at once whatever the engine's own bounds, and the engine's path
cover turns each lane into one ansible-playbook process. A gate after them makes every later
unit wait for every prestage: a failed prestage (a registry or repository down) fails the
run before anything is stopped anywhere, and the same command continues once the source is
back.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Mapping

from stepwise.model.catalog import node_step_seconds
from stepwise.model.deployment import Deployment
from stepwise.model.vocab import Scope, Stage, Step
from stepwise.plan.builder import PlanBuilder
from stepwise.plan.changes import NodeChange
from stepwise.plan.rollout_context import Cursor

#: the mirror's (or registry's) bound an operator gets without --prestage-parallel: nodes it
#: serves at once at full speed. A large cloud's mirror serves thousands; the connection
#: (forks x processes) is then what bounds the fetch
DEFAULT_PARALLEL = 2000
#: Ansible's hosts at once per ansible-playbook process: the run commands' --forks default
DEFAULT_FORKS = 50
#: ansible-playbook processes side by side: the run commands' --max-parallel-units default
DEFAULT_PROCESSES = 8


def nodes_at_once(
    mirror: int, forks: int = DEFAULT_FORKS, processes: int = DEFAULT_PROCESSES
) -> int:
    """How many nodes may fetch at once: what the mirror serves (`--prestage-parallel`) and
    what the connection reaches (`--forks` hosts in each of `processes` playbooks), the
    smaller; 0 (no prestage) stays 0."""
    if mirror <= 0:
        return 0
    return max(1, min(mirror, max(1, forks) * max(1, processes)))


def lanes_and_size(parallel: int, processes: int = DEFAULT_PROCESSES) -> tuple[int, int]:
    """(lanes, nodes per unit) with lanes x size as close to `parallel` as it goes without
    passing it, lanes at most `processes`; more lanes of smaller units on a tie (they pack
    a role's remainder better)."""
    best = (1, max(1, parallel))
    for lanes in range(1, max(1, min(processes, parallel)) + 1):
        size = parallel // lanes
        if lanes * size >= best[0] * best[1]:
            best = (lanes, size)
    return best


def fetches(change: NodeChange) -> bool:
    """The node has something to fetch: a service whose software changes, or packages no
    service owns (a service that only restarts for its configuration fetches nothing)."""
    return bool(change.services or change.extra_packages)


def add_prestage(
    builder: PlanBuilder,
    dep: Deployment,
    changes: Mapping[str, NodeChange],
    parallel: int,
    cur: Cursor,
) -> Cursor:
    """Units of up to a lane's share of `parallel` nodes of one role that fetch something, in
    at most DEFAULT_PROCESSES lanes (each unit to the lane that is free first), after `cur`,
    then a gate; returns where the plan goes on. `parallel` 0: no stage (`cur`)."""
    nodes = [n for n, c in changes.items() if fetches(c)]
    if parallel <= 0 or not nodes:
        return cur
    n_lanes, size = lanes_and_size(parallel)
    chunks = _chunks(dep, nodes, size)
    n_lanes = min(n_lanes, len(chunks))
    # (free at, lane): a unit goes to the lane that is free first (a longest-first order
    # would reorder the roles the operator reads; the roles' units are near one length)
    free = [(cur.t, i) for i in range(n_lanes)]
    last: list[str | None] = [cur.after] * n_lanes
    seconds_of = _seconds_of(dep)
    for role, chunk in chunks:
        t, lane = heapq.heappop(free)
        work = {n: changes[n].services for n in chunk}
        extra = {n: list(changes[n].extra_packages) for n in chunk if changes[n].extra_packages}
        seconds = max(seconds_of(changes[n].services) for n in chunk)
        last[lane] = builder.add(
            Step.PRESTAGE,
            nodes=chunk,
            services=tuple(dict.fromkeys(s for n in chunk for s in work[n])),
            work=work,
            after=[last[lane]],
            why=f"fetch what the {role} node(s) install while their services keep serving",
            stage=Stage.PRESTAGE,
            scope=Scope.NODE,
            duration_s=seconds,
            vars={ROLE_VAR: role, **({"extra_packages": extra} if extra else {})},
        )
        heapq.heappush(free, (t + seconds, lane))
    gate = builder.gate(
        last,
        f"prestaged: {len(nodes)} node(s) hold what they install; the disruptive part starts",
        Stage.PRESTAGE,
    )
    return Cursor(gate, max(t for t, _ in free))


#: a prestage unit's role (`vars`), by which the tree and the report fold a stage of hundreds
ROLE_VAR = "stepwise_role"


def _chunks(dep: Deployment, nodes: list[str], size: int) -> list[tuple[str, list[str]]]:
    """(role, up to `size` of its nodes) in the deployment's order of roles and nodes."""
    by_role: dict[str, list[str]] = {}
    for n in nodes:
        by_role.setdefault(dep.node_by_name[n].role, []).append(n)
    return [
        (role, ns[i : i + size]) for role, ns in by_role.items() for i in range(0, len(ns), size)
    ]


def _seconds_of(dep: Deployment) -> Callable[[tuple[str, ...]], float]:
    """A node's fetch time by its services, computed once per set of services (thousands of
    nodes share a handful)."""
    catalog = dep.catalog
    known: dict[tuple[str, ...], float] = {}

    def seconds(services: tuple[str, ...]) -> float:
        if services not in known:
            known[services] = node_step_seconds([catalog[s] for s in services], Step.PRESTAGE)
        return known[services]

    return seconds
