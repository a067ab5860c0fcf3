"""Steps 10-12 of the OS upgrade, once every node runs the new OS and release: online data
migrations, converge (RPC unpinned, schemas contracted), cleanup."""

from __future__ import annotations

from stepwise.model.vocab import Scope, Stage, Step, SystemUpgradeKey, UpgradeKey
from stepwise.plan import progress
from stepwise.plan.builder import PlanBuilder
from stepwise.plan.os_cloud import WF, OsCloud, secs
from stepwise.plan.planes import Cursor
from stepwise.plan.update_upgrade import on_bootstrap


def finish(builder: PlanBuilder, c: OsCloud, cur: Cursor) -> None:
    """Steps 10-12: online data migrations, converge, cleanup."""
    after = cur.after
    services = {s for r in c.roles for s in r.services}
    if progress.ONLINE_UPGRADED not in c.p:
        after = _online_migrations(builder, c, services, after)
    if progress.CONVERGED not in c.p:
        # with no online migration step 10 is a gate, which a command alone never records
        # ("nothing to do"): converge then needs what step 10 would have, every node started
        needs = (
            [progress.ONLINE_UPGRADED]
            if on_bootstrap(c.dep, services, lambda s: bool(s.converge))
            else c.all_started()
        )
        after = _unpin(builder, c, after, needs)
        after = _contract(builder, c, services, after, needs)
        after = _converge_verify(builder, c, after, needs)
    _cleanup(builder, c, after)


def _online_migrations(
    builder: PlanBuilder, c: OsCloud, services: set[str], after: str | None
) -> str | None:
    """Step 10: online data migrations, or a gate reaching the milestone without any."""
    dep = c.dep
    conv = on_bootstrap(dep, services, lambda s: bool(s.converge))
    if not conv:
        return builder.gate(
            [after],
            "step 10: no online data migration to run",
            Stage.ONLINE_UPGRADE,
            marks=[progress.ONLINE_UPGRADED],
        )  # reached with the rest: nothing to migrate
    return builder.add(
        Step.CONVERGE,
        nodes=list(conv),
        services=sorted({s for v in conv.values() for s in v}),
        after=[after],
        work=conv,
        stage=Stage.ONLINE_UPGRADE,
        scope=Scope.DEPLOYMENT,
        duration_s=max(secs(dep, ss, Step.CONVERGE) for ss in conv.values()),
        why="step 10: online data migrations, now that every node runs the new release",
        marks=[progress.ONLINE_UPGRADED],
        requires=c.all_started(),
    )


def _unpin(builder: PlanBuilder, c: OsCloud, after: str | None, needs: list[str]) -> str | None:
    """Step 11: the RPC pins lifted on every node that has them."""
    dep = c.dep
    unpin = c.per_node(lambda s: bool(s.rpc) and s.has_step(WF, UpgradeKey.UNPIN))
    unpin = {k: v for k, v in unpin.items() if v}
    if not unpin:
        return after
    return builder.add(
        Step.UNPIN_RPC,
        nodes=list(unpin),
        services=sorted({s for v in unpin.values() for s in v}),
        after=[after],
        work=unpin,
        stage=Stage.CONVERGE,
        scope=Scope.DEPLOYMENT,
        duration_s=max(secs(dep, ss, UpgradeKey.UNPIN) for ss in set(unpin.values())),
        why="step 11: converge: lift the RPC pins, every peer runs the new release",
        requires=needs,
    )


def _contract(
    builder: PlanBuilder, c: OsCloud, services: set[str], after: str | None, needs: list[str]
) -> str | None:
    """Step 11: the expanded schemas contracted."""
    # the expanded schemas lose their old columns only now that no old code is left (a
    # contract is idempotent: run again after an interruption, it finds the head)
    dep = c.dep
    contract = on_bootstrap(dep, services, lambda s: bool(s.contract))
    if not contract:
        return after
    return builder.add(
        Step.CONTRACT,
        nodes=list(contract),
        services=sorted({s for v in contract.values() for s in v}),
        after=[after],
        work=contract,
        stage=Stage.CONVERGE,
        scope=Scope.DEPLOYMENT,
        duration_s=max(secs(dep, ss, Step.CONTRACT) for ss in contract.values()),
        why="step 11: converge: contract the expanded schemas, no old code reads them",
        requires=needs,
    )


def _converge_verify(
    builder: PlanBuilder, c: OsCloud, after: str | None, needs: list[str]
) -> str | None:
    """Step 11: every service's health re-asserted; converge is reached."""
    dep = c.dep
    health = c.per_node(lambda s: bool(s.health))
    return builder.add(
        Step.VERIFY,
        nodes=list(health),
        services=sorted({s for v in health.values() for s in v}),
        after=[after],
        work=health,
        stage=Stage.CONVERGE,
        scope=Scope.DEPLOYMENT,
        duration_s=secs(dep, [], Step.VERIFY),
        why="step 11: converge: re-assert the state",
        marks=[progress.CONVERGED],
        requires=needs,
    )


def _cleanup(builder: PlanBuilder, c: OsCloud, after: str | None) -> None:
    """Step 12: what the OS upgrade persisted removed, on every node."""
    dep = c.dep
    everyone = c.per_node(lambda s: bool(s.system_upgrade.get(SystemUpgradeKey.CLEANUP)))
    builder.add(
        Step.SYSTEM_UPGRADE_CLEANUP,
        nodes=list(everyone),
        services=sorted({s for v in everyone.values() for s in v}),
        after=[after],
        work=everyone,
        stage=Stage.SYSTEM_UPGRADE_CLEANUP,
        scope=Scope.DEPLOYMENT,
        duration_s=secs(dep, [], SystemUpgradeKey.CLEANUP),
        requires=[progress.CONVERGED],
        why="step 12: remove what the OS upgrade persisted (it may hold secrets) "
        "and re-assert flags",
    )
