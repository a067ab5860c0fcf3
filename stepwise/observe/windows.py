"""Measured downtime against the plan's announced windows.

A window is announced in plan time (estimated seconds); the run happens in wall-clock time.
The units a window spans were recorded with their real start and end, which gives the
window's wall-clock interval; an outage of a service's VIP is "announced" when it falls
inside one of its service's intervals (give or take `slack` for probe period and detection).
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping
from typing import Any

from stepwise.model.catalog import Catalog
from stepwise.plan.units import Plan
from stepwise.run.store.base import epoch
from stepwise.run.store.store import RunInfo, Store


def window_intervals(plan: Plan, store: Store, run_id: int) -> dict[str, list[tuple[float, float]]]:
    """service -> wall-clock (epoch) intervals of its planned downtime windows in this run."""
    rows = {u.unit_id: u for u in store.units(run_id)}
    out: dict[str, list[tuple[float, float]]] = {}
    for w in plan.windows:
        # every unit overlapping the window in plan time, including the ones that open it
        # (stop) and close it (start), as they really ran
        spans = [
            rows[u.id]
            for u in plan.units
            if u.id in rows
            and u.start_s < w.end_s
            and u.end_s > w.start_s
            and rows[u.id].started_at
            and rows[u.id].ended_at
        ]
        if spans:
            out.setdefault(w.service, []).append(
                (min(epoch(r.started_at) for r in spans), max(epoch(r.ended_at) for r in spans))
            )
    return out


def _work_began(store: Store, run: RunInfo) -> float:
    """When a run began its work: its first unit's start, or its own start when it ran no
    unit. Its planning and Ansible's start come before its first unit: seconds, and many more
    on a loaded machine (CI's saw a gap that outlasted the probe's slack)."""
    starts = [epoch(u.started_at) for u in store.units(run.id) if u.started_at]
    return min(starts, default=epoch(run.started_at))


def cloud_intervals(store: Store, cloud: str) -> dict[str, list[tuple[float, float]]]:
    """The announced downtime windows of every run of `cloud`, in wall-clock time. A window
    still open at the end of a command continues into the next command until that command's
    work begins (the operator's pause between the seed's steps, and the next command's own
    start, are inside it: a window of the next command takes over from there)."""
    runs = sorted(store.runs(cloud, limit=1000), key=lambda r: r.id)
    out: dict[str, list[tuple[float, float]]] = {}
    for i, r in enumerate(runs):
        if not r.plan:
            continue
        plan = Plan.from_json(r.plan)
        if i + 1 < len(runs):
            nxt = _work_began(store, runs[i + 1])
        else:
            nxt = epoch(r.ended_at) if r.ended_at is not None else time.time()
        for svc, spans in window_intervals(plan, store, r.id).items():
            open_at_end = any(
                w.service == svc and w.end_s >= plan.duration_s - 1e-6 for w in plan.windows
            )
            for a, b in spans:
                out.setdefault(svc, []).append((a, nxt if open_at_end else b))
    return out


#: what a real OpenStack client's call needs besides the service it names: a token (keystone)
CLIENT_NEEDS = {
    "client:keystone": ("keystone",),
    "client:placement": ("placement_api", "keystone"),
    "client:glance": ("glance_api", "keystone"),
    "client:nova": ("nova_api", "keystone"),
    # a server's life: the API, the conductor and scheduler it passes through (placement's
    # allocation, glance's image), the compute that builds it, neutron that nova asks
    "client:nova-server": (
        "nova_api",
        "nova_conductor",
        "nova_scheduler",
        "nova_compute",
        "placement_api",
        "glance_api",
        "neutron_server",
        "keystone",
    ),
    "client:neutron": ("neutron_server", "keystone"),
}


#: what every VIP rides on (the reference catalog's names): the load balancer behind the VIPs
#: and the cluster manager that holds them (a node's standby moves them)
VIP_CARRIERS = ("haproxy", "pacemaker")


def target_needs(catalog: Catalog, services: Iterable[str]) -> dict[str, tuple[str, ...]]:
    """target -> the services whose announced windows cover its failures, for the deployed
    `services`: a `vip:S` target needs S, what S depends on (transitively: keystone's galera)
    and the VIP's carriers; a `client:*` call what its service's VIP needs and keystone's
    (its token)."""
    carriers = set(VIP_CARRIERS)
    out = {f"vip:{s}": tuple(sorted({s} | catalog.needs(s) | carriers)) for s in services}
    for target, needed in CLIENT_NEEDS.items():
        closure = set(needed).union(*(catalog.needs(s) for s in needed))
        out[target] = tuple(sorted(closure | carriers))
    return out


def outside_windows(
    records: Iterable[Mapping[str, Any]],
    intervals: Mapping[str, list[tuple[float, float]]],
    slack: float = 3.0,
    needs: Mapping[str, tuple[str, ...]] | None = None,
) -> dict[str, int]:
    """Failed probe requests outside the windows of the services they need (`needs`, as
    `target_needs` gives it; without it a `vip:<service>` target needs that service, a
    `client:*` call its service and keystone). A request counts from its start (`t`) to its
    answer or timeout (`t` + `ms`): one that started before a window and failed inside it is
    inside."""
    out: dict[str, int] = {}
    for r in records:
        target = str(r.get("target", ""))
        if r.get("ok") or not (target.startswith("vip:") or target in CLIENT_NEEDS):
            continue
        services = (needs or {}).get(target) or CLIENT_NEEDS.get(target) or (target[4:],)
        t = float(r["t"])
        end = t + float(r.get("ms") or 0.0) / 1000.0
        if any(
            a - slack <= end and t <= b + slack
            for svc in services
            for a, b in intervals.get(svc, [])
        ):
            continue
        out[target] = out.get(target, 0) + 1
    return out
