"""Operating-system upgrade: the seed's 12-step workflow, for the nodes named by --limit.

One node of each cluster-/schema-sensitive role goes first (prepare, reboot into the new OS,
then the other nodes of its role stop and their data is transferred once to it, then it
starts as a one-node cluster on the new OS); the remaining sensitive nodes follow one by one
and join it; then the other nodes roll in batches (workloads moved away first). When the
limit completes the cloud: online migrations, converge, cleanup of persisted data.
"""

from __future__ import annotations

from stepwise.errors import InputError, Problem
from stepwise.model.catalog import QUORUM_CLUSTERS, node_step_seconds
from stepwise.model.deployment import Deployment, Role
from stepwise.model.facts import Facts
from stepwise.model.vocab import Phase, Scope, Section, Stage, Step
from stepwise.plan.builder import PlanBuilder
from stepwise.plan.limits import whole_roles
from stepwise.plan.rolling import Visit, VisitStep, schedule_rolling
from stepwise.plan.workflows import on_bootstrap
from stepwise.plan.rollout import Cursor, describe_rule, service_allowances

#: Clusters whose protocol works across OS majors: they keep running on old nodes (the seed
#: keeps ceph-mon up so at least 2 monitors run at all times).
KEEP_RUNNING_CLUSTERS = frozenset({"ceph-mon"})
WF = Section.UPGRADE


def is_sensitive(dep: Deployment, role: Role) -> bool:
    """Cluster- or schema-sensitive: the role runs a quorum cluster member (pacemaker, galera,
    ...) or a schema-sensitive (`rolling: false`) service. Ceph OSDs and computes are not."""
    return any(dep.catalog[s].cluster in QUORUM_CLUSTERS or not dep.catalog[s].rolling for s in role.services)


def check_limit(dep: Deployment, facts: Facts, nodes: list[str] | None, limit: str | None) -> None:
    """The seed's safety rules: never without --limit, never a whole role, only old-OS nodes."""
    if nodes is None:
        raise InputError(Problem("system-upgrade refuses to plan or run without --limit",
                                 field="--limit", hint="name the nodes to upgrade now, e.g. --limit controller-0,database-0"))
    whole = whole_roles(dep, nodes)
    if whole:
        raise InputError(Problem(f"--limit '{limit}' covers every node of role(s) {', '.join(whole)}",
                                 field="--limit",
                                 hint="an OS upgrade of a whole role at once loses its clusters and data; name individual nodes"))
    done = [n for n in nodes if facts.of(n).os_major >= facts.of(n).os_target]
    if done:
        raise InputError(Problem(f"node(s) {', '.join(done)} already run the target OS ({facts.of(done[0]).os_target})",
                                 field="--limit", hint="remove them from --limit"))


def plan_system_upgrade(builder: PlanBuilder, dep: Deployment, facts: Facts, nodes: list[str] | None,
                        limit: str | None = None) -> None:
    check_limit(dep, facts, nodes, limit)
    assert nodes is not None
    catalog = dep.catalog
    chosen = set(nodes)
    new_os = {n.name for n in dep.nodes if facts.of(n.name).os_major >= facts.of(n.name).os_target}
    first: list[str] = []
    later: list[str] = []
    rest: list[str] = []
    for role in dep.roles:
        mine = [n.name for n in role.nodes if n.name in chosen]
        if not mine:
            continue
        if is_sensitive(dep, role):
            if not any(n.name in new_os for n in role.nodes):
                first.append(mine[0])
                later.extend(mine[1:])
            else:
                later.extend(mine)
        else:
            rest.extend(mine)

    # The starting point: nodes already on the new OS, and on the old-OS nodes of their roles
    # every service but the kept monitors, stopped by the earlier data transfer (step 5).
    down: dict[str, list[str]] = {}
    for role in dep.roles:
        if is_sensitive(dep, role) and any(n.name in new_os for n in role.nodes):
            for s in role.services:
                if catalog[s].cluster not in KEEP_RUNNING_CLUSTERS:
                    down.setdefault(s, []).extend(n.name for n in role.nodes if n.name not in new_os)
    builder.params["initial"] = {"new_os": sorted(new_os), "down": {s: ns for s, ns in sorted(down.items()) if ns}}
    allowance, instances = service_allowances(dep)
    cur = Cursor(None)
    for wave in _waves(dep, first, allowance):
        cur = _first_wave(builder, dep, wave, cur)
    if later:
        visits: dict[str, list[Visit]] = {}
        for n in later:
            visits.setdefault(dep.role_of(n).name, []).append(_os_visit(dep, n, evacuate=False))
        cur = _roll(builder, dep, visits, {r: 1 for r in visits}, allowance, instances, cur,
                    "remaining sensitive nodes, one by one: join the new-OS cluster (no data transfer)")
    if rest:
        visits = {}
        for n in rest:
            visits.setdefault(dep.role_of(n).name, []).append(_os_visit(dep, n, evacuate=True))
        cur = _roll(builder, dep, visits, {r.name: r.update_serial for r in dep.roles}, allowance, instances, cur,
                    "other nodes in batches, workloads moved away first")
    if all(n.name in chosen or n.name in new_os for n in dep.nodes):
        _finish(builder, dep, cur)


def _waves(dep: Deployment, first: list[str], allowance: dict[str, int]) -> list[list[str]]:
    """Split the first nodes so no wave takes down more instances than a rule allows."""
    waves: list[tuple[list[str], dict[str, int]]] = []
    for n in first:
        for nodes, used in waves:
            if all(used.get(s, 0) + 1 <= allowance.get(s, 1 << 30) for s in dep.services_on(n)):
                nodes.append(n)
                for s in dep.services_on(n):
                    used[s] = used.get(s, 0) + 1
                break
        else:
            waves.append(([n], {s: 1 for s in dep.services_on(n)}))
    return [w for w, _ in waves]


def _secs(dep: Deployment, services, step: str) -> float:
    return node_step_seconds([dep.catalog[s] for s in services], step)


def _first_wave(builder: PlanBuilder, dep: Deployment, wave: list[str], cur: Cursor) -> Cursor:
    catalog = dep.catalog
    names = ", ".join(wave)
    on = {n: dep.services_on(n) for n in wave}
    after, t = cur.after, cur.t

    def add(step: Step, work: dict[str, tuple[str, ...]], why: str, seconds: float, tags: tuple[str, ...], **kw) -> str:
        nonlocal after, t
        after = builder.add(step, nodes=list(work), services=sorted({s for ss in work.values() for s in ss}),
                            after=[after], why=why, stage=Stage(tags[0]), phase=Phase.OS_FIRST, duration_s=seconds, work=work,
                            tags=tags, **kw)
        t += seconds
        return after

    prep = {n: tuple(s for s in ss if catalog[s].system_upgrade.get("prepare")) for n, ss in on.items()}
    add(Step.SYSTEM_UPGRADE_PREPARE, prep,
        f"step 2: stop all services on {names} and prepare the OS upgrade (leapp); one node of each sensitive role first",
        max(max((_secs(dep, ss, "stop") for ss in on.values()), default=0) + _secs(dep, [], "prepare"), 1.0),
        ("system_upgrade_prepare",), stops={s: [n for n in wave if s in on[n]] for s in {s for ss in on.values() for s in ss}})
    add(Step.SYSTEM_UPGRADE_RUN, {n: () for n in wave},
        f"step 4: reboot {names} into the new OS; they come back with no service running",
        max(_secs(dep, [], "run"), max(catalog[s].seconds("reboot") for ss in on.values() for s in ss) if on else 0),
        ("system_upgrade_run",))
    starts_extra: dict[str, list[str]] = {}
    for n in wave:
        role = dep.role_of(n)
        old = [m.name for m in role.nodes if m.name != n]
        if not old:
            continue
        keep = [s for s in role.services if catalog[s].cluster in KEEP_RUNNING_CLUSTERS]
        stop_old = {m: tuple(s for s in role.services if s not in keep) for m in old}
        if any(stop_old.values()):
            add(Step.STOP, stop_old,
                f"step 5: control plane downtime starts for {role.name}: stop everything but "
                f"{', '.join(keep) or 'nothing'} on its old-OS nodes (a mixed-OS cluster cannot form)",
                max(_secs(dep, ss, "stop") for ss in stop_old.values()), ("system_upgrade_transfer_data",),
                stops={s: old for s in role.services if s not in keep})
            for s in role.services:
                if s not in keep:
                    starts_extra.setdefault(s, [])
        movers = tuple(s for s in role.services if catalog[s].system_upgrade.get("transfer_data"))
        if movers:
            add(Step.SYSTEM_UPGRADE_TRANSFER_DATA, {n: movers},
                f"step 5: transfer data once from {old[0]} to {n} (refuses to run twice: flag file on {n})",
                _secs(dep, movers, "transfer_data"), ("system_upgrade_transfer_data",), idempotent=False,
                vars={"system_upgrade_source": old[0]})
    started = {s: [n for n in wave if s in on[n]] for s in {s for ss in on.values() for s in ss}}
    for step in (Step.PACKAGES, Step.CONFIG, Step.MIGRATE, Step.START):
        work = {n: tuple(s for s in ss if step is Step.PACKAGES or catalog[s].has_step(WF, step)) for n, ss in on.items()}
        if step is Step.MIGRATE:
            work = {n: tuple(s for s in ss if catalog[s].has_step(WF, "migrate")) for n, ss in on.items()}
        if step is not Step.PACKAGES and not any(work.values()):
            continue
        add(step, work, f"step 6: upgrade run on {names}: {step} on the new OS (the new nodes now own the data)"
            + ("; control plane downtime ends" if step is Step.START else ""),
            max(_secs(dep, ss, step) for ss in work.values()), ("upgrade", "system_upgrade_upgrade"),
            starts=started if step is Step.START else None)
    ext = {n: tuple(s for s in ss if catalog[s].system_upgrade.get("run")) for n, ss in on.items()}
    if any(ext.values()):
        add(Step.EXTERNAL_SYSTEM_UPGRADE_RUN, ext, f"step 7: external upgrade on {names} (e.g. ceph-mon back: count restored)",
            max(_secs(dep, ss, "run") / 10 for ss in ext.values()), ("system_upgrade_run", "external"))
    add(Step.VERIFY, {n: tuple(s for s in on[n] if catalog[s].health) for n in wave}, f"health of {names} on the new OS",
        _secs(dep, [], "verify"), ("upgrade",))
    return Cursor(builder.gate([after], f"first nodes on the new OS: {names}", Stage.SYSTEM_UPGRADE_RUN), t)


def _os_visit(dep: Deployment, node: str, *, evacuate: bool) -> Visit:
    catalog = dep.catalog
    ss = dep.services_on(node)
    steps: list[VisitStep] = []
    if evacuate:
        lv = tuple(s for s in ss if catalog[s].has_step(WF, "leave"))
        if lv:
            steps.append(VisitStep(Step.LEAVE, lv, _secs(dep, lv, "leave"), tags=("system_upgrade_prepare",)))
    prep = tuple(s for s in ss if catalog[s].system_upgrade.get("prepare"))
    steps.append(VisitStep(Step.SYSTEM_UPGRADE_PREPARE, prep, _secs(dep, ss, "stop") + _secs(dep, [], "prepare"),
                           tags=("system_upgrade_prepare",)))
    steps.append(VisitStep(Step.SYSTEM_UPGRADE_RUN, (), max([_secs(dep, [], "run")] + [catalog[s].seconds("reboot") for s in ss]),
                           tags=("system_upgrade_run",)))
    steps.append(VisitStep(Step.PACKAGES, ss, _secs(dep, ss, "packages"), tags=("upgrade",)))
    for step in (Step.CONFIG, Step.START, Step.REJOIN):
        w = tuple(s for s in ss if catalog[s].has_step(WF, step))
        if w:
            steps.append(VisitStep(step, w, _secs(dep, w, step), tags=("upgrade",)))
    ext = tuple(s for s in ss if catalog[s].system_upgrade.get("run"))
    if ext:
        steps.append(VisitStep(Step.EXTERNAL_SYSTEM_UPGRADE_RUN, ext, _secs(dep, ext, "run") / 10,
                               tags=("system_upgrade_run", "external")))
    steps.append(VisitStep(Step.VERIFY, tuple(s for s in ss if catalog[s].health), _secs(dep, [], "verify"), tags=("upgrade",)))
    return Visit(node, dep.role_of(node).name, ss, tuple(steps))


def _roll(builder, dep, visits, serial, allowance, instances, cur: Cursor, what: str) -> Cursor:
    res = schedule_rolling(builder, visits, role_serial=serial, allowance=allowance, instances=instances,
                           start_s=cur.t, after=cur.after, stage=Stage.SYSTEM_UPGRADE_RUN, phase=Phase.OS_REST, workflow=WF,
                           describe=lambda s: describe_rule(dep, s),
                           tags=())
    return Cursor(builder.gate(res.last_units, f"step 8/9: {what}", Stage.SYSTEM_UPGRADE_RUN), res.end_s)


def _finish(builder: PlanBuilder, dep: Deployment, cur: Cursor) -> None:
    catalog = dep.catalog
    after, t = cur.after, cur.t
    conv = on_bootstrap(dep, dep.instances, lambda s: bool(s.converge))
    if conv:
        secs = max(_secs(dep, ss, "converge") for ss in conv.values())
        after = builder.add(Step.CONVERGE, nodes=list(conv), services=sorted({s for v in conv.values() for s in v}),
                            after=[after], work={k: tuple(v) for k, v in conv.items()}, stage=Stage.ONLINE_UPGRADE,
                            scope=Scope.DEPLOYMENT, duration_s=secs, tags=("online_upgrade",),
                            why="step 10: online data migrations, now that every node runs the new release")
        t += secs
    unpin = {n.name: tuple(s for s in dep.services_on(n) if catalog[s].rpc and catalog[s].has_step(WF, "unpin")) for n in dep.nodes}
    unpin = {k: v for k, v in unpin.items() if v}
    if unpin:
        secs = max(_secs(dep, ss, "unpin") for ss in unpin.values())
        after = builder.add(Step.UNPIN_RPC, nodes=list(unpin), services=sorted({s for v in unpin.values() for s in v}),
                            after=[after], work=unpin, stage=Stage.CONVERGE, scope=Scope.DEPLOYMENT, duration_s=secs,
                            tags=("converge",), why="step 11: converge: lift RPC pins and re-assert the state")
        t += secs
    everyone = {n.name: tuple(s for s in dep.services_on(n) if catalog[s].system_upgrade.get("cleanup")) for n in dep.nodes}
    builder.add(Step.SYSTEM_UPGRADE_CLEANUP, nodes=list(everyone), services=sorted({s for v in everyone.values() for s in v}),
                after=[after], work=everyone, stage=Stage.SYSTEM_UPGRADE_CLEANUP, scope=Scope.DEPLOYMENT,
                duration_s=_secs(dep, [], "cleanup"), tags=("system_upgrade_cleanup",),
                why="step 12: remove persisted upgrade data and transfer flag files (they may hold secrets)")
