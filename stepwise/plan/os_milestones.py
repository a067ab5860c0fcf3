"""The milestones of the OS upgrade's units: which each unit reaches (`marks`) and which it
needs (`requires`), by its kind and nodes, so that any selection of the procedure (one of the
operator's commands) can be checked against what was done before."""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from stepwise.model.deployment import Role
from stepwise.model.vocab import Stage, Step, SystemUpgradeKey, UpgradeKey
from stepwise.plan import progress
from stepwise.plan.builder import PlanBuilder
from stepwise.plan.os_cloud import WF, OsCloud
from stepwise.plan.units import Unit


@dataclass(frozen=True)
class _Place:
    """Where a node stands in the procedure: its role, whether the role is sensitive, what
    it waits for (the control plane, or its role's first node to have joined)."""

    role: Role
    sensitive: bool
    gate: list[str]
    join: list[str]
    #: what the node's `upgrade run` units need (the same for each of them), once known
    upgrade: list[str] = field(default_factory=list)

    def upgrade_requires(self, c: OsCloud, n: str) -> list[str]:
        """`_upgrade_requires` of node `n`, computed once: a node has several such units."""
        if not self.upgrade:
            self.upgrade.extend(_upgrade_requires(c, n, self))
        return self.upgrade


def annotate(builder: PlanBuilder, c: OsCloud, start: int) -> None:
    """Give every unit of the procedure from `start` on the milestones it reaches and needs."""
    units = builder.units
    control_plane = c.all_started(c.sensitive)
    last_upgrade = _last_upgrade(units, start)
    places: dict[str, _Place] = {}
    for i in range(start, len(units)):
        u = units[i]
        if not u.nodes and not u.requires and not u.marks:
            continue  # a gate: nothing to reach, nothing to need
        marks, requires = list(u.marks), list(u.requires)
        upgrade = u.stage is Stage.UPGRADE and u.step is not Step.GATE
        for n in u.nodes:
            place = places.get(n)
            if place is None:
                place = places[n] = _place(c, n, control_plane)
            if upgrade:  # most units of a big cloud: the same answer for each of a node's
                requires += place.upgrade_requires(c, n)
                if last_upgrade.get(n) == i:
                    marks.append(progress.started(n))
                continue
            more_marks, more_requires = _milestones(c, u, n, place, last_upgrade.get(n) == i)
            requires += more_requires
            marks += more_marks
        reached = dict.fromkeys(marks)  # a batch of 200 nodes reaches hundreds: asked by hash
        requires = [m for m in dict.fromkeys(requires) if m not in c.p and m not in reached]
        units[i] = replace(u, marks=tuple(reached), requires=tuple(requires))


def _last_upgrade(units: list[Unit], start: int) -> dict[str, int]:
    """node -> the index of its last `upgrade run` unit: the one that starts it."""
    last: dict[str, int] = {}
    for i in range(start, len(units)):
        u = units[i]
        if u.stage is Stage.UPGRADE and u.step is not Step.GATE:
            for n in u.nodes:
                last[n] = i
    return last


def _place(c: OsCloud, n: str, control_plane: list[str]) -> _Place:
    role = c.dep.role_of(n)
    sensitive = role in c.sensitive
    if not sensitive or c.is_first(n):
        join: list[str] = []
    else:
        f = c.first[role.name]
        join = [progress.started(f)] + ([progress.external_started(f)] if c.external(f) else [])
    return _Place(role, sensitive, [] if sensitive else control_plane, join)


def _milestones(
    c: OsCloud, u: Unit, n: str, place: _Place, last_upgrade: bool
) -> tuple[list[str], list[str]]:
    """The milestones unit `u` reaches on node `n`, and those it needs there."""
    marks: list[str] = []
    requires: list[str] = []
    if u.step is Step.SYSTEM_UPGRADE_PREPARE or (
        u.step is Step.LEAVE and u.stage is Stage.SYSTEM_UPGRADE_PREPARE
    ):
        requires += [progress.repos(n), *place.gate, *place.join]
        if u.step is Step.SYSTEM_UPGRADE_PREPARE:
            marks.append(progress.prepared(n))
    elif u.step is Step.EXTERNAL_SYSTEM_UPGRADE_PREPARE:
        requires += [*place.gate, *place.join]
        marks.append(progress.external_prepared(n))
    elif u.step is Step.SYSTEM_UPGRADE_RUN:
        requires.append(progress.prepared(n))
        if c.external(n) and any(
            c.dep.catalog[s].system_upgrade.get(SystemUpgradeKey.PREPARE) for s in c.external(n)
        ):
            requires.append(progress.external_prepared(n))
        marks.append(progress.new_os(n))
    elif u.stage is Stage.UPGRADE and u.step is not Step.GATE:
        requires += place.upgrade_requires(c, n)
        if last_upgrade:
            marks.append(progress.started(n))
    elif u.step is Step.EXTERNAL_SYSTEM_UPGRADE_RUN:
        requires.append(progress.started(n) if c.internal(n) else progress.new_os(n))
        marks.append(progress.external_started(n))
    elif u.step is Step.SYSTEM_UPGRADE_TRANSFER_DATA:
        requires += [progress.new_os(n), progress.stopped_old(place.role.name)]
    elif u.step is Step.STOP and u.stage is Stage.SYSTEM_UPGRADE_TRANSFER_DATA:
        requires.append(progress.new_os(c.first[place.role.name]))
    return marks, requires


def _upgrade_requires(c: OsCloud, n: str, place: _Place) -> list[str]:
    """What an `upgrade run` unit needs on node `n`: the new OS, the role's data moved (first
    node), the first node joined (other nodes), RPC pinned (services speaking RPC)."""
    role = place.role
    requires = [progress.new_os(n)]
    if (
        place.sensitive
        and c.is_first(n)
        and progress.transferred(role.name) not in c.p
        and c.old_nodes(role)
    ):
        movers = any(
            c.dep.catalog[s].system_upgrade.get(SystemUpgradeKey.TRANSFER_DATA)
            for s in c.internal(n)
        )
        requires.append(
            progress.transferred(role.name) if movers else progress.stopped_old(role.name)
        )
    requires += place.join
    # only a pin step 1 sets (a group that negotiates its versions has none to wait for)
    if any(c.dep.catalog[s].has_step(WF, UpgradeKey.PIN) for s in c.internal(n)):
        requires.append(progress.PINNED)
    return requires
