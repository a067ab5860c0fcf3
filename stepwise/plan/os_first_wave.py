"""Steps 2-7 of the OS upgrade for the first node of every sensitive role: prepare it, take
it into the new OS, stop the role's old nodes and transfer the data once, set up a fresh
cloud on it, bring the external services back. Units follow one another in a chain."""

from __future__ import annotations

from stepwise.errors import Problem, UnsafePlanError
from stepwise.model.deployment import Deployment
from stepwise.model.vocab import Phase, Stage, Step, SystemUpgradeKey
from stepwise.plan import os_clusters, progress
from stepwise.plan.builder import PlanBuilder
from stepwise.plan.os_cloud import WF, OsCloud, secs
from stepwise.plan.planes import Cursor

Work = dict[str, tuple[str, ...]]


class _Chain:
    """The first wave's units, each after the previous one, and the time they take."""

    def __init__(self, builder: PlanBuilder, cur: Cursor):
        self.builder, self.after, self.t = builder, cur.after, cur.t

    def add(self, step: Step, work: Work, why: str, seconds: float, stage: Stage, **kw) -> None:
        """A unit doing `work` (node -> services) after the last one; none without work."""
        if not work:
            return
        self.after = self.builder.add(
            step,
            nodes=list(work),
            services=sorted({s for ss in work.values() for s in ss}),
            after=[self.after],
            why=why,
            stage=stage,
            phase=Phase.OS_FIRST,
            duration_s=seconds,
            work=work,
            **kw,
        )
        self.t += seconds


def _each_on(work: Work) -> dict[str, list[str]]:
    """service -> the nodes of `work` it is on (a unit's stops or starts)."""
    return {s: [n for n in work if s in work[n]] for n in work for s in work[n]}


def waves(dep: Deployment, first: list[str], allowance: dict[str, int]) -> list[list[str]]:
    """Split the first nodes so no wave takes down more instances than a rule allows.

    First nodes whose roles share a cluster that cannot span two OS majors stay in one wave:
    step 5 stops that cluster's old members role by role, so a later wave's role would still
    run old members beside the new-OS member the earlier wave starts."""
    waves: list[tuple[list[str], dict[str, int]]] = []
    for group in _sharing_a_cluster(dep, first):
        need: dict[str, int] = {}
        for n in group:
            for s in dep.services_on(n):
                need[s] = need.get(s, 0) + 1
        # the shared cluster stops whole at step 5 anyway: its allowance does not split it
        bounded = {s: k for s, k in need.items() if not (k > 1 and _one_os_cluster(dep, s))}
        wave = next(
            (
                w
                for w in waves
                if all(w[1].get(s, 0) + k <= allowance.get(s, 1 << 30) for s, k in bounded.items())
            ),
            None,
        )
        if wave is None:
            wave = ([], {})
            waves.append(wave)
        wave[0].extend(group)
        for s, k in need.items():
            wave[1][s] = wave[1].get(s, 0) + k
    return [w for w, _ in waves]


def _one_os_cluster(dep: Deployment, service: str) -> bool:
    spec = dep.catalog[service]
    return bool(spec.cluster) and not spec.mixed_os


def _sharing_a_cluster(dep: Deployment, first: list[str]) -> list[list[str]]:
    """The first nodes in groups (in their order): nodes running a common one-OS cluster."""
    groups: list[list[str]] = []
    for n in first:
        mine = {s for s in dep.services_on(n) if _one_os_cluster(dep, s)}
        joined = [i for i, g in enumerate(groups) if any(mine & set(dep.services_on(m)) for m in g)]
        if not joined:
            groups.append([n])
            continue
        # the merged group takes the place of the earliest one it joins
        groups[joined[0]] = [m for i in joined for m in groups[i]] + [n]
        groups = [g for i, g in enumerate(groups) if i not in joined[1:]]
    return groups


def first_wave(builder: PlanBuilder, c: OsCloud, wave: list[str], cur: Cursor) -> Cursor:
    """Steps 2-7 for the first nodes of `wave`, after `cur`."""
    chain = _Chain(builder, cur)
    _prepare(chain, c, wave)
    _prepare_external(chain, c, wave)
    _into_new_os(chain, c, wave)
    # step 5: per role, the old nodes stop and the data moves once to the new node
    for n in wave:
        _transfer_data(chain, c, n)
    _fresh_cloud(chain, c, wave)
    _external_back(chain, c, wave)
    return Cursor(chain.after, chain.t)


def _prepare(chain: _Chain, c: OsCloud, wave: list[str]) -> None:
    """Step 2: the first nodes' services leave, stop, and the OS upgrade is prepared."""
    dep, catalog = c.dep, c.dep.catalog
    prep = {
        n: tuple(
            s for s in c.internal(n) if catalog[s].system_upgrade.get(SystemUpgradeKey.PREPARE)
        )
        for n in wave
        if not c.prepared(n)
    }
    # the first nodes' services still serve: they leave the load balancers and clusters before
    # they stop (a database member holding the traffic stopped under it fails requests)
    leave = {n: c.leaving(n) for n in prep}
    chain.add(
        Step.LEAVE,
        {n: ss for n, ss in leave.items() if ss},
        f"step 2: the services of {', '.join(prep)} leave the load balancers and clusters",
        max([secs(dep, ss, Step.LEAVE) for ss in leave.values()] + [0.0]),
        Stage.SYSTEM_UPGRADE_PREPARE,
        # its APIs serve no more through their VIPs (a cluster member that leaves still
        # counts in its cluster until it stops)
        stops=catalog.behind_balancer(leave),
    )
    kept = {n: lone_data(c, n) for n in prep}
    kept = {n: paths for n, paths in kept.items() if paths}
    chain.add(
        Step.SYSTEM_UPGRADE_PREPARE,
        prep,
        f"step 2: first node of each sensitive role ({', '.join(prep)}): stop its services "
        "and prepare the OS upgrade"
        + "".join(
            f"; {n} alone holds {', '.join('/' + p for p in paths)}: a reprovision keeps it"
            for n, paths in kept.items()
        ),
        max([secs(dep, c.internal(n), Step.STOP) for n in prep] + [0.0])
        + secs(dep, [], SystemUpgradeKey.PREPARE),
        Stage.SYSTEM_UPGRADE_PREPARE,
        stops={s: [n for n in prep if s in c.internal(n)] for n in prep for s in c.internal(n)},
        marks=[f"{progress.OS}first@{dep.role_of(n).name}={n}" for n in prep],
        **({"vars": {LONE_DATA_VAR: kept}} if kept else {}),
    )


#: the prepare unit's variable: node -> the data directories it alone holds (its role has no
#: other node to copy them from), which a reprovision persists and restores with the rest
LONE_DATA_VAR = "stepwise_node_data"


def _alone(c: OsCloud, n: str) -> bool:
    """The node is the only one of its role: no other member to copy its data from."""
    return len(c.dep.role_of(n).nodes) == 1


def lone_data(c: OsCloud, n: str) -> list[str]:
    """The data directories (`data:` of its services) of a node that is the only one of its
    role: with no other member to copy them from, only the node itself has them."""
    if not _alone(c, n):
        return []
    catalog = c.dep.catalog
    return sorted({p for s in c.internal(n) for p in catalog[s].data})


def _prepare_external(chain: _Chain, c: OsCloud, wave: list[str]) -> None:
    """Step 2 (external): the external services (ceph) of the first nodes are taken out."""
    catalog = c.dep.catalog
    ext = {
        n: tuple(
            s for s in c.external(n) if catalog[s].system_upgrade.get(SystemUpgradeKey.PREPARE)
        )
        for n in wave
        if not c.ext_prepared(n)
    }
    ext = {n: ss for n, ss in ext.items() if ss}
    chain.add(
        Step.EXTERNAL_SYSTEM_UPGRADE_PREPARE,
        ext,
        f"step 2 (external): take {', '.join(sorted({s for v in ext.values() for s in v}))} "
        f"on {', '.join(ext)} out (the monitors keep a majority)",
        max([secs(c.dep, ss, Step.STOP) for ss in ext.values()] + [1.0]),
        Stage.SYSTEM_UPGRADE_PREPARE,
        stops=_each_on(ext),
    )


def _into_new_os(chain: _Chain, c: OsCloud, wave: list[str]) -> None:
    """Step 4: the first nodes reboot into the new OS."""
    dep = c.dep
    run = {n: () for n in wave if not c.new_os(n)}
    chain.add(
        Step.SYSTEM_UPGRADE_RUN,
        run,
        f"step 4: {', '.join(run)} into the new OS; they come back with no service running",
        max(
            [secs(dep, [], SystemUpgradeKey.RUN)]
            + [dep.catalog[s].seconds(Step.REBOOT) for n in run for s in dep.services_on(n)]
        ),
        Stage.SYSTEM_UPGRADE_RUN,
    )


def _transfer_data(chain: _Chain, c: OsCloud, n: str) -> None:
    """Step 5 for the role of first node `n`: its old nodes stop, the data moves to `n`."""
    dep = c.dep
    r = dep.role_of(n)
    if progress.transferred(r.name) in c.p:
        return
    old = c.old_nodes(r)
    if not old:
        return
    if progress.stopped_old(r.name) not in c.p:
        stop_old = {m: c.internal(m) for m in old if c.internal(m)}
        keep = sorted({s for m in old for s in c.external(m)})
        # the APIs behind a VIP finish the requests in flight before they stop. Their downtime
        # starts with that leave, not with the stop: the role's new-OS node runs nothing yet,
        # so once the old ones leave no server is left behind the VIP
        work = {m: tuple(s for s in ss if dep.catalog[s].frontend) for m, ss in stop_old.items()}
        work = {m: ss for m, ss in work.items() if ss}
        chain.add(
            Step.LEAVE,
            work,
            f"step 5: control-plane downtime starts for {r.name}: "
            "the APIs of its old-OS nodes leave the load balancer",
            max([secs(dep, ss, Step.LEAVE) for ss in work.values()] + [0.0]),
            Stage.SYSTEM_UPGRADE_TRANSFER_DATA,
            stops=dep.catalog.behind_balancer(work),
        )
        chain.add(
            Step.STOP,
            stop_old,
            f"step 5: control-plane downtime starts for {r.name}: "
            "stop its services on its old-OS nodes"
            + (f" except {', '.join(keep)}" if keep else "")
            + " (their clusters cannot span two OS majors)",
            max(secs(dep, ss, Step.STOP) for ss in stop_old.values()) if stop_old else 1.0,
            Stage.SYSTEM_UPGRADE_TRANSFER_DATA,
            stops=_each_on(stop_old),
            vars={"stepwise_roles": [r.name]},
            marks=[progress.stopped_old(r.name)],
        )
    movers = tuple(
        s
        for s in c.internal(n)
        if dep.catalog[s].system_upgrade.get(SystemUpgradeKey.TRANSFER_DATA)
    )
    if movers:
        chain.add(
            Step.SYSTEM_UPGRADE_TRANSFER_DATA,
            {n: movers},
            f"step 5: transfer the data once from {old[0]} to {n} "
            f"(refuses to run twice: flag file on {n})",
            secs(dep, movers, SystemUpgradeKey.TRANSFER_DATA),
            Stage.SYSTEM_UPGRADE_TRANSFER_DATA,
            idempotent=False,
            vars={
                "system_upgrade_source": old[0],
                "stepwise_roles": [r.name],
                "stepwise_role_nodes": [m.name for m in r.nodes],
            },
            marks=[progress.transferred(r.name)],
        )


def _new_release(chain: _Chain, c: OsCloud, step6: str, on: Work) -> None:
    """Step 6's packages and configuration of the new release on the new nodes: a node's
    containers have no packages, their config step pulls their images now, on the new OS."""
    dep, catalog = c.dep, c.dep.catalog
    packaged = {n: ss for n in on if (ss := c.packaged(n))}
    chain.add(
        Step.PACKAGES,
        packaged,
        f"{step6}: packages of the new release on the new OS",
        max((secs(dep, ss, Step.PACKAGES) for ss in packaged.values()), default=0),
        Stage.UPGRADE,
    )
    cfg = {n: tuple(s for s in ss if catalog[s].has_step(WF, Step.CONFIG)) for n, ss in on.items()}
    boxed = any(set(ss) & set(dep.containerized(dep.role_of(n))) for n, ss in cfg.items())
    chain.add(
        Step.CONFIG,
        {n: ss for n, ss in cfg.items() if ss},
        f"{step6}: configuration of the new release"
        + ("; containers recreated from its images, pulled now on the new OS" if boxed else ""),
        max(secs(dep, ss, Step.CONFIG) for ss in cfg.values()),
        Stage.UPGRADE,
    )


def _fresh_cloud(chain: _Chain, c: OsCloud, wave: list[str]) -> None:
    """Step 6: the new nodes set up a fresh cloud on the transferred data."""
    dep, catalog = c.dep, c.dep.catalog
    todo = [n for n in wave if not c.started(n)]
    on = {n: c.internal(n) for n in todo}
    if not on:
        return
    infra = {n: tuple(s for s in ss if catalog[s].plane == "infra") for n, ss in on.items()}
    rest = {n: tuple(s for s in ss if catalog[s].plane != "infra") for n, ss in on.items()}
    sync = on_bootstrap_in(dep, on, lambda s: s.has_step(WF, Step.MIGRATE))
    _refuse_offline_elsewhere(dep, sync, todo)
    step6 = f"step 6: upgrade run on {', '.join(todo)}"
    _new_release(chain, c, step6, on)
    # a lone node of its role had nothing transferred: it starts on the data it kept
    alone = [_alone(c, n) for n in todo]
    on_data = (
        "the data the node kept"
        if all(alone)
        else "the transferred data"
        if not any(alone)
        else "the data transferred or kept"
    )
    infra_label = (
        f"databases, message bus and cluster managers first, on {on_data}; "
        "back into the cluster and the load balancers"
    )
    _new_clusters(chain, c, step6, infra)
    if _start(chain, c, step6, infra, infra_label):
        # the schemas move once the databases run, before the rest starts on them
        chain.add(
            Step.MIGRATE,
            sync,
            f"{step6}: every DB sync, now that the databases run",
            max([secs(dep, ss, Step.MIGRATE) for ss in sync.values()] + [0.0]),
            Stage.UPGRADE,
        )
    # The seed: "control plane downtime stops at the end of this step". The rest serves
    # again once its health says so, not when its start returns: real nova builds no server
    # until the computes, reconnecting to the new message bus, report to the new conductor,
    # which is what nova-conductor's health waits for
    checked = {n: tuple(s for s in ss if catalog[s].health) for n, ss in on.items()}
    _start(chain, c, step6, rest, "the rest", serving_later=checked)
    chain.add(
        Step.VERIFY,
        checked,
        f"{step6}: every service healthy on the new OS; the control-plane downtime ends",
        secs(dep, [], Step.VERIFY),
        Stage.UPGRADE,
        starts=_each_on({n: tuple(s for s in ss if s in checked[n]) for n, ss in rest.items()}),
    )


def _new_clusters(chain: _Chain, c: OsCloud, step6: str, infra: Work) -> None:
    """Step 6, before the databases and cluster managers start: the clusters that cannot span
    two OS majors form anew on one first node, the other first nodes join them."""
    dep = c.dep
    form = os_clusters.forming(c, infra)
    chain.add(
        Step.FORM_CLUSTER,
        form,
        f"{step6}: form the new "
        + ", ".join(sorted({s for ss in form.values() for s in ss}))
        + " cluster(s) on the new OS (their old-OS members are stopped)",
        max([secs(dep, ss, SystemUpgradeKey.FORM_CLUSTER) for ss in form.values()] + [0.0]),
        Stage.UPGRADE,
        # the member runs, but serves only once back in its load balancer: its window
        # closes with the start and rejoin that follow, as everywhere else
    )
    join = os_clusters.joining(c, infra)
    chain.add(
        Step.JOIN_CLUSTER,
        join,
        f"{step6}: join the new clusters formed on "
        + ", ".join(sorted(set(os_clusters.seed_vars(c, join)[os_clusters.SEED_VAR].values())))
        if join
        else "",
        max([secs(dep, ss, SystemUpgradeKey.JOIN_CLUSTER) for ss in join.values()] + [0.0]),
        Stage.UPGRADE,
        vars=os_clusters.seed_vars(c, join),
    )


def _start(
    chain: _Chain, c: OsCloud, step6: str, part: Work, label: str, serving_later: Work | None = None
) -> bool:
    """Step 6 for one part of the new nodes' services: start, then rejoin; False if the part
    has no service. The services of `serving_later` (node -> services) serve again only when a
    later unit says so, the others when their start ends."""
    dep = c.dep
    part = {n: ss for n, ss in part.items() if ss}
    if not part:
        return False
    later = serving_later or {}
    chain.add(
        Step.START,
        part,
        f"{step6}: {label}",
        max(secs(dep, ss, Step.START) for ss in part.values()),
        Stage.UPGRADE,
        starts=_each_on(
            {n: tuple(s for s in ss if s not in later.get(n, ())) for n, ss in part.items()}
        ),
    )
    rej = {
        n: tuple(s for s in ss if dep.catalog[s].has_step(WF, Step.REJOIN))
        for n, ss in part.items()
    }
    chain.add(
        Step.REJOIN,
        {n: ss for n, ss in rej.items() if ss},
        f"{step6}: rejoin ({label.split(';')[0]})",
        max(secs(dep, ss, Step.REJOIN) for ss in rej.values()),
        Stage.UPGRADE,
    )
    return True


def _external_back(chain: _Chain, c: OsCloud, wave: list[str]) -> None:
    """Step 7: the external services back on the new nodes."""
    catalog = c.dep.catalog
    ext_run = {
        n: tuple(s for s in c.external(n) if catalog[s].system_upgrade.get(SystemUpgradeKey.RUN))
        for n in wave
        if not c.ext_started(n)
    }
    ext_run = {n: ss for n, ss in ext_run.items() if ss}
    chain.add(
        Step.EXTERNAL_SYSTEM_UPGRADE_RUN,
        ext_run,
        f"step 7: {', '.join(sorted({s for v in ext_run.values() for s in v}))} "
        f"back on {', '.join(ext_run)} (the monitor count is restored)",
        max([secs(c.dep, ss, Step.START) for ss in ext_run.values()] + [1.0]),
        Stage.SYSTEM_UPGRADE_RUN,
        starts=_each_on(ext_run),
    )


def on_bootstrap_in(
    dep: Deployment, on: dict[str, tuple[str, ...]], keep
) -> dict[str, tuple[str, ...]]:
    """node -> services (among those on it) whose once-only work runs there: one node per
    service, its bootstrap node if it is among them."""
    out: dict[str, list[str]] = {}
    placed: set[str] = set()
    for n, ss in on.items():
        for s in ss:
            if s in placed or not keep(dep.catalog[s]):
                continue
            boot = dep.bootstrap_node(s)
            where = boot.name if boot is not None and boot.name in on and s in on[boot.name] else n
            out.setdefault(where, []).append(s)
            placed.add(s)
    return {n: tuple(v) for n, v in out.items()}


def _refuse_offline_elsewhere(
    dep: Deployment, sync: dict[str, tuple[str, ...]], todo: list[str]
) -> None:
    """Step 6 syncs the schemas while the role's old-OS nodes are stopped; an offline
    (rolling: false) service that also runs on another role would have its schema migrated
    under its old code there. The seed places such services on one role; refuse otherwise."""
    roles = {dep.role_of(n).name for n in todo}
    problems = []
    for s in sorted({s for ss in sync.values() for s in ss}):
        if dep.catalog[s].rolling:
            continue  # expand/contract: old code keeps working on the expanded schema
        elsewhere = [m.name for m in dep.instances[s] if m.role not in roles]
        if elsewhere:
            problems.append(
                Problem(
                    f"the OS upgrade of {', '.join(todo)} migrates the schema of {s} (offline) "
                    f"while {s} keeps running old code on {', '.join(elsewhere[:3])} "
                    "(another role)",
                    field="--limit",
                    hint=f"place {s} on one role, "
                    "or declare its schema expand_contract in the catalog",
                )
            )
    if problems:
        raise UnsafePlanError(problems)
