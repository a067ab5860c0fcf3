"""The invariants about old and new code: what may run beside what, and what must come first
(RPC pins, schema expand/migrate/contract, the OS upgrade's data transfer and clusters, the
order of dependencies). Applied by `invariants.check`; see its list."""

from __future__ import annotations

from collections import defaultdict

from stepwise.model.choices import RpcMixing
from stepwise.model.deployment import Deployment
from stepwise.model.vocab import Step
from stepwise.plan.units import Unit
from stepwise.verify.prepared import Prepared, State
from stepwise.verify.replay import Invariant, Replay, fmt_time, where


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
                    f"at {fmt_time(t)} {where(u)} lifts the RPC pin of '{g}' "
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
                        f"at {fmt_time(t)} {where(u)} contracts the schema of {s} "
                        f"while old code still runs on {', '.join(old[:3])}; "
                        "contract after the last old instance"
                    )


class NoOldCodeInFactsAtConverge(Invariant):
    """An RPC pin is lifted and a schema contracted only when no instance the facts show on
    old code still runs it, whatever part of the workflow the plan is (a selected stage too).

    Why: `upgrade converge` typed while the facts show old code would lift the pins and
    contract the schemas under it; the exemption of a selected part (the rest is another
    command's) must not hide what the facts say."""

    steps = frozenset({Step.UNPIN_RPC, Step.CONTRACT})

    @classmethod
    def applies(cls, pre: Prepared) -> bool:
        return bool(pre.facts_old)

    def on_start(self, u: Unit, t: float) -> None:
        r = self.replay
        said: set[str] = set()
        for n in u.nodes:
            for s in u.services_on(n):
                g = r.pre.rpc_of.get(s) if u.step is Step.UNPIN_RPC else None
                members = r.pre.groups.get(g, ()) if g else (s,)
                for m in members:
                    old = sorted(r.pre.facts_old.get(m, set()) - r.state.new_code.get(m, set()))
                    if not old or (g or m) in said:
                        continue
                    said.add(g or m)
                    what = f"lifts the RPC pin of '{g}'" if g else f"contracts the schema of {m}"
                    self.problems.append(
                        f"at {fmt_time(t)} {where(u)} {what} while the facts show old {m} "
                        f"on {', '.join(old[:3])}{', ...' if len(old) > 3 else ''}; "
                        "upgrade them first (stepwise upgrade run)"
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
                        f"at {fmt_time(t)} {where(u)} migrates the schema of {s} "
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
                    f"{where(u)}: data transfer onto {n} a second time would overwrite newer data"
                )
            if n in self.started_on and self.started_on[n] < t:
                self.problems.append(
                    f"{where(u)}: data transfer onto {n} after services started there "
                    "destroys newer data"
                )
            if u.idempotent:
                self.problems.append(
                    f"{where(u)}: a data transfer must be marked non-idempotent "
                    "(it must never run twice)"
                )

    def on_serving(
        self, u: Unit, t: float, service: str, serving: tuple[str, ...], down: set[str]
    ) -> None:
        for n in serving:
            self.started_on.setdefault(n, t)


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
                f"at {fmt_time(t)} {where(u)} starts new {service} "
                f"on {', '.join(nodes[:3])} before its schema is expanded; "
                "the expand runs first, on the bootstrap node"
            )


class RpcPinnedWhileMixed(Invariant):
    """New code of an RPC group starts only while the group is pinned, as long as one of its
    instances runs old code (workflows that pin RPC), where the service is pinned by its
    configuration (`rpc_mixing: pinned`; one that negotiates caps itself, one that follows
    comes after what it depends on).

    Why: unpinned, new code speaks an RPC version its old peers cannot read."""

    @classmethod
    def applies(cls, pre: Prepared) -> bool:
        return pre.rpc_check

    def on_new_code(self, u: Unit, t: float, service: str, nodes: tuple[str, ...]) -> None:
        r = self.replay
        g = r.pre.rpc_of.get(service)
        if g and r.dep.catalog[service].rpc_mixing is not RpcMixing.PINNED:
            return
        if g and r.old_count[g] and g not in r.state.pinned:
            self.problems.append(
                f"at {fmt_time(t)} {where(u)} starts new {service} while "
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
                f"at {fmt_time(t)} {where(u)}: {service} cluster would have members "
                f"on two OS major versions ({', '.join(serving[:4])}); "
                "such a cluster cannot form"
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
                        f"{s} starts its upgrade at {fmt_time(stop_first[s])} "
                        f"but its dependency {d} is upgraded everywhere only at "
                        f"{fmt_time(start_last[d])}"
                    )


def _old_instance(dep: Deployment, members: list[str], st: State) -> str:
    """An instance of the group's services on old code, to name in a problem."""
    for m in members:
        for n in dep.instances[m]:
            if n.name not in st.new_code.get(m, set()):
                return f"{m} on {n.name}"
    return "?"
