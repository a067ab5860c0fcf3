"""Discrete-event replay of a plan: who is down, on which OS, pinned or not, at every moment."""

from __future__ import annotations

import heapq
import random
from collections.abc import Iterator
from dataclasses import dataclass, field

from stepwise.plan.units import Unit


@dataclass(frozen=True, slots=True)
class Event:
    t: float
    kind: int  # 0 = a unit ends (capacity comes back first), 1 = a unit starts
    index: int  # unit position, for a deterministic order
    unit: Unit


def timeline(
    units: list[Unit] | tuple[Unit, ...], times: dict[str, tuple[float, float]] | None = None
) -> Iterator[tuple[float, int, int, Unit]]:
    """`events` as plain (t, kind, index, unit) tuples, cheaper to make than Event objects."""
    if times is None:
        order = sorted(range(len(units)), key=lambda i: (units[i].start_s, i))
    else:
        order = sorted(range(len(units)), key=lambda i: (times[units[i].id][0], i))
    ends: list[tuple[float, int]] = []
    pop, push = heapq.heappop, heapq.heappush
    for i in order:
        u = units[i]
        start, end = times[u.id] if times is not None else (u.start_s, u.end_s)
        while ends and ends[0][0] <= start:
            t, j = pop(ends)
            yield t, 0, j, units[j]
        yield start, 1, i, u
        push(ends, (end, i))
    while ends:
        t, j = pop(ends)
        yield t, 0, j, units[j]


def events(
    units: list[Unit] | tuple[Unit, ...], times: dict[str, tuple[float, float]] | None = None
) -> Iterator[Event]:
    """Start and end events in time order. Before each start, every unit that has ended by
    then is closed first, so a batch that waits for another may start the moment the other
    ends, and a zero-length unit still starts before it ends.

    Leaving units out keeps the others' events in the same relative order (an end comes
    before a start exactly when it is not later; ties go by position), so a replay may skip
    the units that change nothing it tracks."""
    for t, kind, i, u in timeline(units, times):
        yield Event(t, kind, i, u)


def perturbed_times(
    units: list[Unit] | tuple[Unit, ...], seed: int, spread: float = 0.9
) -> dict[str, tuple[float, float]]:
    """ASAP times with every duration scaled by a random factor in [1-spread, 1+3*spread]:
    a DAG that is only safe for the estimated durations fails here."""
    rng = random.Random(seed)
    end: dict[str, float] = {}
    times: dict[str, tuple[float, float]] = {}
    for u in units:
        start = max((end[a] for a in u.after if a in end), default=0.0)
        d = u.duration_s * rng.uniform(1 - spread, 1 + 3 * spread)
        end[u.id] = start + d
        times[u.id] = (start, start + d)
    return times


@dataclass
class State:
    """The cloud as the replay sees it."""

    down: dict[str, set[str]] = field(default_factory=dict)  # service -> nodes not serving
    new_code: dict[str, set[str]] = field(default_factory=dict)  # service -> nodes on new code
    new_os: set[str] = field(default_factory=set)
    pinned: set[str] = field(default_factory=set)  # rpc groups pinned

    def serving(self, service: str, nodes: tuple[str, ...]) -> list[str]:
        d = self.down.get(service, set())
        return [n for n in nodes if n not in d]
