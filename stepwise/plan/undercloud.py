"""The management node (seed `undercloud-upgrade`): minor and major take the same path.

Update the tool and its content first (a new tool drives the rest), dump the database while
it still runs when its major version changes (or may: no facts), stop every service (a
package update must not restart one with its old config, and an old service left running
can block the new one), update all packages, restore the dump into the new database, re-run
the install/config, start the database, always run every DB sync (idempotent), start
everything else, check health.

With its OS upgrade (`-e system_upgrade_mode=in-place`; the seed: `leapp upgrade`, reboot,
then the undercloud upgrade): after every service is stopped, leapp prepares the new OS and the
reboot installs it; the database is always dumped first, since the new OS brings a new
database major version. A reprovisioned management node is a backup-and-restore procedure
(the seed), not this one.
"""

from __future__ import annotations

from stepwise.errors import InputError, Problem
from stepwise.model.catalog import node_step_seconds
from stepwise.model.deployment import Deployment
from stepwise.model.facts import Facts
from stepwise.model.vocab import (
    CatalogKey,
    Phase,
    Scope,
    Section,
    Stage,
    Step,
    SystemUpgradeKey,
    UpgradeMode,
)
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
) -> None:
    """The management node's upgrade (and its OS upgrade when `os_mode` is given); with a
    `target_release`, its repositories are switched to it first."""
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
    catalog = dep.catalog
    targets = [n.name for r in roles for n in r.nodes if nodes is None or n.name in nodes]
    if not targets:
        raise InputError(Problem("--limit selects no management node", field="--limit"))
    for node in targets:
        role = dep.role_of(node)
        svcs = list(role.services)
        db = [s for s in svcs if (catalog[s].cluster or "") in DB_CLUSTERS]
        rest = [s for s in svcs if s not in db]
        prev: str | None = None

        # add/secs are called only within this iteration: bind the current node explicitly
        def add(
            step: Step, services: list[str], why: str, seconds: float, *, node: str = node, **kw
        ) -> None:
            nonlocal prev
            prev = builder.add(
                step,
                nodes=[node],
                services=services,
                after=[prev],
                why=why,
                stage=Stage.RUN,
                phase=Phase.MANAGEMENT,
                scope=Scope.NODE,
                duration_s=seconds,
                **{"work": {node: tuple(services)}, **kw},
            )

        def secs(services: list[str], step: CatalogKey) -> float:
            return node_step_seconds([catalog[s] for s in services], step)

        add(
            Step.VALIDATE,
            [s for s in svcs if catalog[s].has_step(WF, Step.VALIDATE)],
            "pre-flight checks on the management node",
            secs([], Step.VALIDATE),
        )
        if target_release or os_mode:
            add(
                Step.REPOS,
                [],
                "switch the repositories to the target release (variable target_release): the new "
                "tool and"
                + (" the OS upgrade" if os_mode else " the packages")
                + " come from there",
                secs([], Step.REPOS) or 10.0,
                work={node: ()},
            )
        if role.tool_packages:
            add(
                Step.PACKAGES,
                [],
                "update the tool and its content first, so the new tool drives the rest",
                secs([], Step.PACKAGES),
                vars={"extra_packages": {node: list(role.tool_packages)}},
                tags=("tool",),
            )
        change = (True if os_mode else db_major_changes(dep, facts, node, db)) if db else False
        if db and change is not False:
            add(
                Step.BACKUP,
                db,
                "the new OS brings a new database major version: dump every database while it "
                "still runs"
                if os_mode
                else "the database's major version changes: dump every database while it still runs"
                if change
                else "the database's major version may change (no facts): dump every database "
                "while it runs",
                secs(db, Step.BACKUP),
            )
        add(
            Step.STOP,
            svcs,
            "stop every service first: a package update would restart them with old config "
            "(restart loop), and an old service left running can block the new one",
            secs(svcs, Step.STOP),
            stops={s: [node] for s in svcs},
        )
        if os_mode:
            add(
                Step.SYSTEM_UPGRADE_PREPARE,
                [],
                "the OS upgrade: leapp downloads the new OS and the new release and "
                "leaves the node ready to reboot into the upgrade",
                secs([], SystemUpgradeKey.PREPARE) or 300.0,
                tags=("system_upgrade",),
                work={node: ()},
            )
            add(
                Step.SYSTEM_UPGRADE_RUN,
                [],
                "reboot into the OS upgrade; the node comes back on the new OS with "
                "nothing running",
                secs([], Step.REBOOT) or 600.0,
                tags=("system_upgrade",),
                work={node: ()},
            )
        add(
            Step.PACKAGES,
            svcs,
            "then update all packages, with every service stopped",
            secs(svcs, Step.PACKAGES),
            vars={"all_packages": [node]},
        )
        if db and change is not False:
            add(
                Step.RESTORE,
                db,
                "restore the dump into the new database version"
                if change
                else "restore the dump (the database's major version may have changed)",
                secs(db, Step.BACKUP),
            )
        add(
            Step.CONFIG,
            svcs,
            "re-run the install/config for the new version",
            max(secs(svcs, Step.CONFIG), 1.0),
        )
        if db:
            add(
                Step.START,
                db,
                "start the database: every DB sync needs it",
                secs(db, Step.START),
                starts={s: [node] for s in db},
            )
        sync = [s for s in svcs if catalog[s].has_step(WF, Step.MIGRATE)]
        if sync:
            add(
                Step.MIGRATE,
                sync,
                "always run every DB sync (idempotent): a version changed outside the tool must "
                "not leave a schema behind",
                secs(sync, Step.MIGRATE),
            )
        if rest:
            add(
                Step.START,
                rest,
                "start everything else on the new version",
                secs(rest, Step.START),
                starts={s: [node] for s in rest},
            )
        add(
            Step.VERIFY,
            [s for s in svcs if catalog[s].health or catalog[s].has_step(WF, Step.VERIFY)],
            "health checks of every service",
            secs([], Step.VERIFY),
        )
