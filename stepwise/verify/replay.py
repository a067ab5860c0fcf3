"""Discrete-event replay of a plan: who is down, on which OS, pinned or not, at every moment.

The events of a schedule in time order (`timeline`), the schedules to replay
(`perturbed_times`), and the one loop (`Replay`) that moves the cloud's state at each event and
calls the hooks of the invariants (`Invariant`; the rules are in `invariants.py`)."""

from __future__ import annotations

import heapq
import random
from collections.abc import Iterator
from dataclasses import dataclass
from typing import ClassVar

from stepwise.model.deployment import Deployment
from stepwise.model.vocab import Step
from stepwise.plan.units import Plan, Unit
from stepwise.verify.prepared import Prepared, State


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


def fmt_time(t: float) -> str:
    """Seconds from the plan's start as h:mm:ss, as the problems say it."""
    m, s = divmod(int(round(t)), 60)
    h, m = divmod(m, 60)
    return f"{h}:{m:02d}:{s:02d}"


def where(u: Unit) -> str:
    """The unit as the problems name it: its id, step and first nodes."""
    nodes = ", ".join(u.nodes[:3]) + (", ..." if len(u.nodes) > 3 else "")
    return f"unit {u.id} ({u.step} on {nodes or 'the deployment'})"


class Replay:
    """One replay of a plan's schedule: the cloud as it stands at the current event (what is
    down, on new code, on the new OS, pinned; how many instances of each RPC group still run
    old code), the problems found so far in the order found, and the loop that moves the state
    and calls the invariants' hooks."""

    def __init__(self, plan: Plan, dep: Deployment, pre: Prepared) -> None:
        self.plan, self.dep, self.pre = plan, dep, pre
        init = pre.initial
        self.state = State(
            {s: set(ns) for s, ns in init.down.items()},
            {s: set(ns) for s, ns in init.new_code.items()},
            set(init.new_os),
            set(init.pinned),
        )
        self.old_count = dict(pre.old_count)
        self.problems = list(pre.static_problems)

    def run(self, observers: list[Invariant], times: dict[str, tuple[float, float]] | None) -> None:
        """Walk the tracked units' events in time order, then the observers' `at_end`."""
        hooks = _Hooks(observers)
        for t, kind, _, u in timeline(self.pre.tracked, times):
            if kind == 1:
                self._start(hooks, u, t)
            else:
                self._end(hooks, u, t)
        for at_end in hooks.at_end:
            at_end()

    def _start(self, hooks: _Hooks, u: Unit, t: float) -> None:
        # the rules see the cloud as the unit finds it; what it stops goes down after them
        for h in hooks.start.get(u.step, hooks.start_any):
            h(u, t)
        st = self.state
        if u.step is Step.UNPIN_RPC:
            for s in u.services:
                g = self.pre.rpc_of.get(s)
                if g:
                    st.pinned.discard(g)
        down = st.down
        for s, nodes in u.stops.items():
            d = down.get(s)
            if d is None:
                d = down[s] = set()
            d.update(nodes)
            for h in hooks.stop:
                h(u, t, s, d)

    def _end(self, hooks: _Hooks, u: Unit, t: float) -> None:
        # what the unit did (pin, new OS) holds for the services it brings back
        st = self.state
        if u.step is Step.PIN_RPC:
            rpc_of = self.pre.rpc_of
            st.pinned.update(rpc_of[s] for s in u.services if s in rpc_of)
        elif u.step is Step.SYSTEM_UPGRADE_RUN:
            st.new_os.update(u.nodes)
        for h in hooks.end.get(u.step, hooks.end_any):
            h(u, t)
        if not u.starts:
            return
        down, new_code, old_count = st.down, st.new_code, self.old_count
        rpc_of = self.pre.rpc_of
        new_code_on = self.pre.new_code_on[u.id]
        for s, serving in u.starts.items():
            d = down.get(s)
            if d is None:
                d = down[s] = set()
            d.difference_update(serving)
            for h in hooks.serving:
                h(u, t, s, serving, d)
            nodes = new_code_on[s]
            if not nodes:
                continue  # restarted (a reboot), not upgraded
            newly = new_code.get(s)
            if newly is None:
                newly = new_code[s] = set()
            before = len(newly)
            newly.update(nodes)
            g = rpc_of.get(s)
            if g:
                old_count[g] -= len(newly) - before
            for h in hooks.new_code:
                h(u, t, s, nodes)


class Invariant:
    """A rule checked on a replay. A rule overrides the hooks it needs; the replay calls only
    those, in `invariants.INVARIANTS` order, each with the state already moved by the event:

    on_start(u, t)                       a unit starts (before what it stops goes down)
    on_stop(u, t, service, down)         it took `service` down; `down`: its nodes down now
    on_end(u, t)                         a unit ends (before what it starts serves again)
    on_serving(u, t, service, serving, down)   it brought `service` back on `serving`
    on_new_code(u, t, service, nodes)    ... on new code on `nodes` (counted in the state)
    at_end()                             after the last event

    `steps`: the steps whose units call `on_start` and `on_end` (None: every unit).
    A rule appends what it finds to `replay.problems`, in the words an operator reads."""

    steps: ClassVar[frozenset[Step] | None] = None

    def __init__(self, replay: Replay) -> None:
        self.replay = replay
        self.problems = replay.problems

    @classmethod
    def applies(cls, pre: Prepared) -> bool:
        """Whether the rule can find anything in this plan (else it is not replayed)."""
        return True

    def on_start(self, u: Unit, t: float) -> None: ...

    def on_stop(self, u: Unit, t: float, service: str, down: set[str]) -> None: ...

    def on_end(self, u: Unit, t: float) -> None: ...

    def on_serving(
        self, u: Unit, t: float, service: str, serving: tuple[str, ...], down: set[str]
    ) -> None: ...

    def on_new_code(self, u: Unit, t: float, service: str, nodes: tuple[str, ...]) -> None: ...

    def at_end(self) -> None: ...


class _Hooks:
    """The observers' overridden hooks, as lists of bound methods (per step for the start and
    end of a unit), so that a replay calls nothing that does nothing."""

    def __init__(self, observers: list[Invariant]) -> None:
        def overriding(name: str) -> list[Invariant]:
            base = getattr(Invariant, name)
            return [o for o in observers if getattr(type(o), name) is not base]

        def bound(name: str) -> list:
            return [getattr(o, name) for o in overriding(name)]

        def per_step(name: str) -> tuple[dict, list]:
            obs = overriding(name)
            every = [getattr(o, name) for o in obs if o.steps is None]
            return {
                step: [getattr(o, name) for o in obs if o.steps is None or step in o.steps]
                for step in Step
            }, every

        self.start, self.start_any = per_step("on_start")
        self.end, self.end_any = per_step("on_end")
        self.stop = bound("on_stop")
        self.serving = bound("on_serving")
        self.new_code = bound("on_new_code")
        self.at_end = bound("at_end")
