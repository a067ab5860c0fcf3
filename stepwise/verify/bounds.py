"""A lower bound on the duration of the same work under the same rules.

The plan is a chain of segments separated by gates (levels, stages, parts). A segment's time
is at least its longest chain of work, at least the time of its longest node visit, and for
every resource (a role's serial, a service's allowance of instances down) at least the work
that needs it divided by its capacity, rounded up to whole visits when they are alike. The
sum over segments is a lower bound of any schedule that keeps the same rules and order.
"""

from __future__ import annotations

import math
from collections import defaultdict

from stepwise.model.deployment import Deployment
from stepwise.plan.rollout import service_allowances
from stepwise.plan.units import Plan, Unit


def _resource_bound(jobs: list[float], cap: int) -> float:
    if not jobs or cap <= 0:
        return 0.0
    return max(sum(jobs) / cap, math.ceil(len(jobs) / cap) * min(jobs), max(jobs))


def segments(plan: Plan) -> list[list[Unit]]:
    out: list[list[Unit]] = [[]]
    for u in plan.units:
        if u.is_barrier:
            out.append([])
        else:
            out[-1].append(u)
    return [s for s in out if s]


def lower_bound(plan: Plan, dep: Deployment) -> float:
    """Sum over segments of the largest of: chain of non-batch work, longest visit, and the
    per-resource bounds of the rolling batches."""
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
            bound = max(bound, _resource_bound(jobs, serial[r]))
        for s, jobs in svc_jobs.items():
            if s in allow:
                bound = max(bound, _resource_bound(jobs, allow[s]))
        total += max(chain, bound) if not batch_time else chain + bound
    return total
