"""The invariants a plan must keep, checked on a replay of its schedule.

Two are static, checked once per plan: its units are in order (`units_in_order`) and every
RPC group it pins can be pinned (`rpc_groups_can_pin`). The others are replayed, each its own
class with the hooks it needs (`Invariant`), applied in `INVARIANTS` order by one small loop
(`Replay`) over the start and end events of the plan's schedule:

  RoleSerialRespected                 at most `update_serial` nodes of a role at once
  PinLiftedAfterLastOldCode           no RPC unpin while an instance of the group runs old code
  ContractAfterLastOldCode            no schema contract while an old instance runs
  SchemaMigratedWithOldCodeStopped    an offline migration only once its old readers stopped
  DataTransferredOnceBeforeServing    data moves onto a node once, before anything serves there
  ServiceStaysAvailable               each service's availability rule (or majority quorum)
  ExpandBeforeNewCode                 no new code of an expand/contract service before its expand
  RpcPinnedWhileMixed                 new code starts only pinned while old code runs
  ClusterOnOneOsMajor                 no cluster across two OS majors unless it can mix
  ControlPlaneBeforeDataPlane         the control plane is done before the data plane stops
  DependenciesUpgradedFirst           a service's upgrade waits for its dependencies everywhere
  EverythingServesAgain               every instance stopped serves again by the end

Their problems come out in the order the events found them (at one event, in the order of
`INVARIANTS`), then those only the end can tell. `DowntimeWindows` rides the same hooks to
record the announced windows.
"""

from __future__ import annotations

from collections import defaultdict
from typing import ClassVar

from stepwise.model.deployment import Deployment
from stepwise.model.vocab import Phase, Section, Step
from stepwise.plan.units import Plan, Unit, Window
from stepwise.verify.prepared import Prepared, build_prepared
from stepwise.verify.replay import State, timeline


def _fmt(t: float) -> str:
    m, s = divmod(int(round(t)), 60)
    h, m = divmod(m, 60)
    return f"{h}:{m:02d}:{s:02d}"


def _where(u: Unit) -> str:
    nodes = ", ".join(u.nodes[:3]) + (", ..." if len(u.nodes) > 3 else "")
    return f"unit {u.id} ({u.step} on {nodes or 'the deployment'})"


# -- static invariants: checked once per plan ---------------------------------------------


def units_in_order(plan: Plan) -> list[str]:
    """Every unit id is used once and a unit waits only for earlier units.

    Why: a plan is a DAG written in topological order; the replay, the engine and a resume
    all rely on it, so nothing else is checked on a plan that breaks it."""
    problems: list[str] = []
    seen: set[str] = set()
    for u in plan.units:
        if u.id in seen:
            problems.append(f"unit id {u.id} is used twice")
        for a in u.after:
            if a not in seen:
                problems.append(
                    f"{_where(u)} waits for {a}, which is not an earlier unit "
                    "(the plan must be a DAG in order)"
                )
        seen.add(u.id)
    return problems


def rpc_groups_can_pin(dep: Deployment, pre: Prepared) -> list[str]:
    """A plan that pins RPC has `upgrade.pin` tasks for every RPC group (in one of its
    services).

    Why: a group without them stays unpinned while the others are pinned, and its new code
    would talk a newer RPC version to old peers."""
    if not (pre.rpc_check and pre.has_pin):
        return []
    catalog = dep.catalog
    return [
        f"RPC group '{g}' ({', '.join(members)}) has no `upgrade.pin` tasks: "
        "new code would talk unpinned RPC to old peers; add pin/unpin tasks to one of "
        "its services"
        for g, members in sorted(pre.groups.items())
        if not any(catalog[s].has_step(Section.UPGRADE, "pin") for s in members)
    ]


def prepare(plan: Plan, dep: Deployment) -> Prepared:
    """The time-independent part of `check`, to share between replays of the same plan."""
    problems = units_in_order(plan)
    if problems:
        return Prepared(problems)
    pre = build_prepared(plan, dep)
    pre.static_problems = rpc_groups_can_pin(dep, pre)
    return pre


# -- the replay ---------------------------------------------------------------------------


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

    def run(self, observers: list[Invariant], times: dict[str, tuple[float, float]] | None):
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
                st.pinned.discard(self.pre.rpc_of.get(s))  # type: ignore[arg-type]
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
    those, in `INVARIANTS` order, each with the state already moved by the event:

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


# -- replayed invariants ------------------------------------------------------------------


class RoleSerialRespected(Invariant):
    """At most `update_serial` nodes of a role are worked on at once; a batch holds its nodes
    from its first unit's start to its last unit's end.

    Why: the serial is the operator's limit on how much of a role may be out of their hands at
    once. The OS upgrade's later nodes (one command per node) are not counted against it."""

    def __init__(self, replay: Replay) -> None:
        super().__init__(replay)
        self.busy: dict[str, int] = defaultdict(int)
        pre = replay.pre
        self.opens, self.closes, self.serial = pre.opens, pre.closes, pre.serial

    @classmethod
    def applies(cls, pre: Prepared) -> bool:
        return bool(pre.opens)

    def on_start(self, u: Unit, t: float) -> None:
        taken = self.opens.get(u.id)
        if taken is None:
            return
        busy = self.busy
        for role, n in taken:
            busy[role] += n
        if u.phase is Phase.OS_REST:
            return
        for role, k in busy.items():
            if k > self.serial[role]:
                self.problems.append(
                    f"at {_fmt(t)} {_where(u)}: {k} nodes of {role} "
                    f"are being worked on; its update_serial is {self.serial[role]}"
                )

    def on_end(self, u: Unit, t: float) -> None:
        given = self.closes.get(u.id)
        if given is not None:
            for role, n in given:
                self.busy[role] -= n


class PinLiftedAfterLastOldCode(Invariant):
    """An RPC group's pin is lifted only when none of its instances runs old code (a selected
    part of a workflow may lift it earlier: the rest is another command's).

    Why: old code cannot read the new RPC version; unpinned, new code would send it."""

    steps = frozenset({Step.UNPIN_RPC})

    def on_start(self, u: Unit, t: float) -> None:
        r = self.replay
        rpc_of, old_count, partial = r.pre.rpc_of, r.old_count, r.pre.partial
        for s in u.services:
            g = rpc_of.get(s)
            if g and not partial and old_count[g]:
                example = _old_instance(r.dep, r.pre.groups[g], r.state)
                self.problems.append(
                    f"at {_fmt(t)} {_where(u)} lifts the RPC pin of '{g}' "
                    f"while {old_count[g]} instance(s) still run old code (e.g. {example})"
                )


class ContractAfterLastOldCode(Invariant):
    """An expand/contract service's schema is contracted only when no instance runs old code.

    Why: the contract drops what the old code still reads and writes."""

    steps = frozenset({Step.CONTRACT})

    def on_start(self, u: Unit, t: float) -> None:
        r = self.replay
        new_code = r.state.new_code
        for n in u.nodes:
            for s in u.services_on(n):
                old = [m.name for m in r.dep.instances[s] if m.name not in new_code.get(s, set())]
                if old and not r.pre.partial:
                    self.problems.append(
                        f"at {_fmt(t)} {_where(u)} contracts the schema of {s} "
                        f"while old code still runs on {', '.join(old[:3])}; "
                        "contract after the last old instance"
                    )


class SchemaMigratedWithOldCodeStopped(Invariant):
    """A service that cannot roll (offline schema) migrates only when none of its instances
    serves old code.

    Why: old code serving on a migrated schema reads and writes tables it does not know."""

    steps = frozenset({Step.MIGRATE})

    def on_start(self, u: Unit, t: float) -> None:
        r = self.replay
        catalog, down, new_code = r.dep.catalog, r.state.down, r.state.new_code
        for n in u.nodes:
            for s in u.services_on(n):
                if catalog[s].rolling:
                    continue
                live = [
                    m.name
                    for m in r.dep.instances[s]
                    if m.name not in down.get(s, set()) and m.name not in new_code.get(s, set())
                ]
                if live:
                    self.problems.append(
                        f"at {_fmt(t)} {_where(u)} migrates the schema of {s} "
                        f"while old code still serves on {', '.join(live[:3])}; "
                        "stop its old readers first"
                    )


class DataTransferredOnceBeforeServing(Invariant):
    """The OS upgrade's data transfer onto a node happens once, before any service started
    there, and is marked non-idempotent.

    Why: the transfer overwrites the node's data; run again, or after a service wrote there,
    it destroys newer data."""

    steps = frozenset({Step.SYSTEM_UPGRADE_TRANSFER_DATA})

    def __init__(self, replay: Replay) -> None:
        super().__init__(replay)
        self.transfers: dict[str, int] = defaultdict(int)
        self.started_on: dict[str, float] = {}

    @classmethod
    def applies(cls, pre: Prepared) -> bool:
        return pre.has_transfer

    def on_start(self, u: Unit, t: float) -> None:
        for n in u.nodes:
            self.transfers[n] += 1
            if self.transfers[n] > 1:
                self.problems.append(
                    f"{_where(u)}: data transfer onto {n} a second time would overwrite newer data"
                )
            if n in self.started_on and self.started_on[n] < t:
                self.problems.append(
                    f"{_where(u)}: data transfer onto {n} after services started there "
                    "destroys newer data"
                )
            if u.idempotent:
                self.problems.append(
                    f"{_where(u)}: a data transfer must be marked non-idempotent "
                    "(it must never run twice)"
                )

    def on_serving(
        self, u: Unit, t: float, service: str, serving: tuple[str, ...], down: set[str]
    ) -> None:
        for n in serving:
            self.started_on.setdefault(n, t)


class ServiceStaysAvailable(Invariant):
    """At every moment each service has at most its allowance of instances down: its
    availability rule (`min_available`, `max_unavailable`, `quorum`), or a majority quorum for
    a clustered service of 3+ members without one. Services whose outage is the workflow's
    announced window are exempt.

    Why: this is the promise of a rolling update: the cloud keeps serving while it changes."""

    def __init__(self, replay: Replay) -> None:
        super().__init__(replay)
        pre = replay.pre
        self.allow, self.totals, self.exempt = pre.allow, pre.totals, pre.exempt

    def on_stop(self, u: Unit, t: float, service: str, down: set[str]) -> None:
        a = self.allow.get(service)
        if a is not None and len(down) > a and service not in self.exempt:
            spec = self.replay.dep.catalog[service]
            rule = (
                spec.availability.describe()
                if spec.availability
                else "quorum: majority (clustered)"
            )
            self.problems.append(
                f"at {_fmt(t)} {_where(u)} takes {service} down on {len(down)} of "
                f"{self.totals[service]} nodes; its rule ({rule}) allows {a}"
            )


class ExpandBeforeNewCode(Invariant):
    """New code of an expand/contract service starts only after its schema's expand ended.

    Why: the new code needs the expanded schema; the expand is what lets old and new code
    share the database while the service rolls."""

    steps = frozenset({Step.MIGRATE})

    def __init__(self, replay: Replay) -> None:
        super().__init__(replay)
        self.expands = replay.pre.expands
        self.expanded: set[str] = set()

    @classmethod
    def applies(cls, pre: Prepared) -> bool:
        return bool(pre.expands)

    def on_end(self, u: Unit, t: float) -> None:
        self.expanded.update(s for n in u.nodes for s in u.services_on(n))

    def on_new_code(self, u: Unit, t: float, service: str, nodes: tuple[str, ...]) -> None:
        if service in self.expands and service not in self.expanded:
            self.problems.append(
                f"at {_fmt(t)} {_where(u)} starts new {service} "
                f"on {', '.join(nodes[:3])} before its schema is expanded; "
                "the expand runs first, on the bootstrap node"
            )


class RpcPinnedWhileMixed(Invariant):
    """New code of an RPC group starts only while the group is pinned, as long as one of its
    instances runs old code (workflows that pin RPC).

    Why: unpinned, new code speaks an RPC version its old peers cannot read."""

    @classmethod
    def applies(cls, pre: Prepared) -> bool:
        return pre.rpc_check

    def on_new_code(self, u: Unit, t: float, service: str, nodes: tuple[str, ...]) -> None:
        r = self.replay
        g = r.pre.rpc_of.get(service)
        if g and r.old_count[g] and g not in r.state.pinned:
            self.problems.append(
                f"at {_fmt(t)} {_where(u)} starts new {service} while "
                f"{_old_instance(r.dep, r.pre.groups[g], r.state)} runs old code "
                f"and RPC group '{g}' is not pinned"
            )


class ClusterOnOneOsMajor(Invariant):
    """When a clustered service starts after an OS upgrade, its serving members are all on
    the same OS major, unless the catalog says the cluster can mix (`mixed_os`).

    Why: such a cluster (Galera, RabbitMQ across majors) cannot form."""

    @classmethod
    def applies(cls, pre: Prepared) -> bool:
        return pre.traits is not None and pre.traits.replaces_os

    def on_new_code(self, u: Unit, t: float, service: str, nodes: tuple[str, ...]) -> None:
        r = self.replay
        spec = r.dep.catalog[service]
        if not spec.cluster or spec.mixed_os:
            return
        st = r.state
        serving = st.serving(service, tuple(m.name for m in r.dep.instances[service]))
        if len({n in st.new_os for n in serving}) > 1:
            self.problems.append(
                f"at {_fmt(t)} {_where(u)}: {service} cluster would have members "
                f"on two OS major versions ({', '.join(serving[:4])}); "
                "such a cluster cannot form"
            )


class ControlPlaneBeforeDataPlane(Invariant):
    """The data plane starts stopping only once the control plane's units are done.

    Why: the data plane's new code needs the new control plane (its API, its RPC pin), and
    workloads should not lose their hosts while the control plane is still moving."""

    def __init__(self, replay: Replay) -> None:
        super().__init__(replay)
        self.ctrl_end = 0.0
        self.data_start: float | None = None

    def on_start(self, u: Unit, t: float) -> None:
        if u.stops and u.phase is Phase.DATAPLANE:
            self.data_start = t if self.data_start is None else min(self.data_start, t)

    def on_end(self, u: Unit, t: float) -> None:
        if u.phase is Phase.CONTROLPLANE and (u.stops or u.starts):
            self.ctrl_end = max(self.ctrl_end, t)

    def at_end(self) -> None:
        if self.data_start is not None and self.data_start < self.ctrl_end:
            self.problems.append(
                f"the data plane starts stopping at {_fmt(self.data_start)} "
                f"before the control plane is done ({_fmt(self.ctrl_end)})"
            )


class DependenciesUpgradedFirst(Invariant):
    """A service starts its upgrade (its first stop that changes its code) only once every
    service it depends on runs the new code everywhere (workflows with a dependency order:
    an OS or management-node upgrade takes a node's services down together by design).

    Why: new code may need its dependencies' new features, and old code of a dependency
    may not serve a newer client."""

    def __init__(self, replay: Replay) -> None:
        super().__init__(replay)
        self.upgrade_stops = replay.pre.upgrade_stops
        self.stop_first: dict[str, float] = {}
        self.start_last: dict[str, float] = {}

    @classmethod
    def applies(cls, pre: Prepared) -> bool:
        return pre.traits is not None and pre.traits.dependency_order

    def on_stop(self, u: Unit, t: float, service: str, down: set[str]) -> None:
        if service in self.upgrade_stops[u.id]:
            if service not in self.stop_first or t < self.stop_first[service]:
                self.stop_first[service] = t

    def on_new_code(self, u: Unit, t: float, service: str, nodes: tuple[str, ...]) -> None:
        if service not in self.start_last or t > self.start_last[service]:
            self.start_last[service] = t

    def at_end(self) -> None:
        catalog, stop_first, start_last = self.replay.dep.catalog, self.stop_first, self.start_last
        for s in sorted(stop_first):
            for d in catalog[s].depends_on:
                if d in start_last and stop_first[s] < start_last[d]:
                    self.problems.append(
                        f"{s} starts its upgrade at {_fmt(stop_first[s])} "
                        f"but its dependency {d} is upgraded everywhere only at "
                        f"{_fmt(start_last[d])}"
                    )


class EverythingServesAgain(Invariant):
    """A whole plan leaves every instance it stopped serving again (an OS upgrade: every
    instance on the nodes it upgrades).

    Why: the rules were checked at every moment, the end included, but an instance left
    down is an outage nobody announced. A selected part of a workflow may end with instances
    down (the OS upgrade's steps leave nodes stopped for the next command)."""

    def at_end(self) -> None:
        r = self.replay
        if r.pre.partial:
            return
        left = {s: sorted(n) for s, n in r.state.down.items() if n}
        if r.pre.traits is not None and r.pre.traits.replaces_os:
            left = {s: [n for n in ns if n in _planned_nodes(r.plan)] for s, ns in left.items()}
            left = {s: ns for s, ns in left.items() if ns}
        for s, ns in sorted(left.items()):
            self.problems.append(
                f"{s} is left stopped on {', '.join(ns[:3])} at the end of the plan"
            )


class DowntimeWindows(Invariant):
    """Not a rule: the record of each service's full outages (every instance down), the
    announced downtime windows of a verified plan."""

    def __init__(self, replay: Replay) -> None:
        super().__init__(replay)
        self.totals = replay.pre.totals
        self.windows: list[Window] = []
        self.open: dict[str, tuple[float, str]] = {}
        # a service an earlier command left down everywhere (the OS upgrade's transfer) is
        # inside its window from this plan's first moment until a unit starts it again
        for svc, ns in replay.state.down.items():
            if self.totals.get(svc) and len(ns) >= self.totals[svc]:
                self.open[svc] = (0.0, "down since an earlier command of the procedure")

    def on_stop(self, u: Unit, t: float, service: str, down: set[str]) -> None:
        if len(down) >= self.totals.get(service, 0) and service not in self.open:
            self.open[service] = (t, u.why)

    def on_serving(
        self, u: Unit, t: float, service: str, serving: tuple[str, ...], down: set[str]
    ) -> None:
        if service in self.open and len(down) < self.totals.get(service, 0):
            t0, why = self.open.pop(service)
            self.windows.append(Window(service, t0, t, why))

    def found(self) -> list[Window]:
        """The windows, those still open at the end of the plan without an end."""
        windows = self.windows + [
            Window(s, t0, float("inf"), why) for s, (t0, why) in self.open.items()
        ]
        return sorted(windows, key=lambda w: (w.start_s, w.service))


#: The replayed invariants, in the order their problems are reported at one event.
INVARIANTS: tuple[type[Invariant], ...] = (
    RoleSerialRespected,
    PinLiftedAfterLastOldCode,
    ContractAfterLastOldCode,
    SchemaMigratedWithOldCodeStopped,
    DataTransferredOnceBeforeServing,
    ServiceStaysAvailable,
    ExpandBeforeNewCode,
    RpcPinnedWhileMixed,
    ClusterOnOneOsMajor,
    ControlPlaneBeforeDataPlane,
    DependenciesUpgradedFirst,
    EverythingServesAgain,
)


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
    replay = Replay(plan, dep, pre)
    windows = DowntimeWindows(replay)
    rules: list[Invariant] = [rule(replay) for rule in INVARIANTS if rule.applies(pre)]
    replay.run([*rules, windows], times)
    return replay.problems, windows.found()


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
