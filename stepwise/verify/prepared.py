"""What the replays of one plan share: everything the invariants need that does not depend on
the times.

Made once per plan (`build_prepared`); each replay (the estimate and every perturbation) then
walks only the units that change what the replay tracks and reads the rest from here.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from stepwise.model.availability import service_allowances
from stepwise.model.deployment import Deployment
from stepwise.model.vocab import Section, Stage, Step
from stepwise.plan.table import WorkflowEntry, entry
from stepwise.plan.units import Plan, Unit

#: Steps that change what the replay tracks even when they stop and start nothing.
_TRACKED_STEPS = frozenset(
    {
        Step.UNPIN_RPC,
        Step.MIGRATE,
        Step.SYSTEM_UPGRADE_TRANSFER_DATA,
        Step.PIN_RPC,
        Step.SYSTEM_UPGRADE_RUN,
        Step.CONTRACT,
    }
)


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


@dataclass
class Prepared:
    """What the replays of one plan share: everything that does not depend on the times.

    Made once per plan; each replay (the estimate and every perturbation) then walks only the
    units that change what the replay tracks."""

    order_problems: list[str]
    static_problems: list[str] = field(default_factory=list)
    traits: WorkflowEntry | None = None
    #: a selected part of a workflow (it may end with instances down or old code left)
    partial: bool = False
    tracked: tuple[Unit, ...] = ()
    allow: dict[str, int] = field(default_factory=dict)
    totals: dict[str, int] = field(default_factory=dict)
    exempt: set[str] = field(default_factory=set)
    #: services whose rule cannot hold with their instances -> the instances down at which
    #: they stop serving (their window opens), and why (`Deployment.forced_downtime`)
    forced: dict[str, tuple[int, str]] = field(default_factory=dict)
    rpc_check: bool = False
    has_pin: bool = False
    rpc_of: dict[str, str] = field(default_factory=dict)
    groups: dict[str, list[str]] = field(default_factory=dict)
    initial: State = field(default_factory=State)
    old_count: dict[str, int] = field(default_factory=dict)
    #: unit id -> [(role, nodes)] taken (first unit of a batch) or given back (last unit)
    opens: dict[str, list[tuple[str, int]]] = field(default_factory=dict)
    closes: dict[str, list[tuple[str, int]]] = field(default_factory=dict)
    #: unit id -> service -> the nodes it starts on new code (a reboot restarts the old code)
    new_code_on: dict[str, dict[str, tuple[str, ...]]] = field(default_factory=dict)
    #: unit id -> the services whose stop begins their upgrade (not only a reboot's restart)
    upgrade_stops: dict[str, frozenset[str]] = field(default_factory=dict)
    serial: dict[str, int] = field(default_factory=dict)
    has_transfer: bool = False
    #: expand/contract services whose new code must wait for their expand
    expands: set[str] = field(default_factory=set)
    #: service -> the instances the facts show on old code (`initial.old_code`)
    facts_old: dict[str, set[str]] = field(default_factory=dict)


def exempt_services(plan: Plan, dep: Deployment) -> set[str]:
    """Services whose full outage is the plan's announced window rather than a fault."""
    catalog = dep.catalog
    traits = entry(plan.workflow)
    if traits.whole_outage:
        return set(dep.instances)
    out: set[str] = set()
    if traits.pins_rpc:
        out |= {s for s in dep.instances if not catalog[s].rolling}
    if traits.replaces_os:
        for u in plan.units:
            if u.step is Step.STOP and Stage.SYSTEM_UPGRADE_TRANSFER_DATA in u.tags:
                out |= set(u.stops)
        # stopped on the old-OS nodes by the transfer step of an earlier run: same window
        out |= set((plan.params.get("initial") or {}).get("down") or {})
    return out


def build_prepared(plan: Plan, dep: Deployment) -> Prepared:
    """The time-independent facts of a plan whose units are in order (see `units_in_order`)."""
    units = plan.units
    traits = entry(plan.workflow)
    pre = Prepared([], traits=traits, partial=bool(plan.params.get("partial")))
    pre.allow, pre.totals = service_allowances(dep)
    pre.exempt = exempt_services(plan, dep)
    # their rule allows no instance down: the first one down breaks it
    pre.forced = {s: (1, why) for s, why in dep.forced_downtime.items()}
    pre.rpc_check = traits.pins_rpc
    pre.has_pin = any(u.step is Step.PIN_RPC for u in units)
    pre.initial = _initial_state(plan, dep, traits, pre.has_pin)
    old_code = (plan.params.get("initial") or {}).get("old_code") or {}
    pre.facts_old = {s: set(ns) for s, ns in old_code.items()}
    pre.rpc_of = {svc.name: svc.rpc for svc in dep.catalog if svc.rpc}
    pre.groups = rpc_groups(dep)
    # instances of each RPC group still on old code (counted, not scanned, for big clouds)
    new_code = pre.initial.new_code
    pre.old_count = {
        g: sum(len(dep.instances[m]) - len(new_code.get(m, ())) for m in ms)
        for g, ms in pre.groups.items()
    }
    pre.opens, pre.closes = _batch_capacity(units, dep)
    upgraded = _upgraded(units, dep) if traits.rolling else {}
    pre.tracked = tuple(
        u
        for u in units
        if u.stops
        or u.starts
        or u.step in _TRACKED_STEPS
        or u.id in pre.opens
        or u.id in pre.closes
    )
    pre.new_code_on = _new_code_on(pre.tracked, upgraded)
    if traits.dependency_order:
        pre.upgrade_stops = _upgrade_stops(pre.tracked, upgraded)
    if traits.expand_contract:
        pre.expands = _expands(plan, dep, pre.initial)
    pre.serial = {r.name: r.update_serial for r in dep.roles}
    pre.has_transfer = any(u.step is Step.SYSTEM_UPGRADE_TRANSFER_DATA for u in units)
    return pre


def rpc_groups(dep: Deployment) -> dict[str, list[str]]:
    """RPC group -> the deployment's services in it."""
    groups: dict[str, list[str]] = defaultdict(list)
    for s in dep.instances:
        if dep.catalog[s].rpc:
            groups[dep.catalog[s].rpc].append(s)
    return groups


def _initial_state(plan: Plan, dep: Deployment, traits: WorkflowEntry, has_pin: bool) -> State:
    """The cloud as the plan finds it: what earlier commands of the procedure left down, on new
    code, on the new OS, and whether an earlier `prepare` pinned RPC."""
    catalog = dep.catalog
    st = State()
    initial: Mapping[str, Any] = plan.params.get("initial") or {}
    st.new_os.update(initial.get("new_os", ()))
    for s, ns in (initial.get("down") or {}).items():
        st.down.setdefault(s, set()).update(ns)
    for s, ns in (initial.get("new_code") or {}).items():
        st.new_code.setdefault(s, set()).update(ns)
    after_prepare = traits.replaces_os or plan.params.get("stage") in (Stage.RUN, Stage.CONVERGE)
    if (
        traits.pins_rpc
        and not has_pin
        and (initial.get("pinned") if "pinned" in initial else after_prepare)
    ):
        st.pinned = {
            catalog[s].rpc for s in dep.instances if catalog[s].rpc
        }  # pinned by an earlier `prepare`
    return st


def _batch_capacity(
    units: tuple[Unit, ...], dep: Deployment
) -> tuple[dict[str, list[tuple[str, int]]], dict[str, list[tuple[str, int]]]]:
    """Batches hold role capacity from their first unit's start to their last unit's end:
    (first unit id -> [(role, nodes)] taken, last unit id -> the same, given back)."""
    first_of: dict[str, Unit] = {}
    last_of: dict[str, Unit] = {}
    batch_nodes: dict[str, dict[str, None]] = defaultdict(dict)
    for u in units:
        if u.batch and not u.batch.startswith("group:"):
            first_of.setdefault(u.batch, u)
            last_of[u.batch] = u
            batch_nodes[u.batch].update(dict.fromkeys(u.nodes))
    node_role = {n.name: n.role for n in dep.nodes}
    opens: dict[str, list[tuple[str, int]]] = {}
    closes: dict[str, list[tuple[str, int]]] = {}
    for b, nodes in batch_nodes.items():
        per_role: dict[str, int] = {}
        for n in nodes:
            r = node_role[n]
            per_role[r] = per_role.get(r, 0) + 1
        opens[first_of[b].id] = closes[last_of[b].id] = list(per_role.items())
    return opens, closes


def _upgraded(units: tuple[Unit, ...], dep: Deployment) -> dict[str, set[tuple[str, str]]]:
    """Batch -> (service, node) whose code it changes (update, upgrade): what its `packages`
    step updates, and what its `config` step switches to the target image on a node whose
    style runs the service in a container (the image is the package there, and the switch is
    the config step: `model/styles.py`). A container the update restarts for its
    configuration alone is recreated from its target image too, the one it runs already: it is
    on the target either way. A reboot visit switches only the containers it changes
    (`plan/visits.py`).

    The rest of what a batch stops (everything on a node it reboots) comes back on the code it
    had. (The OS upgrade's starts bring services up on the new OS and release: all new code.)"""
    upgraded: dict[str, set[tuple[str, str]]] = defaultdict(set)
    boxed = {r.name: frozenset(dep.containerized(r)) for r in dep.roles}
    node_role = {n.name: n.role for n in dep.nodes} if any(boxed.values()) else {}
    for u in units:
        if not u.batch:
            continue
        if u.step is Step.PACKAGES:
            for n in u.nodes:
                upgraded[u.batch].update((s, n) for s in u.services_on(n))
        elif u.step is Step.CONFIG and node_role:
            # a visit that also updates a service the style runs on the host (pacemaker under
            # tripleo) has a packages step naming only that one: its containers change here
            for n in u.nodes:
                here = boxed[node_role[n]]
                upgraded[u.batch].update((s, n) for s in u.services_on(n) if s in here)
    return dict(upgraded)


def _new_code_on(
    tracked: tuple[Unit, ...], upgraded: dict[str, set[tuple[str, str]]]
) -> dict[str, dict[str, tuple[str, ...]]]:
    """Unit id -> service -> the nodes where the unit starts it on new code. Computed once
    per plan: the replays would filter the same nodes again each time."""
    out: dict[str, dict[str, tuple[str, ...]]] = {}
    for u in tracked:
        if not u.starts:
            continue
        changed = upgraded.get(u.batch) if u.batch else None
        if changed is None:
            out[u.id] = dict(u.starts)
            continue
        per: dict[str, tuple[str, ...]] = {}
        for s, serving in u.starts.items():
            nodes = tuple(n for n in serving if (s, n) in changed)
            per[s] = serving if len(nodes) == len(serving) else nodes
        out[u.id] = per
    return out


def _upgrade_stops(
    tracked: tuple[Unit, ...], upgraded: dict[str, set[tuple[str, str]]]
) -> dict[str, frozenset[str]]:
    """Unit id -> the services whose stop there begins their upgrade on some node."""
    out: dict[str, frozenset[str]] = {}
    for u in tracked:
        if not u.stops:
            continue
        changed = upgraded.get(u.batch) if u.batch else None
        out[u.id] = frozenset(
            s
            for s, nodes in u.stops.items()
            if changed is None or any((s, n) in changed for n in nodes)
        )
    return out


def _expands(plan: Plan, dep: Deployment, initial: State) -> set[str]:
    """Expand/contract services whose new code must wait for their expand: those the plan
    migrates, and (unless the plan is a selected part of the workflow, or a cloud where some
    instances already run the target, which ran it earlier) every one the catalog declares."""
    catalog = dep.catalog
    in_plan = {
        s for u in plan.units if u.step is Step.MIGRATE for n in u.nodes for s in u.services_on(n)
    }
    declared = {
        s
        for s in dep.instances
        if catalog[s].schema == "expand_contract"
        and catalog[s].has_step(Section.UPGRADE, Step.MIGRATE)
        and not initial.new_code.get(s)
    }
    expands = in_plan | (set() if plan.params.get("partial") else declared)
    return {s for s in expands if catalog[s].schema == "expand_contract"}
