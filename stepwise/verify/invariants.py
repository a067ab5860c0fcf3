"""The invariants a plan must keep, checked on a replay of its schedule.

Availability rule of every service at every moment, the role serial, quorum (a clustered
service with 3+ members and no rule gets a majority quorum), no cluster of mixed OS majors,
RPC pinned while old and new code coexist, schema migration only when the old readers are
stopped, no new code of an expand/contract service before its expand and no contract while
old code runs, data transfer at most once and before the target serves, dependencies upgraded
everywhere first, the control plane done before the data plane stops, and every instance
that stops serving again by the end.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field

from stepwise.model.deployment import Deployment
from stepwise.model.vocab import Phase, Section, Stage, Step, UpgradeKey, Workflow
from stepwise.plan.rollout import service_allowances
from stepwise.plan.units import Plan, Unit, Window
from stepwise.verify.replay import State, timeline


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
        out |= set((plan.params.get("initial") or {}).get("down") or {})
    return out


@dataclass
class Prepared:
    """What the replays of one plan share: everything that does not depend on the times.

    Made once per plan; each replay (the estimate and every perturbation) then walks only the
    units that change what the replay tracks."""

    order_problems: list[str]
    static_problems: list[str] = field(default_factory=list)
    tracked: tuple[Unit, ...] = ()
    allow: dict[str, int] = field(default_factory=dict)
    totals: dict[str, int] = field(default_factory=dict)
    exempt: set[str] = field(default_factory=set)
    rpc_check: bool = False
    rpc_of: dict[str, str] = field(default_factory=dict)
    groups: dict[str, list[str]] = field(default_factory=dict)
    initial: State = field(default_factory=State)
    old_count: dict[str, int] = field(default_factory=dict)
    #: unit id -> [(role, nodes)] taken (first unit of a batch) or given back (last unit)
    opens: dict[str, list[tuple[str, int]]] = field(default_factory=dict)
    closes: dict[str, list[tuple[str, int]]] = field(default_factory=dict)
    #: batch -> (service, node) whose code its `packages` step changes (update, upgrade)
    upgraded: dict[str, set[tuple[str, str]]] = field(default_factory=dict)
    serial: dict[str, int] = field(default_factory=dict)
    has_transfer: bool = False
    #: expand/contract services whose new code must wait for their expand
    expands: set[str] = field(default_factory=set)


def prepare(plan: Plan, dep: Deployment) -> Prepared:
    """The time-independent part of `check`, to share between replays of the same plan."""
    catalog = dep.catalog
    units = plan.units
    problems: list[str] = []
    seen: set[str] = set()
    for u in units:
        if u.id in seen:
            problems.append(f"unit id {u.id} is used twice")
        for a in u.after:
            if a not in seen:
                problems.append(
                    f"{_where(u)} waits for {a}, which is not an earlier unit "
                    "(the plan must be a DAG in order)"
                )
        seen.add(u.id)
    if problems:
        return Prepared(problems)
    pre = Prepared([])
    pre.allow, pre.totals = service_allowances(dep)
    pre.exempt = exempt_services(plan, dep)
    pre.rpc_check = plan.workflow in (Workflow.UPGRADE, Workflow.SYSTEM_UPGRADE)
    st = pre.initial
    initial = plan.params.get("initial") or {}
    st.new_os.update(initial.get("new_os", ()))
    for s, ns in (initial.get("down") or {}).items():
        st.down.setdefault(s, set()).update(ns)
    for s, ns in (initial.get("new_code") or {}).items():
        st.new_code.setdefault(s, set()).update(ns)
    has_pin = any(u.step is Step.PIN_RPC for u in units)
    after_prepare = plan.workflow is Workflow.SYSTEM_UPGRADE or plan.params.get("stage") in (
        Stage.RUN,
        Stage.CONVERGE,
    )
    if (
        pre.rpc_check
        and not has_pin
        and (initial.get("pinned") if "pinned" in initial else after_prepare)
    ):
        st.pinned = {
            catalog[s].rpc for s in dep.instances if catalog[s].rpc
        }  # pinned by an earlier `prepare`
    pre.rpc_of = {svc.name: svc.rpc for svc in catalog if svc.rpc}
    groups: dict[str, list[str]] = defaultdict(list)
    for s in dep.instances:
        if catalog[s].rpc:
            groups[catalog[s].rpc].append(s)
    pre.groups = groups
    # instances of each RPC group still on old code (counted, not scanned, for big clouds)
    pre.old_count = {
        g: sum(len(dep.instances[m]) - len(st.new_code.get(m, ())) for m in ms)
        for g, ms in groups.items()
    }
    if pre.rpc_check and has_pin:
        for g, members in sorted(groups.items()):
            if not any(catalog[s].has_step(Section.UPGRADE, UpgradeKey.PIN) for s in members):
                pre.static_problems.append(
                    f"RPC group '{g}' ({', '.join(members)}) has no `upgrade.pin` tasks: "
                    "new code would talk unpinned RPC to old peers; add pin/unpin tasks to one of "
                    "its services"
                )
    # batches hold role capacity from their first unit's start to their last unit's end
    first_of: dict[str, Unit] = {}
    last_of: dict[str, Unit] = {}
    batch_nodes: dict[str, dict[str, None]] = defaultdict(dict)
    for u in units:
        if u.batch and not u.batch.startswith("group:"):
            first_of.setdefault(u.batch, u)
            last_of[u.batch] = u
            batch_nodes[u.batch].update(dict.fromkeys(u.nodes))
    node_role = {n.name: n.role for n in dep.nodes}
    for b, nodes in batch_nodes.items():
        per_role: dict[str, int] = {}
        for n in nodes:
            r = node_role[n]
            per_role[r] = per_role.get(r, 0) + 1
        pre.opens[first_of[b].id] = pre.closes[last_of[b].id] = list(per_role.items())
    # A batch changes the code of the instances its `packages` step works on; the rest of what
    # it stops (everything on a node it reboots) comes back on the code it had. (The OS
    # upgrade's starts bring services up on the new OS and release: all new code.)
    upgraded: dict[str, set[tuple[str, str]]] = defaultdict(set)
    for u in units if plan.workflow in (Workflow.UPDATE, Workflow.UPGRADE) else ():
        if u.batch and u.step is Step.PACKAGES:
            for n in u.nodes:
                upgraded[u.batch].update((s, n) for s in u.services_on(n))
    pre.upgraded = dict(upgraded)
    # expand/contract: no new code before the expand (a selected part of the workflow, or a
    # cloud where some instances already run the target, ran it earlier)
    if plan.workflow is Workflow.UPGRADE:
        in_plan = {
            s for u in units if u.step is Step.MIGRATE for n in u.nodes for s in u.services_on(n)
        }
        declared = {
            s
            for s in dep.instances
            if catalog[s].schema == "expand_contract"
            and catalog[s].has_step(Section.UPGRADE, Step.MIGRATE)
            and not st.new_code.get(s)
        }
        expands = in_plan | (set() if plan.params.get("partial") else declared)
        pre.expands = {s for s in expands if catalog[s].schema == "expand_contract"}
    pre.serial = {r.name: r.update_serial for r in dep.roles}
    pre.has_transfer = any(u.step is Step.SYSTEM_UPGRADE_TRANSFER_DATA for u in units)
    # a unit that opens or closes no batch, changes no instance and is none of the steps
    # below changes nothing the replay tracks: leaving it out keeps the others' order
    special = {
        Step.UNPIN_RPC,
        Step.MIGRATE,
        Step.SYSTEM_UPGRADE_TRANSFER_DATA,
        Step.PIN_RPC,
        Step.SYSTEM_UPGRADE_RUN,
        Step.CONTRACT,
    }
    pre.tracked = tuple(
        u
        for u in units
        if u.stops or u.starts or u.step in special or u.id in pre.opens or u.id in pre.closes
    )
    return pre


def check(
    plan: Plan,
    dep: Deployment,
    times: dict[str, tuple[float, float]] | None = None,
    prepared: Prepared | None = None,
) -> tuple[list[str], list[Window]]:
    """Replay the plan (with its own times, or `times`) and return (violations, windows).

    `prepared`: `prepare(plan, dep)`, when the same plan is replayed more than once."""
    pre = prepared if prepared is not None else prepare(plan, dep)
    if pre.order_problems:
        return list(pre.order_problems), []
    catalog = dep.catalog
    problems = list(pre.static_problems)
    allow, totals, exempt, rpc_of, groups = (
        pre.allow,
        pre.totals,
        pre.exempt,
        pre.rpc_of,
        pre.groups,
    )
    opens, closes, upgraded, serial = pre.opens, pre.closes, pre.upgraded, pre.serial
    expanded: set[str] = set()
    init = pre.initial
    st = State(
        {s: set(ns) for s, ns in init.down.items()},
        {s: set(ns) for s, ns in init.new_code.items()},
        set(init.new_os),
        set(init.pinned),
    )
    old_count = dict(pre.old_count)
    partial = bool(plan.params.get("partial"))
    os_upgrade = plan.workflow is Workflow.SYSTEM_UPGRADE
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
    stop_first: dict[str, float] = {}
    start_last: dict[str, float] = {}
    ctrl_end = 0.0
    data_start: float | None = None
    down, new_code = st.down, st.new_code
    for t, kind, _, u in timeline(pre.tracked, times):
        step = u.step
        if kind == 1:  # start
            taken = opens.get(u.id)
            if taken is not None:
                for role, n in taken:
                    role_busy[role] += n
                for role, busy in role_busy.items():
                    if busy > serial[role] and u.phase is not Phase.OS_REST:
                        problems.append(
                            f"at {_fmt(t)} {_where(u)}: {busy} nodes of {role} "
                            f"are being worked on; its update_serial is {serial[role]}"
                        )
            if step is Step.UNPIN_RPC:
                for s in u.services:
                    g = rpc_of.get(s)
                    if g and not partial and old_count[g]:
                        example = _old_instance(dep, groups[g], st)
                        problems.append(
                            f"at {_fmt(t)} {_where(u)} lifts the RPC pin of '{g}' "
                            f"while {old_count[g]} instance(s) still run old code (e.g. {example})"
                        )
                    st.pinned.discard(g)
            elif step is Step.CONTRACT:
                for n in u.nodes:
                    for s in u.services_on(n):
                        old = [
                            m.name for m in dep.instances[s] if m.name not in new_code.get(s, set())
                        ]
                        if old and not partial:
                            problems.append(
                                f"at {_fmt(t)} {_where(u)} contracts the schema of {s} "
                                f"while old code still runs on {', '.join(old[:3])}; "
                                "contract after the last old instance"
                            )
            elif step is Step.MIGRATE:
                for n in u.nodes:
                    for s in u.services_on(n):
                        if catalog[s].rolling:
                            continue
                        live = [
                            m.name
                            for m in dep.instances[s]
                            if m.name not in down.get(s, set())
                            and m.name not in new_code.get(s, set())
                        ]
                        if live:
                            problems.append(
                                f"at {_fmt(t)} {_where(u)} migrates the schema of {s} "
                                f"while old code still serves on {', '.join(live[:3])}; "
                                "stop its old readers first"
                            )
            elif step is Step.SYSTEM_UPGRADE_TRANSFER_DATA:
                for n in u.nodes:
                    transfers[n] += 1
                    if transfers[n] > 1:
                        problems.append(
                            f"{_where(u)}: data transfer onto {n} a second time "
                            "would overwrite newer data"
                        )
                    if n in started_on and started_on[n] < t:
                        problems.append(
                            f"{_where(u)}: data transfer onto {n} after services started there "
                            "destroys newer data"
                        )
                    if u.idempotent:
                        problems.append(
                            f"{_where(u)}: a data transfer must be marked non-idempotent "
                            "(it must never run twice)"
                        )
            if u.stops:
                changed = upgraded.get(u.batch) if u.batch else None
                if u.phase is Phase.DATAPLANE:
                    data_start = t if data_start is None else min(data_start, t)
                for s, nodes in u.stops.items():
                    upgrade_stop = changed is None or any((s, n) in changed for n in nodes)
                    if upgrade_stop and (s not in stop_first or t < stop_first[s]):
                        stop_first[s] = t
                    d = down.get(s)
                    if d is None:
                        d = down[s] = set()
                    d.update(nodes)
                    a = allow.get(s)
                    if a is not None and len(d) > a and s not in exempt:
                        rule = (
                            catalog[s].availability.describe()
                            if catalog[s].availability
                            else "quorum: majority (clustered)"
                        )
                        problems.append(
                            f"at {_fmt(t)} {_where(u)} takes {s} down on {len(d)} of {totals[s]} "
                            f"nodes; its rule ({rule}) allows {a}"
                        )
                    if len(d) >= totals.get(s, 0) and s not in open_win:
                        open_win[s] = (t, u.why)
        else:  # end
            if step is Step.PIN_RPC:
                for s in u.services:
                    if s in rpc_of:
                        st.pinned.add(rpc_of[s])
            elif step is Step.SYSTEM_UPGRADE_RUN:
                st.new_os.update(u.nodes)
            elif step is Step.MIGRATE:
                expanded.update(s for n in u.nodes for s in u.services_on(n))
            if u.starts:
                changed = upgraded.get(u.batch) if u.batch else None
                for s, serving in u.starts.items():
                    d = down.get(s)
                    if d is None:
                        d = down[s] = set()
                    d.difference_update(serving)
                    if pre.has_transfer:
                        for n in serving:
                            started_on.setdefault(n, t)
                    if s in open_win and len(d) < totals.get(s, 0):
                        t0, why = open_win.pop(s)
                        windows.append(Window(s, t0, t, why))
                    nodes = (
                        serving
                        if changed is None
                        else tuple(n for n in serving if (s, n) in changed)
                    )
                    if not nodes:
                        continue  # restarted (a reboot), not upgraded
                    if s not in start_last or t > start_last[s]:
                        start_last[s] = t
                    if s in pre.expands and s not in expanded:
                        problems.append(
                            f"at {_fmt(t)} {_where(u)} starts new {s} "
                            f"on {', '.join(nodes[:3])} before its schema is expanded; "
                            "the expand runs first, on the bootstrap node"
                        )
                    newly = new_code.get(s)
                    if newly is None:
                        newly = new_code[s] = set()
                    g = rpc_of.get(s)
                    before = len(newly)
                    newly.update(nodes)
                    if g:
                        old_count[g] -= len(newly) - before
                    if pre.rpc_check and g and old_count[g] and g not in st.pinned:
                        problems.append(
                            f"at {_fmt(t)} {_where(u)} starts new {s} while "
                            f"{_old_instance(dep, groups[g], st)} runs old code "
                            f"and RPC group '{g}' is not pinned"
                        )
                    if os_upgrade and catalog[s].cluster and not catalog[s].mixed_os:
                        serving = st.serving(s, tuple(m.name for m in dep.instances[s]))
                        oses = {n in st.new_os for n in serving}
                        if len(oses) > 1:
                            problems.append(
                                f"at {_fmt(t)} {_where(u)}: {s} cluster would have members "
                                f"on two OS major versions ({', '.join(serving[:4])}); "
                                "such a cluster cannot form"
                            )
            if u.phase is Phase.CONTROLPLANE and (u.stops or u.starts):
                ctrl_end = max(ctrl_end, t)
            given = closes.get(u.id)
            if given is not None:
                for role, n in given:
                    role_busy[role] -= n
    for s, (t0, why) in open_win.items():
        windows.append(Window(s, t0, float("inf"), why))
    if data_start is not None and data_start < ctrl_end:
        problems.append(
            f"the data plane starts stopping at {_fmt(data_start)} "
            f"before the control plane is done ({_fmt(ctrl_end)})"
        )
    # An OS or management-node upgrade takes every service of a node down at once by design.
    dep_check = not plan.workflow.exempt_from_dependency_order
    for s in sorted(stop_first) if dep_check else ():
        for d in catalog[s].depends_on:
            if d in start_last and stop_first[s] < start_last[d]:
                problems.append(
                    f"{s} starts its upgrade at {_fmt(stop_first[s])} "
                    f"but its dependency {d} is upgraded everywhere only at {_fmt(start_last[d])}"
                )
    # A selected part of a workflow may end with instances down (the OS upgrade's steps leave
    # nodes stopped for the next command): the rules were checked at every moment, the end
    # included. A whole plan must leave everything it stopped serving again.
    left = {} if partial else {s: sorted(n) for s, n in down.items() if n}
    if os_upgrade:
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
        cache = {
            n
            for u in plan.units
            if u.step in (Step.SYSTEM_UPGRADE_PREPARE, Step.SYSTEM_UPGRADE_RUN)
            for n in u.nodes
        }
        object.__setattr__(plan, "_planned_nodes", cache)
    return cache
