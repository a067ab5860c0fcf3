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


def schedule_rolling(
    builder: PlanBuilder,
    visits: Mapping[str, list[Visit]],
    *,
    role_serial: Mapping[str, int],
    allowance: Mapping[str, int],
    instances: Mapping[str, int],
    start_s: float,
    after: str | None,
    stage: Stage,
    phase: Phase,
    describe: Callable[[str], str] = lambda s: s,
    tags: tuple[str, ...] = (),
) -> RollingResult:
    """Emit the units of rolling batches for `visits` (role -> visits in order).

    `allowance[s]` is how many instances of service s may be down at once (absent: no rule);
    `instances[s]` its total, for the explanations. Returns the last unit of every batch and
    the estimated end time.
    """
    pools: dict[tuple[str, str], _Pool] = {}
    for role, serial in role_serial.items():
        if visits.get(role):
            p = _Pool(serial)
            p.give(start_s, after, serial)
            pools[("role", role)] = p
    needed = {s for vs in visits.values() for v in vs for s in v.services}
    for s in sorted(needed):
        if s in allowance:
            p = _Pool(allowance[s])
            p.give(start_s, after, allowance[s])
            pools[("svc", s)] = p

    pending = {r: deque(vs) for r, vs in visits.items() if vs}
    totals = {r: len(vs) for r, vs in visits.items()}
    batch_no = {r: 0 for r in pending}
    batch_total = {r: _estimate_batches(vs, role_serial[r]) for r, vs in pending.items()}
    leader_done: dict[str, str | None] = {}
    leaders = {s for vs in visits.values() for v in vs for s in v.leads}
    active: list[_Running] = []
    seq = 0
    last_units: list[str] = []
    end_s = start_s
    t = start_s

    def fits(v: Visit, svc_need: dict[str, int]) -> bool:
        for s in v.services:
            if s in leaders and s not in v.leads and s not in leader_done:
                return False  # wait until the service's once-only migration ran
            pool = pools.get(("svc", s))
            if pool is not None and svc_need.get(s, 0) + 1 > pool.free:
                return False
        return True

    while pending or active:
        for role in list(pending):
            queue = pending[role]
            rpool = pools[("role", role)]
            while queue and rpool.free > 0:
                batch: list[Visit] = []
                svc_need: dict[str, int] = {}
                while queue and len(batch) < rpool.free and fits(queue[0], svc_need):
                    v = queue.popleft()
                    batch.append(v)
                    for s in v.services:
                        svc_need[s] = svc_need.get(s, 0) + 1
                if not batch:
                    break
                limit = _limit_reason(
                    role,
                    batch,
                    queue,
                    rpool,
                    pools,
                    svc_need,
                    role_serial[role],
                    allowance,
                    instances,
                    describe,
                )
                tails = rpool.take(len(batch))
                for s, n in svc_need.items():
                    pool = pools.get(("svc", s))
                    if pool is not None:
                        tails += pool.take(n)
                for s in sorted(
                    {s for v in batch for s in v.services if s in leaders and s not in v.leads}
                ):
                    tails.append(leader_done.get(s))
                batch_no[role] += 1
                label = builder.batch_label(role)
                # the upfront estimate can be short (rules met on the way): the last batch of a
                # role knows its number, the others say at least one more follows
                n = batch_no[role]
                of = f"{n}" if not queue else f"~{max(batch_total[role], n + 1)}"
                first_why = (
                    f"{phase or stage}: {role} batch {n} of {of} "
                    f"({len(batch)} of {totals[role]} node(s)); batch size limited by {limit}"
                )
                again = next((v.again for v in batch if v.again), "")
                if again:
                    first_why += f"; {again}"
                last, dur = _emit_batch(builder, batch, label, tails, first_why, stage, phase, tags)
                seq += 1
                heapq.heappush(
                    active,
                    _Running(
                        t + dur,
                        seq,
                        role,
                        len(batch),
                        svc_need,
                        last,
                        tuple(s for v in batch for s in v.leads),
                    ),
                )
                last_units.append(last)
            if not queue:
                del pending[role]
        if not active:
            if pending:
                stuck = ", ".join(f"{r} ({len(q)} node(s) left)" for r, q in pending.items())
                raise PlanningError(
                    f"no batch can start for {stuck}: an availability rule allows no instance down"
                )
            break
        run = heapq.heappop(active)
        t = run.end_s
        _release(pools, run, leader_done)
        while active and active[0].end_s <= t:
            _release(pools, heapq.heappop(active), leader_done)
        end_s = max(end_s, t)
    return RollingResult(last_units, end_s, sum(batch_no.values()))


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


def _limit_reason(
    role, batch, queue, rpool, pools, svc_need, serial, allowance, instances, describe
) -> str:
    if not queue:
        return (
            f"the nodes left in {role}" if len(batch) < serial else f"{role} update_serial {serial}"
        )
    if len(batch) >= rpool.free:
        return f"{role} update_serial {serial}" + (
            "" if rpool.free == serial else f" ({serial - rpool.free} still busy)"
        )
    for s in queue[0].services:
        pool = pools.get(("svc", s))
        if pool is not None and svc_need.get(s, 0) + 1 > pool.free:
            return (
                f"availability of {s} ({describe(s)}: {allowance[s]} of {instances.get(s, '?')} "
                f"instance(s) may be down at once)"
            )
    return "a service's once-only migration that must finish first"


def _emit_batch(
    builder: PlanBuilder,
    batch: list[Visit],
    label: str,
    tails: list[str | None],
    first_why: str,
    stage: Stage,
    phase: Phase,
    tags: tuple[str, ...],
) -> tuple[str, float]:
    """Add one unit per step of the batch; return the last unit's id and the batch's duration."""
    order: list[Step] = []
    for v in batch:
        for st in v.steps:
            if st.step not in order:
                order.append(st.step)
    disrupted: dict[str, list[str]] = {}
    for v in batch:
        for s in v.services:
            disrupted.setdefault(s, []).append(v.node)
    prev: list[str | None] = list(dict.fromkeys(tails))
    total = 0.0
    uid = ""
    for i, step in enumerate(order):
        work: dict[str, tuple[str, ...]] = {}
        extra: dict[str, list[str]] = {}
        step_tags: tuple[str, ...] = ()
        seconds = 0.0
        step_nodes: list[str] = []
        services: list[str] = []
        for v in batch:
            for st in v.steps:
                if st.step == step:
                    step_nodes.append(v.node)
                    work[v.node] = st.services
                    for s in st.services:
                        if s not in services:
                            services.append(s)
                    if st.extra:
                        extra[v.node] = list(st.extra)
                    step_tags = st.tags or step_tags
                    seconds = max(seconds, st.seconds)
        last = i == len(order) - 1
        why = (
            first_why
            if i == 0
            else f"{step} of {label} "
            f"({', '.join(step_nodes[:3])}{', ...' if len(step_nodes) > 3 else ''})"
        )
        uid = builder.add(
            step,
            nodes=step_nodes,
            services=services,
            after=prev,
            why=why,
            stage=step_tags[0] if step_tags else stage,
            phase=phase,
            batch=label,
            duration_s=seconds,
            work=work,
            tags=step_tags + tags,
            stops=disrupted if i == 0 else None,
            starts=disrupted if last else None,
            vars={"extra_packages": extra} if extra else None,
        )
        prev = [uid]
        total += seconds
    return uid, total
