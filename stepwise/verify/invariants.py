"""The invariants a plan must keep, checked on a replay of its schedule.

Availability rule of every service at every moment, the role serial, quorum (a clustered
service with 3+ members and no rule gets a majority quorum), no cluster of mixed OS majors,
RPC pinned while old and new code coexist, schema migration only when the old readers are
stopped, data transfer at most once and before the target serves, dependencies upgraded
everywhere first, the control plane done before the data plane stops, and every instance
that stops serving again by the end.
"""

from __future__ import annotations

from collections import defaultdict

from stepwise.model.deployment import Deployment
from stepwise.model.vocab import Phase, Section, Stage, Step, Workflow
from stepwise.plan.rollout import service_allowances
from stepwise.plan.units import Plan, Unit, Window
from stepwise.verify.replay import State, events


def _fmt(t: float) -> str:
    m, s = divmod(int(round(t)), 60)
    h, m = divmod(m, 60)
    return f"{h}:{m:02d}:{s:02d}"


def _where(u: Unit) -> str:
    nodes = ", ".join(u.nodes[:3]) + (", ..." if len(u.nodes) > 3 else "")
    return f"unit {u.id} ({u.step} on {nodes or 'the deployment'})"


def exempt_services(plan: Plan, dep: Deployment) -> set[str]:
    """Services whose full outage is the plan's announced window rather than a fault."""
    catalog = dep.catalog
    if plan.workflow is Workflow.UNDERCLOUD_UPGRADE:
        return set(dep.instances)
    out: set[str] = set()
    if plan.workflow in (Workflow.UPGRADE, Workflow.SYSTEM_UPGRADE):
        out |= {s for s in dep.instances if not catalog[s].rolling}
    if plan.workflow is Workflow.SYSTEM_UPGRADE:
        for u in plan.units:
            if u.step is Step.STOP and Stage.SYSTEM_UPGRADE_TRANSFER_DATA in u.tags:
                out |= set(u.stops)
        # stopped on the old-OS nodes by the transfer step of an earlier run: same window
        out |= set(((plan.params.get("initial") or {}).get("down") or {}))
    return out


def check(plan: Plan, dep: Deployment, times: dict[str, tuple[float, float]] | None = None) -> tuple[list[str], list[Window]]:
    """Replay the plan (with its own times, or `times`) and return (violations, windows)."""
    catalog = dep.catalog
    units = plan.units
    problems: list[str] = []
    seen: set[str] = set()
    for u in units:
        if u.id in seen:
            problems.append(f"unit id {u.id} is used twice")
        for a in u.after:
            if a not in seen:
                problems.append(f"{_where(u)} waits for {a}, which is not an earlier unit (the plan must be a DAG in order)")
        seen.add(u.id)
    if problems:
        return problems, []
    allow, totals = service_allowances(dep)
    exempt = exempt_services(plan, dep)
    rpc_check = plan.workflow in (Workflow.UPGRADE, Workflow.SYSTEM_UPGRADE)
    st = State()
    initial = plan.params.get("initial") or {}
    st.new_os.update(initial.get("new_os", ()))
    for s, ns in (initial.get("down") or {}).items():
        st.down.setdefault(s, set()).update(ns)
    for s, ns in (initial.get("new_code") or {}).items():
        st.new_code.setdefault(s, set()).update(ns)
    has_pin = any(u.step is Step.PIN_RPC for u in units)
    after_prepare = plan.workflow is Workflow.SYSTEM_UPGRADE or plan.params.get("stage") in (Stage.RUN, Stage.CONVERGE)
    if rpc_check and not has_pin and (initial.get("pinned") if "pinned" in initial else after_prepare):
        st.pinned = {catalog[s].rpc for s in dep.instances if catalog[s].rpc}  # pinned by an earlier `prepare`
    groups: dict[str, list[str]] = defaultdict(list)
    for s in dep.instances:
        if catalog[s].rpc:
            groups[catalog[s].rpc].append(s)
    # instances of each RPC group still on old code (counted, not scanned, for big clouds)
    old_count = {g: sum(len(dep.instances[m]) - len(st.new_code.get(m, ())) for m in ms) for g, ms in groups.items()}
    if rpc_check and has_pin:
        for g, members in sorted(groups.items()):
            if not any(catalog[s].has_step(Section.UPGRADE, "pin") for s in members):
                problems.append(f"RPC group '{g}' ({', '.join(members)}) has no `upgrade.pin` tasks: new code would talk "
                                f"unpinned RPC to old peers; add pin/unpin tasks to one of its services")
    # batches hold role capacity from their first unit's start to their last unit's end
    first_of: dict[str, Unit] = {}
    last_of: dict[str, Unit] = {}
    for u in units:
        if u.batch and not u.batch.startswith("group:"):
            first_of.setdefault(u.batch, u)
            last_of[u.batch] = u
    batch_nodes: dict[str, list[str]] = defaultdict(list)
    for u in units:
        if u.batch in first_of:
            for n in u.nodes:
                if n not in batch_nodes[u.batch]:
                    batch_nodes[u.batch].append(n)
    # A batch changes the code of the instances its `packages` step works on; the rest of what
    # it stops (everything on a node it reboots) comes back on the code it had.
    # (The OS upgrade's starts bring services up on the new OS and release: all new code.)
    upgraded: dict[str, set[tuple[str, str]]] = defaultdict(set)
    for u in units if plan.workflow in (Workflow.UPDATE, Workflow.UPGRADE) else ():
        if u.batch and u.step is Step.PACKAGES:
            for n in u.nodes:
                upgraded[u.batch].update((s, n) for s in u.services_on(n))
    opens = {u.id: b for b, u in first_of.items()}
    closes = {u.id: b for b, u in last_of.items()}
    serial = {r.name: r.update_serial for r in dep.roles}
    role_busy: dict[str, int] = defaultdict(int)
    transfers: dict[str, int] = defaultdict(int)
    started_on: dict[str, float] = {}
    windows: list[Window] = []
    open_win: dict[str, tuple[float, str]] = {}
    # a service an earlier command left down everywhere (the OS upgrade's transfer) is inside
    # its window from this plan's first moment until a unit starts it again
    for svc, ns in st.down.items():
        if totals.get(svc) and len(ns) >= totals[svc]:
            open_win[svc] = (0.0, "down since an earlier command of the procedure")
    # expand/contract: no new code before the expand (a selected part of the workflow, or a
    # cloud where some instances already run the target, ran it earlier)
    expanded: set[str] = set()
    expands = set()
    if plan.workflow is Workflow.UPGRADE:
        in_plan = {s for u in units if u.step is Step.MIGRATE for n in u.nodes for s in u.services_on(n)}
        declared = {s for s in dep.instances if catalog[s].schema == "expand_contract"
                    and catalog[s].has_step(Section.UPGRADE, Step.MIGRATE) and not st.new_code.get(s)}
        expands = in_plan | (set() if plan.params.get("partial") else declared)
        expands = {s for s in expands if catalog[s].schema == "expand_contract"}
    stop_first: dict[str, float] = {}
    start_last: dict[str, float] = {}
    ctrl_end = 0.0
    data_start: float | None = None
    for ev in events(units, times):
        u, t = ev.unit, ev.t
        if ev.kind == 1:  # start
            if u.id in opens:
                b = opens[u.id]
                for n in batch_nodes[b]:
                    role_busy[dep.node_by_name[n].role] += 1
                for role, busy in role_busy.items():
                    if busy > serial[role] and u.phase is not Phase.OS_REST:
                        problems.append(f"at {_fmt(t)} {_where(u)}: {busy} nodes of {role} are being worked on; "
                                        f"its update_serial is {serial[role]}")
            if u.step is Step.UNPIN_RPC:
                for s in u.services:
                    g = catalog[s].rpc
                    if g and not plan.params.get("partial") and old_count[g]:
                        example = _old_instance(dep, groups[g], st)
                        problems.append(f"at {_fmt(t)} {_where(u)} lifts the RPC pin of '{g}' while {old_count[g]} "
                                        f"instance(s) still run old code (e.g. {example})")
                    st.pinned.discard(g)
            if u.step is Step.CONTRACT:
                for n in u.nodes:
                    for s in u.services_on(n):
                        old = [m.name for m in dep.instances[s] if m.name not in st.new_code.get(s, set())]
                        if old and not plan.params.get("partial"):
                            problems.append(f"at {_fmt(t)} {_where(u)} contracts the schema of {s} while old code "
                                            f"still runs on {', '.join(old[:3])}; contract after the last old instance")
            if u.step is Step.MIGRATE:
                for n in u.nodes:
                    for s in u.services_on(n):
                        if catalog[s].rolling:
                            continue
                        live = [m.name for m in dep.instances[s] if m.name not in st.down.get(s, set())
                                and m.name not in st.new_code.get(s, set())]
                        if live:
                            problems.append(f"at {_fmt(t)} {_where(u)} migrates the schema of {s} while old code still "
                                            f"serves on {', '.join(live[:3])}; stop its old readers first")
            if u.step is Step.SYSTEM_UPGRADE_TRANSFER_DATA:
                for n in u.nodes:
                    transfers[n] += 1
                    if transfers[n] > 1:
                        problems.append(f"{_where(u)}: data transfer onto {n} a second time would overwrite newer data")
                    if n in started_on and started_on[n] < t:
                        problems.append(f"{_where(u)}: data transfer onto {n} after services started there destroys newer data")
                    if u.idempotent:
                        problems.append(f"{_where(u)}: a data transfer must be marked non-idempotent (it must never run twice)")
            for s, nodes in u.stops.items():
                if u.batch not in upgraded or any((s, n) in upgraded[u.batch] for n in nodes):
                    stop_first[s] = min(stop_first.get(s, t), t)
                d = st.down.setdefault(s, set())
                d.update(nodes)
                if u.phase is Phase.DATAPLANE:
                    data_start = t if data_start is None else min(data_start, t)
                a = allow.get(s)
                if a is not None and s not in exempt and len(d) > a:
                    rule = catalog[s].availability.describe() if catalog[s].availability else "quorum: majority (clustered)"
                    problems.append(f"at {_fmt(t)} {_where(u)} takes {s} down on {len(d)} of {totals[s]} nodes; "
                                    f"its rule ({rule}) allows {a}")
                if len(d) >= totals.get(s, 0) and s not in open_win:
                    open_win[s] = (t, u.why)
        else:  # end
            if u.step is Step.PIN_RPC:
                for s in u.services:
                    if catalog[s].rpc:
                        st.pinned.add(catalog[s].rpc)
            if u.step is Step.SYSTEM_UPGRADE_RUN:
                st.new_os.update(u.nodes)
            if u.step is Step.MIGRATE:
                expanded.update(s for n in u.nodes for s in u.services_on(n))
            for s, serving in u.starts.items():
                d = st.down.setdefault(s, set())
                d.difference_update(serving)
                for n in serving:
                    started_on.setdefault(n, t)
                nodes = serving
                if u.batch in upgraded:
                    nodes = tuple(n for n in serving if (s, n) in upgraded[u.batch])
                if nodes:
                    start_last[s] = max(start_last.get(s, t), t)
                    if s in expands and s not in expanded:
                        problems.append(f"at {_fmt(t)} {_where(u)} starts new {s} on {', '.join(nodes[:3])} before "
                                        f"its schema is expanded; the expand runs first, on the bootstrap node")
                newly = st.new_code.setdefault(s, set())
                if catalog[s].rpc:
                    old_count[catalog[s].rpc] -= sum(1 for n in nodes if n not in newly)
                newly.update(nodes)
                if s in open_win and len(d) < totals.get(s, 0):
                    t0, why = open_win.pop(s)
                    windows.append(Window(s, t0, t, why))
                if rpc_check and catalog[s].rpc and nodes:
                    g = catalog[s].rpc
                    if old_count[g] and g not in st.pinned:
                        problems.append(f"at {_fmt(t)} {_where(u)} starts new {s} while "
                                        f"{_old_instance(dep, groups[g], st)} runs old code and RPC group '{g}' is not pinned")
                c = catalog[s].cluster
                if plan.workflow is Workflow.SYSTEM_UPGRADE and c and not catalog[s].mixed_os:
                    serving = st.serving(s, tuple(m.name for m in dep.instances[s]))
                    oses = {n in st.new_os for n in serving}
                    if len(oses) > 1:
                        problems.append(f"at {_fmt(t)} {_where(u)}: {s} cluster would have members on two OS major "
                                        f"versions ({', '.join(serving[:4])}); such a cluster cannot form")
            if u.phase is Phase.CONTROLPLANE and (u.stops or u.starts):
                ctrl_end = max(ctrl_end, t)
            if u.id in closes:
                b = closes[u.id]
                for n in batch_nodes[b]:
                    role_busy[dep.node_by_name[n].role] -= 1
    for s, (t0, why) in open_win.items():
        windows.append(Window(s, t0, float("inf"), why))
    if data_start is not None and data_start < ctrl_end:
        problems.append(f"the data plane starts stopping at {_fmt(data_start)} before the control plane is done "
                        f"({_fmt(ctrl_end)})")
    # An OS or management-node upgrade takes every service of a node down at once by design.
    dep_check = not plan.workflow.exempt_from_dependency_order
    for s in sorted(stop_first) if dep_check else ():
        for d in catalog[s].depends_on:
            if d in start_last and stop_first[s] < start_last[d]:
                problems.append(f"{s} starts its upgrade at {_fmt(stop_first[s])} but its dependency {d} is upgraded "
                                f"everywhere only at {_fmt(start_last[d])}")
    # A selected part of a workflow may end with instances down (the OS upgrade's steps leave
    # nodes stopped for the next command): the rules were checked at every moment, the end
    # included. A whole plan must leave everything it stopped serving again.
    left = {} if plan.params.get("partial") else {s: sorted(n) for s, n in st.down.items() if n}
    if plan.workflow is Workflow.SYSTEM_UPGRADE:
        left = {s: [n for n in ns if n in _planned_nodes(plan)] for s, ns in left.items()}
        left = {s: ns for s, ns in left.items() if ns}
    for s, ns in sorted(left.items()):
        problems.append(f"{s} is left stopped on {', '.join(ns[:3])} at the end of the plan")
    return problems, sorted(windows, key=lambda w: (w.start_s, w.service))


def _old_instance(dep: Deployment, members: list[str], st: State) -> str:
    for m in members:
        for n in dep.instances[m]:
            if n.name not in st.new_code.get(m, set()):
                return f"{m} on {n.name}"
    return "?"


def _planned_nodes(plan: Plan) -> set[str]:
    cache = getattr(plan, "_planned_nodes", None)
    if cache is None:
        cache = {n for u in plan.units if u.step in (Step.SYSTEM_UPGRADE_PREPARE, Step.SYSTEM_UPGRADE_RUN) for n in u.nodes}
        object.__setattr__(plan, "_planned_nodes", cache)
    return cache
