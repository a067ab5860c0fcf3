"""A lower bound on the duration of an update or upgrade, from the work and the rules.

It does not follow the plan's structure (its batches, levels or visits): it asks what any
plan doing the same work under the same rules must spend at least.

  work       per node, the services whose code changes, its packages no service owns and
             whether it reboots: read from the plan's `packages` and `reboot` units.
  a node     needs at least one visit with every step of all its changed services (the
             merged visit: the cheapest way to do a node's work), rebooting last.
  rates      a role works on at most `update_serial` nodes at once; a service with an
             availability rule has at most its allowance of instances down at once. Each
             resource gives the bound max(total / capacity, ceil(jobs / capacity) * shortest
             job, longest job).
  order      what the workflow requires, no more: deployment-wide operations (validate, the
             prepare steps, converge) run one after another; the control plane is done
             before the data plane stops; in a major upgrade a service's new code waits
             for what it depends on to run the new release everywhere (a critical path over
             the services' dependency graph), and an offline service stops everywhere for
             its migration. A minor update has no cross-node order (schema and RPC stay
             compatible).

The sum over the parts of the largest of these is below the makespan of any schedule that
keeps the rules. Other workflows (the OS upgrade, the management node) keep a bound over the
plan's own segments: their order is the seed's procedure itself.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass

from stepwise.model.availability import service_allowances
from stepwise.model.catalog import node_step_seconds
from stepwise.model.deployment import Deployment
from stepwise.model.vocab import Phase, Section, Stage, Step, Workflow
from stepwise.plan.table import Bound, entry
from stepwise.plan.units import Plan, Unit
from stepwise.plan.visits import make_visit


def resource_bound(jobs: list[float], cap: int) -> float:
    """Least time to run `jobs` with at most `cap` at once."""
    return weighted_bound([(j, 1) for j in jobs], cap)


def weighted_bound(jobs: list[tuple[float, int]], cap: int) -> float:
    """`resource_bound` of jobs given as (seconds, how many): nodes of a role share shapes."""
    jobs = [(sec, k) for sec, k in jobs if k > 0]
    if not jobs or cap <= 0:
        return 0.0
    total = sum(sec * k for sec, k in jobs)
    count = sum(k for _, k in jobs)
    return max(
        total / cap,
        math.ceil(count / cap) * min(sec for sec, _ in jobs),
        max(sec for sec, _ in jobs),
    )


def lower_bound(plan: Plan, dep: Deployment) -> float:
    """A lower bound on the makespan of any plan doing `plan`'s work under the rules."""
    if entry(plan.workflow).bound is Bound.WORK:
        return work_bound(plan, dep)
    return segment_bound(plan, dep)


def prestage_bound(plan: Plan, dep: Deployment) -> float:
    """The prestage stage's own bound, of the work and what limits it, not of the planner's
    lanes or units: each node's fetch, at most the plan's `prestage` nodes at once (what the
    mirror serves and the connection reaches, `plan.prestage.nodes_at_once`). Counted apart
    from the disruptive part's: a gate separates them. The stage's one-off units (the
    upgrade's repository switch the fetches read from) come first, one after another.
    0 for a plan without the stage."""
    first = [u for u in plan.units if u.stage is Stage.PRESTAGE and not u.is_barrier]
    if not any(u.step is Step.PRESTAGE for u in first):
        return 0.0
    switch = sum(u.duration_s for u in first if u.step is not Step.PRESTAGE)
    catalog = dep.catalog
    known: dict[tuple[str, ...], float] = {}
    jobs: list[float] = []
    for u in first:
        if u.step is not Step.PRESTAGE:
            continue
        for services in u.work.values() if u.work is not None else [u.services] * len(u.nodes):
            if services not in known:
                known[services] = node_step_seconds(
                    [catalog[s] for s in services if s in catalog], Step.PRESTAGE
                )
            jobs.append(known[services])
    counts: dict[float, int] = defaultdict(int)
    for j in jobs:
        counts[j] += 1
    return switch + weighted_bound(list(counts.items()), int(plan.params.get("prestage") or 1))


def work_bound(plan: Plan, dep: Deployment) -> float:
    section = plan.workflow.task_section
    # the prestage stage is bounded apart (its units run side by side)
    chain = sum(
        u.duration_s
        for u in plan.units
        if not u.batch and not u.is_barrier and u.stage is not Stage.PRESTAGE
    )
    total = chain + prestage_bound(plan, dep)
    work = _work(plan.units)
    for part in (Phase.CONTROLPLANE, Phase.DATAPLANE):
        if part in work:
            total += _part_bound(dep, section, plan.workflow, *work[part])
    return total


def _work(units: Iterable[Unit]):
    """part -> (node -> rolling services, node -> unowned packages, rebooting nodes,
    offline service -> nodes)."""
    out: dict[Phase, tuple[dict, dict, set, dict]] = {}
    for u in units:
        if not u.batch or u.step not in (Step.PACKAGES, Step.REBOOT):
            continue
        rolling, extra, reboot, offline = out.setdefault(
            u.phase, (defaultdict(set), defaultdict(tuple), set(), {})
        )
        if u.step is Step.REBOOT:
            reboot.update(u.nodes)
            continue
        for n in u.nodes:
            if u.batch.startswith("group:"):
                for s in u.services_on(n):
                    offline.setdefault(s, []).append(n)
            else:
                rolling[n].update(u.services_on(n))
        for n, pkgs in (u.vars.get("extra_packages") or {}).items():
            extra[n] = extra[n] + tuple(pkgs)
    return out


def _part_bound(
    dep: Deployment,
    section: Section,
    workflow: Workflow,
    rolling: dict[str, set[str]],
    extra: dict[str, tuple[str, ...]],
    reboot: set[str],
    offline: dict[str, list[str]],
) -> float:
    """max over T of T + the least time to do, within the rates, the work that cannot start
    before T. T runs over the earliest starts the services' dependencies allow (0 in an
    update); a node's share of that work takes at least one visit with all of it."""
    allow, _ = service_allowances(dep)
    serial = {r.name: r.update_serial for r in dep.roles}
    leads = _leads(dep, section)
    visit = _Visits(dep, section, leads)
    shapes = _shapes(dep, rolling, extra, reboot, leads)
    own = _alone_seconds(shapes, visit, serial, allow)
    for s in offline:
        own[s] = _offline_seconds(dep, s, section)
    earliest = (
        _earliest_starts(dep, own) if entry(workflow).dependency_order else dict.fromkeys(own, 0.0)
    )
    bound = max((earliest[s] + own[s] for s in own), default=0.0)
    if entry(workflow).dependency_order:
        bound = max(bound, _shared_role_seconds(dep, shapes, visit, serial, own, earliest))
    merged = entry(workflow).visits_once
    for t in sorted(set(earliest.values()) | {0.0}):
        later = {s for s, e in earliest.items() if e >= t}
        rates = _Rates(shapes, visit, serial, allow, merged)
        bound = max(bound, t + _rest_seconds(t, later, rates))
    return bound


def _leads(dep: Deployment, section: Section) -> dict[str, str]:
    """Service -> its bootstrap node, for the services that migrate (once, there)."""
    catalog = dep.catalog
    return {
        s: boot.name
        for s in catalog.services
        if (boot := dep.bootstrap_node(s)) is not None
        and catalog[s].has_step(section, Step.MIGRATE)
    }


class _Visits:
    """Seconds of one visit doing some work, computed once per shape of visit."""

    def __init__(self, dep: Deployment, section: Section, leads: dict[str, str]) -> None:
        self.dep, self.section, self.leads = dep, section, leads
        self.seconds_of: dict[tuple, float] = {}

    def __call__(
        self,
        node: str,
        services: Iterable[str],
        extra_packages: tuple[str, ...] = (),
        reboot: bool = False,
    ) -> float:
        """Seconds of one visit doing this work (with the once-only migration of the services
        whose bootstrap node it is). An instance counts against its service's allowance for
        the whole visit: until its health checks pass it may not serve (the verifier's rule)."""
        dep = self.dep
        role = dep.node_by_name[node].role
        wanted = frozenset(services)
        led = tuple(s for s in sorted(wanted) if self.leads.get(s) == node)
        key = (role, wanted, extra_packages, reboot, led)
        if key not in self.seconds_of:
            v = make_visit(
                dep,
                node,
                tuple(s for s in dep.services_on(node) if s in wanted),
                self.section,
                leads=led,
                extra_packages=extra_packages,
                reboot=reboot,
            )
            self.seconds_of[key] = v.seconds
        return self.seconds_of[key]


def _shapes(
    dep: Deployment,
    rolling: dict[str, set[str]],
    extra: dict[str, tuple[str, ...]],
    reboot: set[str],
    leads: dict[str, str],
) -> dict[tuple, list]:
    """(role, changed services, unowned packages, reboots, led services) -> [a node of that
    shape, how many]. Nodes of a role share a handful of shapes (what changes, unowned
    packages, reboot, the bootstrap node's once-only work): 10,000 nodes are a few dozen
    shapes, each computed once."""
    shapes: dict[tuple, list] = {}
    for n in set(rolling) | set(extra) | reboot:
        key = (
            dep.node_by_name[n].role,
            frozenset(rolling.get(n, ())),
            extra.get(n, ()),
            n in reboot,
            tuple(sorted(s for s in rolling.get(n, ()) if leads.get(s) == n)),
        )
        if key in shapes:
            shapes[key][1] += 1
        else:
            shapes[key] = [n, 1]
    return shapes


def _alone_seconds(
    shapes: dict[tuple, list], visit: _Visits, serial: dict[str, int], allow: dict[str, int]
) -> dict[str, float]:
    """Each service alone: its instances' visits within its allowance and its roles'
    serials."""
    own: dict[str, float] = {}
    alone: dict[str, dict[str, list[tuple[float, int]]]] = defaultdict(lambda: defaultdict(list))
    for (role, work, _, _, _), (n, k) in shapes.items():
        for s in work:
            alone[s][role].append((visit(n, (s,)), k))
    for s, per_role in alone.items():
        jobs = [j for js in per_role.values() for j in js]
        own[s] = max(
            [max(sec for sec, _ in js) for js in per_role.values()]
            + [weighted_bound(js, serial[r]) for r, js in per_role.items()]
            + ([weighted_bound(jobs, allow[s])] if s in allow else [])
        )
    return own


@dataclass(frozen=True)
class _Rates:
    """What the rate bounds read: the nodes' shapes of work, visit times, the roles' serials,
    the services' allowances, and whether the workflow visits each node once (`merged`)."""

    shapes: dict[tuple, list]
    visit: _Visits
    serial: dict[str, int]
    allow: dict[str, int]
    merged: bool


def _rest_seconds(t: float, later: set[str], rates: _Rates) -> float:
    """The least time, within the rates, for the work that cannot start before `t`: the
    services in `later` (and, from 0, the nodes' unowned packages and reboots).

    An instance is down at least for a visit of its own (and the node's reboot); where the
    workflow stops each node once (`merged`), for the node's whole visit: every changed
    service of the node is cycled in it, so each is out of service from its first step to
    its health checks at the end."""
    shapes, visit, serial, allow = rates.shapes, rates.visit, rates.serial, rates.allow
    role_jobs: dict[str, list[tuple[float, int]]] = defaultdict(list)
    svc_jobs: dict[str, list[tuple[float, int]]] = defaultdict(list)
    for (role, all_work, extra_pkgs, reboots, _), (n, k) in shapes.items():
        work = all_work & later
        if not work and not (t == 0.0 and (extra_pkgs or reboots)):
            continue
        role_jobs[role].append((visit(n, work, extra_pkgs if t == 0.0 else (), reboots), k))
        whole = visit(n, work, (), reboots) if rates.merged else 0.0
        for s in work:
            if s in allow:
                svc_jobs[s].append((whole or visit(n, (s,), (), reboots), k))
    return max(
        [max(sec for sec, _ in js) for js in role_jobs.values()]
        + [weighted_bound(js, serial[r]) for r, js in role_jobs.items()]
        + [weighted_bound(js, allow[s]) for s, js in svc_jobs.items()],
        default=0.0,
    )


# how many services of one role the shared-role term orders (2^k subsets of them): the ones
# whose dependents' chains are the longest; any subset gives a valid bound
SHARED_ROLE_SERVICES = 6


def _tails(dep: Deployment, own: dict[str, float]) -> dict[str, float]:
    """Per service, the least time its dependents need after it is done everywhere: the
    longest chain of `own` seconds over what depends on it (the critical path's other end)."""
    users: dict[str, list[str]] = defaultdict(list)
    for s in own:
        for d in dep.catalog[s].depends_on:
            if d in own and d != s:
                users[d].append(s)
    tail: dict[str, float] = {}

    def walk(s: str, trail: tuple[str, ...] = ()) -> float:
        if s not in tail:
            tail[s] = max(
                (own[u] + walk(u, trail + (s,)) for u in users[s] if u not in trail),
                default=0.0,
            )
        return tail[s]

    for s in own:
        walk(s)
    return tail


def _shared_role_seconds(
    dep: Deployment,
    shapes: dict[tuple, list],
    visit: _Visits,
    serial: dict[str, int],
    own: dict[str, float],
    earliest: dict[str, float],
) -> float:
    """Services that feed chains and share a role share that role's serial: the chains
    after them cannot all start early (docs/lower-bound.md, "Services sharing a role").

    In any plan, order a role's services S by when each is done everywhere: s1, ..., sk. When
    sj is done, the role has done all of s1..sj on its nodes, which began no earlier than the
    first of them may start, and at most `update_serial` of its nodes at once, each for at
    least one visit with its share of that work; what depends on sj follows for at least
    sj's tail. The bound is the least, over every order, of the largest of these; a dynamic
    program over the subsets finds it."""
    tails = _tails(dep, own)
    per_role: dict[str, list[tuple[tuple, list]]] = defaultdict(list)
    for key, nk in shapes.items():
        per_role[key[0]].append((key, nk))
    bound = 0.0
    for role, role_shapes in per_role.items():
        feeding = {s for (_, work, *_), _ in role_shapes for s in work if tails.get(s, 0.0) > 0}
        chosen = sorted(feeding, key=lambda s: (-(tails[s] + own[s]), s))[:SHARED_ROLE_SERVICES]
        if len(chosen) < 2:
            continue
        bit = {s: 1 << i for i, s in enumerate(chosen)}
        best = [0.0] * (1 << len(chosen))
        for subset in range(1, len(best)):
            members = frozenset(s for s in chosen if subset & bit[s])
            shares = [(n, k, work & members) for (_, work, *_), (n, k) in role_shapes]
            jobs = [(visit(n, share), k) for n, k, share in shares if share]
            # a node's share may be split over visits (preemption): McNaughton's bound only
            total = sum(sec * k for sec, k in jobs)
            done = min(earliest[s] for s in members) + max(
                total / max(1, serial[role]), max(sec for sec, _ in jobs)
            )
            best[subset] = min(
                max(best[subset ^ bit[s]], max(done, earliest[s] + own[s]) + tails[s])
                for s in members
            )
        bound = max(bound, best[-1])
    return bound


def _offline_seconds(dep: Deployment, service: str, section: Section) -> float:
    """An offline service's window: stop, packages, configuration, migration and start, one
    after another on all its nodes together."""
    svc = dep.catalog[service]
    steps = [Step.STOP, Step.PACKAGES, Step.START]
    steps += [st for st in (Step.CONFIG, Step.MIGRATE) if svc.has_step(section, st)]
    return sum(node_step_seconds([svc], st) for st in steps)


def _earliest_starts(dep: Deployment, own: dict[str, float]) -> dict[str, float]:
    """Earliest start of each service's new code: after what it depends on (among the
    services this part changes; the verifier's rule) is done everywhere."""
    catalog = dep.catalog
    finish: dict[str, float] = {}
    start: dict[str, float] = {}

    def ef(s: str, trail: tuple[str, ...] = ()) -> float:
        if s not in finish:
            deps = [d for d in catalog[s].depends_on if d in own and d not in trail]
            start[s] = max((ef(d, trail + (s,)) for d in deps), default=0.0)
            finish[s] = start[s] + own[s]
        return finish[s]

    for s in own:
        ef(s)
    return start


def segments(plan: Plan) -> list[list[Unit]]:
    out: list[list[Unit]] = [[]]
    for u in plan.units:
        if u.is_barrier:
            out.append([])
        else:
            out[-1].append(u)
    return [s for s in out if s]


def segment_bound(plan: Plan, dep: Deployment) -> float:
    """For procedures whose order is fixed by the seed: the sum over the plan's segments
    (between gates) of the largest of its chain of non-batch work, its longest batch and the
    per-resource bounds of its rolling batches."""
    allow, _ = service_allowances(dep)
    serial = {r.name: r.update_serial for r in dep.roles}
    total = 0.0
    for seg in segments(plan):
        chain = sum(u.duration_s for u in seg if not u.batch or u.batch.startswith("group:"))
        batch_time: dict[str, float] = defaultdict(float)
        batch_nodes: dict[str, set[str]] = defaultdict(set)
        batch_down: dict[str, dict[str, list[str]]] = {}
        for u in seg:
            if u.batch and not u.batch.startswith("group:"):
                batch_time[u.batch] += u.duration_s
                batch_nodes[u.batch].update(u.nodes)
                if u.stops:
                    batch_down[u.batch] = {s: list(ns) for s, ns in u.stops.items()}
        role_jobs: dict[str, list[float]] = defaultdict(list)
        svc_jobs: dict[str, list[float]] = defaultdict(list)
        for b, d in batch_time.items():
            for n in batch_nodes[b]:
                role_jobs[dep.node_by_name[n].role].append(d)
            for s, ns in batch_down.get(b, {}).items():
                svc_jobs[s].extend([d] * len(ns))
        bound = max(batch_time.values(), default=0.0)
        for r, jobs in role_jobs.items():
            bound = max(bound, resource_bound(jobs, serial[r]))
        for s, jobs in svc_jobs.items():
            if s in allow:
                bound = max(bound, resource_bound(jobs, allow[s]))
        total += max(chain, bound) if not batch_time else chain + bound
    return total
