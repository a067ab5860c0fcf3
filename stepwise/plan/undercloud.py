"""The management node: stop everything, update the tool first, then all packages, re-run
the install/config, always run every DB sync, start. Minor and major take the same path;
a MariaDB major-version change adds a dump before and a restore after the packages."""

from __future__ import annotations

from stepwise.errors import InputError, Problem
from stepwise.model.catalog import node_step_seconds
from stepwise.model.deployment import Deployment
from stepwise.model.facts import Facts
from stepwise.plan.builder import PlanBuilder

WF = "upgrade"
DB_CLUSTERS = frozenset({"galera", "mariadb", "mysql"})


def _major(v: str | None) -> str | None:
    """A database's major version is X.Y (MariaDB 10.3 -> 10.5 needs a dump and restore)."""
    return ".".join(v.split(".")[:2]) if v else None


def plan_undercloud_upgrade(builder: PlanBuilder, dep: Deployment, facts: Facts, nodes: list[str] | None) -> None:
    roles = [r for r in dep.roles if r.is_management]
    if not roles:
        raise InputError(Problem(f"deployment {dep.name} has no management node", file=dep.path, field="roles[].tags",
                                 hint="tag the management node's role with 'management' (or 'undercloud')"))
    catalog = dep.catalog
    targets = [n.name for r in roles for n in r.nodes if nodes is None or n.name in nodes]
    if not targets:
        raise InputError(Problem("--limit selects no management node", field="--limit"))
    for node in targets:
        role = dep.role_of(node)
        svcs = role.services
        objs = [catalog[s] for s in svcs]
        prev: str | None = None

        def add(step: str, services, why: str, seconds: float, **kw) -> None:
            nonlocal prev
            work = {node: tuple(services)}
            prev = builder.add(step, nodes=[node], services=list(services), after=[prev], why=why, stage="run",
                               phase="management", scope="node", duration_s=seconds, work=work, **kw)

        add("validate", [s for s in svcs if catalog[s].has_step(WF, "validate")],
            "pre-flight checks on the management node", node_step_seconds([], "validate"))
        add("stop", svcs, "stop every service first: a package update would restart them with old config "
                          "(restart loop), and an old service left running can block the new one",
            node_step_seconds(objs, "stop"), stops={s: [node] for s in svcs})
        tool = role.tool_packages
        add("packages", [], "update the tool and its content first, so the new tool drives the rest",
            node_step_seconds([], "packages"), vars={"extra_packages": {node: list(tool)}} if tool else None,
            tags=("tool",))
        db = [s for s in svcs if (catalog[s].cluster or "") in DB_CLUSTERS]
        change = None
        if db:
            if facts.known:
                pk = facts.of(node).packages
                change = any(_major(pk[p].installed) != _major(pk[p].available)
                             for s in db for p in catalog[s].packages if p in pk and pk[p].available)
            dump = change is not False
            if dump:
                add("backup", db, "database major version changes: dump every database before the packages"
                    if change else "database version change unknown (no facts): dump every database to be safe",
                    node_step_seconds([catalog[s] for s in db], "backup"), vars={"db_dump": True})
        add("packages", svcs, "then update all packages, with every service stopped",
            node_step_seconds(objs, "packages"), vars={"all_packages": True})
        if db and change is not False:
            add("restore", db, "restore the dump into the new database major version"
                if change else "restore the dump if the database major version changed",
                node_step_seconds([catalog[s] for s in db], "backup"),
                vars={"db_restore": True, "only_if_major_changed": change is None})
        add("config", svcs, "re-run the install/config for the new version", max(node_step_seconds(objs, "config"), 1.0))
        sync = [s for s in svcs if catalog[s].has_step(WF, "migrate")]
        if sync:
            add("migrate", sync, "always run every DB sync (idempotent): a version change outside the tool must not "
                                 "leave a schema behind", node_step_seconds([catalog[s] for s in sync], "migrate"))
        add("start", svcs, "start everything on the new version", node_step_seconds(objs, "start"),
            starts={s: [node] for s in svcs})
        add("verify", [s for s in svcs if catalog[s].health or catalog[s].has_step(WF, "verify")],
            "health checks of every service", node_step_seconds([], "verify"))
