"""The invariants a plan must keep, checked on a replay of its schedule.

Three are static, checked once per plan: its units are in order (`units_in_order`), every
RPC group it pins can be pinned (`rpc_groups_can_pin`) and its prestage disrupts nothing and
comes before each node's disruption (`prestaged.prestage_first`). The others are replayed,
each its own class with the hooks it needs (`Invariant`), applied in `INVARIANTS` order by one
small loop
(`replay.Replay`) over the start and end events of the plan's schedule (the rules about
old and new code are in `versions.py`):

  RoleSerialRespected                 at most `update_serial` nodes of a role at once
  PinLiftedAfterLastOldCode           no RPC unpin while an instance of the group runs old code
  ContractAfterLastOldCode            no schema contract while an old instance runs
  NoOldCodeInFactsAtConverge          no unpin or contract while the facts show old code
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

from stepwise.model.choices import RpcMixing
from stepwise.model.deployment import Deployment
from stepwise.model.vocab import Phase, Section, Step, UpgradeKey
from stepwise.plan.units import Plan, Unit, Window
from stepwise.verify.prepared import Prepared, build_prepared
from stepwise.verify.prestaged import prestage_first
from stepwise.verify.replay import Invariant, Replay, fmt_time, where
from stepwise.verify.versions import (
    ClusterOnOneOsMajor,
    ContractAfterLastOldCode,
    DataTransferredOnceBeforeServing,
    DependenciesUpgradedFirst,
    ExpandBeforeNewCode,
    NoOldCodeInFactsAtConverge,
    PinLiftedAfterLastOldCode,
    RpcPinnedWhileMixed,
    SchemaMigratedWithOldCodeStopped,
)

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
                    f"{where(u)} waits for {a}, which is not an earlier unit "
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
        "its services (or say how it negotiates: rpc_mixing)"
        for g, members in sorted(pre.groups.items())
        if any(catalog[s].rpc_mixing is RpcMixing.PINNED for s in members)
        and not any(catalog[s].has_step(Section.UPGRADE, UpgradeKey.PIN) for s in members)
    ]


def prepare(plan: Plan, dep: Deployment) -> Prepared:
    """The time-independent part of `check`, to share between replays of the same plan."""
    problems = units_in_order(plan)
    if problems:
        return Prepared(problems)
    pre = build_prepared(plan, dep)
    pre.static_problems = rpc_groups_can_pin(dep, pre) + prestage_first(plan)
    return pre


# -- replayed invariants: capacity and order (the others, about code versions: versions.py)


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
                    f"at {fmt_time(t)} {where(u)}: {k} nodes of {role} "
                    f"are being worked on; its update_serial is {self.serial[role]}"
                )

    def on_end(self, u: Unit, t: float) -> None:
        given = self.closes.get(u.id)
        if given is not None:
            for role, n in given:
                self.busy[role] -= n


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
                f"at {fmt_time(t)} {where(u)} takes {service} down on {len(down)} of "
                f"{self.totals[service]} nodes; its rule ({rule}) allows {a}"
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
                f"the data plane starts stopping at {fmt_time(self.data_start)} "
                f"before the control plane is done ({fmt_time(self.ctrl_end)})"
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
    announced downtime windows of a verified plan. A service whose rule cannot hold with its
    instances (`Deployment.forced_downtime`) is out as soon as its rule is broken (a quorum of
    two with one member down): its window says so."""

    def __init__(self, replay: Replay) -> None:
        super().__init__(replay)
        self.totals = dict(replay.pre.totals)
        self.forced = replay.pre.forced
        for svc, (down_at, _why) in self.forced.items():
            self.totals[svc] = down_at
        self.windows: list[Window] = []
        self.open: dict[str, tuple[float, str]] = {}
        # a service an earlier command left down everywhere (the OS upgrade's transfer) is
        # inside its window from this plan's first moment until a unit starts it again
        for svc, ns in replay.state.down.items():
            if self.totals.get(svc) and len(ns) >= self.totals[svc]:
                self.open[svc] = (0.0, "down since an earlier command of the procedure")

    def on_stop(self, u: Unit, t: float, service: str, down: set[str]) -> None:
        if len(down) >= self.totals.get(service, 0) and service not in self.open:
            forced = self.forced.get(service)
            self.open[service] = (t, f"{u.why}; {forced[1]}" if forced else u.why)

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
    NoOldCodeInFactsAtConverge,
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
