"""The rolling scheduler: node visits -> batches -> units, keeping every availability rule.

A small algorithm kept apart from the workflows that feed it (as resolvelib keeps its
resolver apart from providers). Input: node visits grouped by role, the role serial and each
service's allowance of instances down at once. It simulates time greedily: whenever capacity
frees, each role starts the largest batch that fits its serial and every service's allowance.

The DAG must stay safe when real durations differ from the estimates, so capacity is passed
along explicit chains (a "partial order schedule"): a batch that reuses capacity released by
an earlier batch gets an edge from that batch's last unit. Then any execution that respects
the edges never has more nodes/instances down than the rules allow.
"""

from __future__ import annotations

import heapq
import math
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Required, TypedDict, Unpack

from stepwise.model.vocab import Phase, Stage, Step
from stepwise.plan.builder import PlanBuilder
from stepwise.plan.visits import Visit


@dataclass
class _Pool:
    """Released capacity of one resource, as chains ending at the unit that released them."""

    cap: int
    heap: list = field(default_factory=list)
    free: int = 0
    seq: int = 0

    def give(self, t: float, tail: str | None, count: int) -> None:
        self.seq += 1
        heapq.heappush(self.heap, (t, self.seq, tail, count))
        self.free += count

    def take(self, count: int) -> list[str]:
        tails: list[str] = []
        self.free -= count
        while count > 0:
            t, seq, tail, have = heapq.heappop(self.heap)
            if tail is not None:
                tails.append(tail)
            if have > count:
                heapq.heappush(self.heap, (t, seq, tail, have - count))
                count = 0
            else:
                count -= have
        return tails


@dataclass
class RollingResult:
    last_units: list[str]
    end_s: float
    batches: int


class PlanningError(Exception):
    """The rules leave no way to proceed (should be caught by validation first)."""


class RollingRules(TypedDict, total=False):
    """The availability rules a rolling schedule keeps: each role's serial (`role_serial`),
    each service's allowance of instances down at once (`allowance`, absent: no rule), each
    service's total (`instances`) and a rule's description (`describe`, optional), the last
    two for the explanations."""

    role_serial: Required[Mapping[str, int]]
    allowance: Required[Mapping[str, int]]
    instances: Required[Mapping[str, int]]
    describe: Callable[[str], str]


@dataclass(frozen=True)
class _Where:
    """Where the batches go in the plan: the stage, phase and tags of their units."""

    stage: Stage
    phase: Phase
    tags: tuple[str, ...]


def schedule_rolling(
    builder: PlanBuilder,
    visits: Mapping[str, list[Visit]],
    *,
    start_s: float,
    after: str | None,
    stage: Stage,
    phase: Phase,
    tags: tuple[str, ...] = (),
    role_starts: Mapping[str, tuple[float, str | None]] | None = None,
    **rules: Unpack[RollingRules],
) -> RollingResult:
    """Emit the units of rolling batches for `visits` (role -> visits in order).

    `rules` (RollingRules): `allowance[s]` is how many instances of service s may be down at
    once (absent: no rule); `instances[s]` its total, for the explanations. `role_starts`:
    a role that may not start with the others (its nodes still busy with earlier work): when
    and after which unit its serial opens. Returns the last unit of every batch and the
    estimated end time.
    """
    rolling = _Rolling(
        builder,
        visits,
        role_serial=rules["role_serial"],
        allowance=rules["allowance"],
        instances=rules["instances"],
        describe=rules.get("describe", lambda s: s),
        where=_Where(stage, phase, tags),
    )
    rolling.open_pools(start_s, after, role_starts or {})
    return rolling.run(start_s)


class _Rolling:
    """One run of the rolling scheduler: the capacity pools, the visits still waiting per
    role, the batches running, and the units emitted so far."""

    def __init__(
        self,
        builder: PlanBuilder,
        visits: Mapping[str, list[Visit]],
        *,
        role_serial: Mapping[str, int],
        allowance: Mapping[str, int],
        instances: Mapping[str, int],
        describe: Callable[[str], str],
        where: _Where,
    ) -> None:
        self.builder = builder
        self.visits = visits
        self.role_serial = role_serial
        self.allowance = allowance
        self.instances = instances
        self.describe = describe
        self.where = where
        self.pools: dict[tuple[str, str], _Pool] = {}
        self.pending = {r: deque(vs) for r, vs in visits.items() if vs}
        self.totals = {r: len(vs) for r, vs in visits.items()}
        self.batch_no = {r: 0 for r in self.pending}
        self.batch_total = {
            r: _estimate_batches(vs, role_serial[r]) for r, vs in self.pending.items()
        }
        self.leader_done: dict[str, str | None] = {}
        self.leaders = {s for vs in visits.values() for v in vs for s in v.leads}
        self.active: list[_Running] = []
        self.seq = 0
        self.last_units: list[str] = []
        #: roles whose serial opens later than the start: (when, after which unit, role)
        self.openings: list[tuple[float, str | None, str]] = []

    def open_pools(
        self,
        start_s: float,
        after: str | None,
        role_starts: Mapping[str, tuple[float, str | None]],
    ) -> None:
        """Full capacity at the start, released by `after`: each role's serial (a role of
        `role_starts` at its own time, after its own unit), each ruled service's allowance."""
        for role in self.role_serial:
            if not self.visits.get(role):
                continue
            t, tail = role_starts.get(role, (start_s, after))
            if t > start_s:
                heapq.heappush(self.openings, (t, tail, role))
            else:
                self.open_role(role, start_s, tail)
        needed = {s for vs in self.visits.values() for v in vs for s in v.services}
        for s in sorted(needed):
            if s in self.allowance:
                p = _Pool(self.allowance[s])
                p.give(start_s, after, self.allowance[s])
                self.pools[("svc", s)] = p

    def open_role(self, role: str, t: float, tail: str | None) -> None:
        """The role's whole serial free from `t`, released by unit `tail`."""
        p = _Pool(self.role_serial[role])
        p.give(t, tail, self.role_serial[role])
        self.pools[("role", role)] = p

    def run(self, start_s: float) -> RollingResult:
        """Simulate time: start what fits, then jump to the next batch's end and free its
        capacity, until every visit is scheduled."""
        end_s = t = start_s
        while self.pending or self.active:
            while self.openings and self.openings[0][0] <= t:
                _, tail, role = heapq.heappop(self.openings)
                self.open_role(role, t, tail)
            for role in self.longest_first():
                self.start_batches(role, t)
            if self.openings and (not self.active or self.openings[0][0] < self.active[0].end_s):
                t = self.openings[0][0]  # a role's nodes are free: open its serial then
                continue
            if not self.active:
                if self.pending:
                    stuck = ", ".join(
                        f"{r} ({len(q)} node(s) left)" for r, q in self.pending.items()
                    )
                    raise PlanningError(
                        f"no batch can start for {stuck}: an availability rule allows no "
                        "instance down"
                    )
                break
            run = heapq.heappop(self.active)
            t = run.end_s
            _release(self.pools, run, self.leader_done)
            while self.active and self.active[0].end_s <= t:
                _release(self.pools, heapq.heappop(self.active), self.leader_done)
            end_s = max(end_s, t)
        return RollingResult(self.last_units, end_s, sum(self.batch_no.values()))

    def longest_first(self) -> list[str]:
        """The roles with visits left, the one whose own serial leaves it the most time to go
        first: roles sharing an allowance (computes of several racks under one 20 % rule) that
        took it in the deployment's order ran the rack with the smallest serial last, alone,
        long after the others (1.29x the bound on such clouds); ties keep the deployment's
        order."""

        def left(role: str) -> float:
            queue = self.pending[role]
            return math.ceil(len(queue) / max(1, self.role_serial[role])) * queue[0].seconds

        opened = [r for r in self.pending if ("role", r) in self.pools]
        return sorted(opened, key=left, reverse=True)

    def fits(self, v: Visit, svc_need: dict[str, int]) -> bool:
        """Whether visit `v` may join a batch already needing `svc_need` of each service."""
        for s in v.services:
            if s in self.leaders and s not in v.leads and s not in self.leader_done:
                return False  # wait until the service's once-only migration ran
            pool = self.pools.get(("svc", s))
            if pool is not None and svc_need.get(s, 0) + 1 > pool.free:
                return False
        return True

    def start_batches(self, role: str, t: float) -> None:
        """Start at time `t` as many batches of `role` as its free capacity allows."""
        queue = self.pending[role]
        rpool = self.pools[("role", role)]
        while queue and rpool.free > 0:
            batch: list[Visit] = []
            svc_need: dict[str, int] = {}
            while queue and len(batch) < rpool.free and self.fits(queue[0], svc_need):
                v = queue.popleft()
                batch.append(v)
                for s in v.services:
                    svc_need[s] = svc_need.get(s, 0) + 1
            if not batch:
                break
            self.start_batch(role, batch, svc_need, t)
        if not queue:
            del self.pending[role]

    def start_batch(
        self, role: str, batch: list[Visit], svc_need: dict[str, int], t: float
    ) -> None:
        """Emit the units of one batch of `role`, waiting for the capacity it takes."""
        queue = self.pending[role]
        rpool = self.pools[("role", role)]
        limit = self.limit_reason(role, batch, queue, svc_need)
        tails = self.take_capacity(rpool, batch, svc_need)
        self.batch_no[role] += 1
        label = self.builder.batch_label(role)
        last, dur = _emit_batch(
            self.builder, batch, label, tails, self.batch_why(role, batch, limit), self.where
        )
        self.seq += 1
        heapq.heappush(
            self.active,
            _Running(
                t + dur,
                self.seq,
                role,
                len(batch),
                svc_need,
                last,
                tuple(s for v in batch for s in v.leads),
            ),
        )
        self.last_units.append(last)

    def take_capacity(
        self, rpool: _Pool, batch: list[Visit], svc_need: dict[str, int]
    ) -> list[str | None]:
        """Take the batch's nodes and service instances from their pools; return the units
        that released them (and the once-only migrations the batch waits for)."""
        tails: list[str | None] = list(rpool.take(len(batch)))
        for s, n in svc_need.items():
            pool = self.pools.get(("svc", s))
            if pool is not None:
                tails += pool.take(n)
        for s in sorted(
            {s for v in batch for s in v.services if s in self.leaders and s not in v.leads}
        ):
            tails.append(self.leader_done.get(s))
        return tails

    def batch_why(self, role: str, batch: list[Visit], limit: str) -> str:
        """The first unit's why: which batch of the role, and what limited its size."""
        where = self.where
        # the upfront estimate can be short (rules met on the way): the last batch of a
        # role knows its number, the others say at least one more follows
        n = self.batch_no[role]
        of = f"{n}" if not self.pending[role] else f"~{max(self.batch_total[role], n + 1)}"
        why = (
            f"{where.phase or where.stage}: {role} batch {n} of {of} "
            f"({len(batch)} of {self.totals[role]} node(s)); batch size limited by {limit}"
        )
        again = next((v.again for v in batch if v.again), "")
        if again:
            why += f"; {again}"
        reconfigured = sorted({s for v in batch for s in v.reconfigured})
        if reconfigured:
            shown = ", ".join(reconfigured[:4]) + (", ..." if len(reconfigured) > 4 else "")
            why += f"; configuration changed: {shown} restart(s) to read it (no package change)"
        images = sorted({i for v in batch for i in v.images})
        if images:
            why += "; " + ", ".join(images[:4]) + (", ..." if len(images) > 4 else "")
        return why

    def limit_reason(
        self, role: str, batch: list[Visit], queue: deque[Visit], svc_need: dict[str, int]
    ) -> str:
        """What kept the batch from growing: the role's serial, the nodes left, a service's
        availability rule or a once-only migration still to run."""
        serial = self.role_serial[role]
        rpool = self.pools[("role", role)]
        if not queue:
            return (
                f"the nodes left in {role}"
                if len(batch) < serial
                else f"{role} update_serial {serial}"
            )
        if len(batch) >= rpool.free:
            return f"{role} update_serial {serial}" + (
                "" if rpool.free == serial else f" ({serial - rpool.free} still busy)"
            )
        for s in queue[0].services:
            pool = self.pools.get(("svc", s))
            if pool is not None and svc_need.get(s, 0) + 1 > pool.free:
                return (
                    f"availability of {s} ({self.describe(s)}: {self.allowance[s]} of "
                    f"{self.instances.get(s, '?')} instance(s) may be down at once)"
                )
        return "a service's once-only migration that must finish first"


@dataclass(order=True)
class _Running:
    end_s: float
    seq: int
    role: str = field(compare=False)
    size: int = field(compare=False)
    svc_need: dict = field(compare=False)
    last: str = field(compare=False)
    leads: tuple = field(compare=False)


def _release(pools: dict, run: _Running, leader_done: dict) -> None:
    pools[("role", run.role)].give(run.end_s, run.last, run.size)
    for s, n in run.svc_need.items():
        pool = pools.get(("svc", s))
        if pool is not None:
            pool.give(run.end_s, run.last, n)
    for s in run.leads:
        leader_done[s] = run.last


def _estimate_batches(vs: list[Visit], serial: int) -> int:
    return max(1, math.ceil(len(vs) / max(1, serial)))


@dataclass
class _StepWork:
    """One step of a batch across its nodes: who does it, on what, how long (gathered over
    the batch's visits by `_steps_work`, read-only afterwards)."""

    nodes: list[str]
    services: list[str]
    work: dict[str, tuple[str, ...]]
    extra: dict[str, list[str]]
    tags: tuple[str, ...]
    seconds: float
    vars: dict[str, Any]


def _steps_work(batch: list[Visit]) -> dict[Step, _StepWork]:
    """What each step of the batch does on each node that has it, the steps in the order the
    batch's visits name them: one pass over the batch (a step at a time made it the planner's
    hottest loop, each step asking every visit of a 200-node batch for its steps again)."""
    out: dict[Step, _StepWork] = {}
    seen: dict[Step, dict[str, None]] = {}  # the step's services, in order, without repeats
    lists: dict[Step, set[tuple[str, ...]]] = {}  # the service lists already taken (most repeat)
    for v in batch:
        for st in v.steps:
            sw = out.get(st.step)
            if sw is None:
                sw = out[st.step] = _StepWork([], [], {}, {}, (), 0.0, {})
                seen[st.step] = {}
                lists[st.step] = set()
            sw.nodes.append(v.node)
            sw.work[v.node] = st.services
            if st.services not in lists[st.step]:
                lists[st.step].add(st.services)
                seen[st.step].update(dict.fromkeys(st.services))
            if st.extra:
                sw.extra[v.node] = list(st.extra)
            sw.tags = st.tags or sw.tags
            for k, val in st.vars.items():
                # a dict per node (service -> node) merges: the batch's nodes may differ
                if isinstance(val, Mapping):
                    merged = sw.vars.get(k)
                    if not isinstance(merged, dict) or merged is val:
                        merged = sw.vars[k] = dict(merged or {})
                    merged.update(val)
                else:
                    sw.vars[k] = val
            sw.seconds = max(sw.seconds, st.seconds)
    for step, sw in out.items():
        sw.services = list(seen[step])
    return out


def _emit_batch(
    builder: PlanBuilder,
    batch: list[Visit],
    label: str,
    tails: list[str | None],
    first_why: str,
    where: _Where,
) -> tuple[str, float]:
    """Add one unit per step of the batch; return the last unit's id and the batch's duration."""
    steps = _steps_work(batch)
    order = list(steps)
    disrupted: dict[str, list[str]] = {}
    for v in batch:
        for s in v.services:
            disrupted.setdefault(s, []).append(v.node)
    prev: list[str | None] = list(dict.fromkeys(tails))
    total = 0.0
    uid = ""
    for i, step in enumerate(order):
        sw = steps[step]
        last = i == len(order) - 1
        why = (
            first_why
            if i == 0
            else f"{step} of {label} "
            f"({', '.join(sw.nodes[:3])}{', ...' if len(sw.nodes) > 3 else ''})"
        )
        uid = builder.add(
            step,
            nodes=sw.nodes,
            services=sw.services,
            after=prev,
            why=why,
            stage=sw.tags[0] if sw.tags else where.stage,
            phase=where.phase,
            batch=label,
            duration_s=sw.seconds,
            work=sw.work,
            tags=sw.tags + where.tags,
            stops=disrupted if i == 0 else None,
            starts=disrupted if last else None,
            vars={**sw.vars, **({"extra_packages": sw.extra} if sw.extra else {})} or None,
        )
        prev = [uid]
        total += sw.seconds
    return uid, total
