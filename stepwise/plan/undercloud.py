"""The management node (seed `undercloud-upgrade`): minor and major take the same path.

Update the tool and its content first (a new tool drives the rest), dump the database while
it still runs when its major version changes (or may: no facts), stop every service (a
package update must not restart one with its old config, and an old service left running
can block the new one), update all packages, open the old datadir with the new database and
upgrade its system tables (the dump stays as the way back), re-run the install/config, start
the database, always run every DB sync (idempotent), start everything else, then every sync to
its end (the data migrations and the contracts: nothing old runs any more), check health.

With its OS upgrade (`-e system_upgrade_mode=in-place`; the seed: `leapp upgrade`, reboot,
then the undercloud upgrade): after every service is stopped, leapp prepares the new OS and the
reboot installs it; the database is always dumped first, since the new OS brings a new
database major version. A reprovisioned management node is a backup-and-restore procedure
(the seed), not this one.
"""

from __future__ import annotations

from dataclasses import dataclass

from stepwise.errors import InputError, Problem
from stepwise.model.catalog import node_step_seconds
from stepwise.model.choices import UpgradeMode
from stepwise.model.deployment import Deployment
from stepwise.model.facts import Facts
from stepwise.model.vocab import CatalogKey, Phase, Scope, Section, Stage, Step, SystemUpgradeKey
from stepwise.plan.builder import PlanBuilder

WF = Section.UPGRADE
DB_CLUSTERS = frozenset({"galera", "mariadb", "mysql"})


def _major(v: str | None) -> str | None:
    """A database's major version is X.Y (MariaDB 10.3 -> 10.5 needs a dump and restore)."""
    return ".".join(v.split(".")[:2]) if v else None


def db_major_changes(dep: Deployment, facts: Facts, node: str, db: list[str]) -> bool | None:
    """True/False when the facts say whether the database's major version changes; None when
    nothing is known."""
    if not facts.known:
        return None
    pk = facts.of(node).packages
    return any(
        _major(pk[p].installed) != _major(pk[p].available)
        for s in db
        for p in dep.catalog[s].packages
        if p in pk and pk[p].available
    )


def plan_undercloud_upgrade(
    builder: PlanBuilder,
    dep: Deployment,
    facts: Facts,
    nodes: list[str] | None,
    os_mode: str | None = None,
    target_release: str | None = None,
    prestage: int = 0,
) -> None:
    """The management node's upgrade (and its OS upgrade when `os_mode` is given); with a
    `target_release`, its repositories are switched to it first. `prestage` > 0: a prestage
    stage first (the repositories switched, then the node's packages fetched while it serves;
    not with the OS upgrade, whose leapp prepare fetches the new OS itself)."""
    _refuse_os_mode(os_mode)
    for node in _targets(dep, nodes):
        n = _node(dep, facts, node, os_mode)
        chain = _Chain(builder, dep, node)
        if prestage > 0 and not os_mode:
            _prestage(chain, n, target_release)
            target_release = None  # switched in the prestage
        _before_stop(chain, n, target_release)
        _stop(chain, n)
        _after_stop(chain, n)


def _refuse_os_mode(os_mode: str | None) -> None:
    if os_mode is not None and os_mode != UpgradeMode.IN_PLACE:
        raise InputError(
            Problem(
                f"the management node's OS upgrade runs in place, not '{os_mode}'",
                field="-e",
                hint=f"use -e system_upgrade_mode={UpgradeMode.IN_PLACE}; a reprovisioned "
                "management node is restored from its backup (the seed's backup and restore "
                "procedure)",
            )
        )


def _targets(dep: Deployment, nodes: list[str] | None) -> list[str]:
    """The management nodes to upgrade (those among `nodes`, if given)."""
    roles = [r for r in dep.roles if r.is_management]
    if not roles:
        raise InputError(
            Problem(
                f"deployment {dep.name} has no management node",
                file=dep.path,
                field="roles[].tags",
                hint="tag the management node's role with 'management' (or 'undercloud')",
            )
        )
    targets = [n.name for r in roles for n in r.nodes if nodes is None or n.name in nodes]
    if not targets:
        raise InputError(Problem("--limit selects no management node", field="--limit"))
    return targets


@dataclass(frozen=True)
class _Node:
    """One management node as its upgrade sees it: its services, the databases among them
    and the rest, whether the databases' major version changes (None: may), the OS mode."""

    name: str
    services: list[str]
    db: list[str]
    rest: list[str]
    change: bool | None
    os_mode: str | None


def _node(dep: Deployment, facts: Facts, node: str, os_mode: str | None) -> _Node:
    svcs = list(dep.role_of(node).services)
    db = [s for s in svcs if (dep.catalog[s].cluster or "") in DB_CLUSTERS]
    rest = [s for s in svcs if s not in db]
    change = (True if os_mode else db_major_changes(dep, facts, node, db)) if db else False
    return _Node(node, svcs, db, rest, change, os_mode)


class _Chain:
    """One node's units, each after the previous one."""

    def __init__(self, builder: PlanBuilder, dep: Deployment, node: str):
        self.builder, self.dep, self.node = builder, dep, node
        self.prev: str | None = None

    def add(self, step: Step, services: list[str], why: str, seconds: float, **kw) -> None:
        """A unit of `step` on the node's `services`, after the previous one (in the run
        stage unless `stage` says another)."""
        node = self.node
        stage = kw.pop("stage", Stage.RUN)
        self.prev = self.builder.add(
            step,
            nodes=[node],
            services=services,
            after=[self.prev],
            why=why,
            stage=stage,
            phase=Phase.MANAGEMENT,
            scope=Scope.NODE,
            duration_s=seconds,
            **{"work": {node: tuple(services)}, **kw},
        )

    def secs(self, services: list[str], step: CatalogKey) -> float:
        """The time of `step` on the node for `services`."""
        return node_step_seconds([self.dep.catalog[s] for s in services], step)


def _prestage(chain: _Chain, n: _Node, target_release: str | None) -> None:
    """The prestage stage: switch the repositories (when a release is given), then fetch the
    packages the upgrade installs, while every service still serves."""
    node, role = n.name, chain.dep.role_of(n.name)
    if target_release:
        chain.add(
            Step.REPOS,
            [],
            "switch the repositories to the target release (variable target_release): the "
            "prestage fetches from there",
            chain.secs([], Step.REPOS) or 10.0,
            work={node: ()},
            stage=Stage.PRESTAGE,
        )
    chain.add(
        Step.PRESTAGE,
        n.services,
        f"fetch what {node} installs while its services keep serving",
        chain.secs(n.services, Step.PRESTAGE),
        vars={"extra_packages": {node: list(role.tool_packages)}} if role.tool_packages else None,
        stage=Stage.PRESTAGE,
    )
    chain.prev = chain.builder.gate(
        [chain.prev], f"prestaged: {node} holds what it installs", Stage.PRESTAGE
    )


def _before_stop(chain: _Chain, n: _Node, target_release: str | None) -> None:
    """Validate, switch the repositories, update the tool, dump the databases."""
    catalog, node, svcs = chain.dep.catalog, n.name, n.services
    role = chain.dep.role_of(node)
    chain.add(
        Step.VALIDATE,
        [s for s in svcs if catalog[s].has_step(WF, Step.VALIDATE)],
        "pre-flight checks on the management node",
        chain.secs([], Step.VALIDATE),
    )
    if target_release or n.os_mode:
        chain.add(
            Step.REPOS,
            [],
            "switch the repositories to the target release (variable target_release): the new "
            "tool and" + (" the OS upgrade" if n.os_mode else " the packages") + " come from there",
            chain.secs([], Step.REPOS) or 10.0,
            work={node: ()},
        )
    if role.tool_packages:
        chain.add(
            Step.PACKAGES,
            [],
            "update the tool and its content first, so the new tool drives the rest",
            chain.secs([], Step.PACKAGES),
            vars={"extra_packages": {node: list(role.tool_packages)}},
            tags=("tool",),
        )
    if n.db and n.change is not False:
        chain.add(
            Step.BACKUP,
            n.db,
            "the new OS brings a new database major version: dump every database while it "
            "still runs"
            if n.os_mode
            else "the database's major version changes: dump every database while it still runs"
            if n.change
            else "the database's major version may change (no facts): dump every database "
            "while it runs",
            chain.secs(n.db, Step.BACKUP),
        )


def _stop(chain: _Chain, n: _Node) -> None:
    """Stop every service; with the OS upgrade, prepare it and reboot into it."""
    node, svcs = n.name, n.services
    # an API behind the node's load balancer finishes its requests in flight before it stops
    leave = [s for s in svcs if chain.dep.catalog[s].frontend]
    if leave:
        # the node's only instance of each: its downtime starts when it leaves the balancer
        chain.add(
            Step.LEAVE,
            leave,
            "out of the load balancer first",
            chain.secs(leave, Step.LEAVE),
            stops=chain.dep.catalog.behind_balancer({node: leave}),
        )
    chain.add(
        Step.STOP,
        svcs,
        "stop every service first: a package update would restart them with old config "
        "(restart loop), and an old service left running can block the new one",
        chain.secs(svcs, Step.STOP),
        stops={s: [node] for s in svcs},
    )
    if n.os_mode:
        chain.add(
            Step.SYSTEM_UPGRADE_PREPARE,
            [],
            "the OS upgrade: leapp downloads the new OS and the new release and "
            "leaves the node ready to reboot into the upgrade",
            chain.secs([], SystemUpgradeKey.PREPARE) or 300.0,
            tags=("system_upgrade",),
            work={node: ()},
        )
        chain.add(
            Step.SYSTEM_UPGRADE_RUN,
            [],
            "reboot into the OS upgrade; the node comes back on the new OS with nothing running",
            chain.secs([], Step.REBOOT) or 600.0,
            tags=("system_upgrade",),
            work={node: ()},
        )


def _after_stop(chain: _Chain, n: _Node) -> None:
    """Packages, restore, config, the database, every DB sync, the rest, health."""
    node, svcs, db = n.name, n.services, n.db
    chain.add(
        Step.PACKAGES,
        svcs,
        "then update all packages, with every service stopped",
        chain.secs(svcs, Step.PACKAGES),
        vars={"all_packages": [node]},
    )
    if db and n.change is not False:
        chain.add(
            Step.RESTORE,
            db,
            "open the old datadir with the new database version and upgrade its system "
            "tables (mariadb-upgrade); the dump stays as the way back"
            if n.change
            else "upgrade the datadir's system tables if the database's major version "
            "changed (mariadb-upgrade; the dump stays as the way back)",
            chain.secs(db, Step.BACKUP),
        )
    chain.add(
        Step.CONFIG,
        svcs,
        "re-run the install/config for the new version",
        max(chain.secs(svcs, Step.CONFIG), 1.0),
    )
    if db:
        chain.add(
            Step.START,
            db,
            "start the database: every DB sync needs it",
            chain.secs(db, Step.START),
            starts={s: [node] for s in db},
        )
    _migrate_and_start(chain, n)


def _migrate_and_start(chain: _Chain, n: _Node) -> None:
    """Every DB sync to its end (expand, data migrations, contract), then everything else
    started, then health checks."""
    catalog, node, svcs = chain.dep.catalog, n.name, n.services
    sync = [s for s in svcs if catalog[s].has_step(WF, Step.MIGRATE)]
    if sync:
        chain.add(
            Step.MIGRATE,
            sync,
            "always run every DB sync (idempotent): a version changed outside the tool must "
            "not leave a schema behind",
            chain.secs(sync, Step.MIGRATE),
        )
    if n.rest:
        chain.add(
            Step.START,
            n.rest,
            "start everything else on the new version",
            chain.secs(n.rest, Step.START),
            starts={s: [node] for s in n.rest},
        )
    # every sync to its end, as the services' guides order them: once the new release runs
    # (nothing old is left on the one node), the data migrations and the contract (an expand
    # alone would leave keystone's and glance's schemas half-migrated for good)
    for step, has, why in (
        (
            Step.CONVERGE,
            lambda s: bool(s.converge),
            "then the data migrations (online_data_migrations, db_sync --migrate): only the "
            "new release runs",
        ),
        (
            Step.CONTRACT,
            lambda s: bool(s.contract),
            "and contract the expanded schemas: no old code is left to read the old columns",
        ),
    ):
        these = [s for s in svcs if has(catalog[s])]
        if these:
            chain.add(step, these, why, chain.secs(these, step))
    back = [s for s in svcs if catalog[s].frontend]
    if back:
        chain.add(
            Step.REJOIN,
            back,
            "back into the load balancer once healthy",
            chain.secs(back, Step.REJOIN),
        )
    chain.add(
        Step.VERIFY,
        [s for s in svcs if catalog[s].health or catalog[s].has_step(WF, Step.VERIFY)],
        "health checks of every service",
        chain.secs([], Step.VERIFY),
    )
