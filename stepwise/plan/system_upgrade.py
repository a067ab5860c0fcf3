"""The operating-system upgrade: what is left of the seed's 12-step procedure for the whole
cloud, from the facts (each node's OS major) and the procedure's milestones
(stepwise.plan.progress). Each of the operator's commands runs a selected part of it.

  step 1   prerequisites: repositories of the target release on every node, RPC pinned
           (what `upgrade prepare` does)
  step 2   the first node of every cluster-/schema-sensitive role: stop its services and
           prepare the OS upgrade (leapp, or persist the node's data to reprovision it);
           external services (ceph) are prepared by `external-upgrade run`
  step 4   reboot into the new OS (or reprovision and restore): no service runs after it
  step 5   per sensitive role: stop everything but the external services (ceph-mon) on its
           old-OS nodes and transfer the data once from one of them to the new node: the
           control-plane downtime window opens
  step 6   `upgrade run` on the new nodes: packages, config, the databases and message bus
           first, every DB sync, the rest, rejoin: "a fresh cloud on pre-existing data";
           the window closes
  step 7   external services back on the new nodes (ceph-mon: the count is restored)
  step 8   the other nodes of the sensitive roles one by one (prepare, run, upgrade,
           external), joining the new clusters; no transfer
  step 9   the other nodes in batches, workloads moved away first
  steps 10-12  online data migrations, converge (RPC unpinned), cleanup

Every unit says which milestones it reaches (`marks`) and which it needs (`requires`), so a
command whose part needs a step that was not done is refused with the command to run first.
Management roles are not part of it (their OS upgrade is the management-node workflow).
"""

from __future__ import annotations

from dataclasses import replace

from stepwise.errors import InputError, Problem, UnsafePlanError
from stepwise.model.availability import service_allowances
from stepwise.model.catalog import QUORUM_CLUSTERS, node_step_seconds
from stepwise.model.deployment import Deployment, Role
from stepwise.model.facts import Facts
from stepwise.model.vocab import (
    CatalogKey,
    Phase,
    Scope,
    Section,
    Stage,
    Step,
    SystemUpgradeKey,
    UpgradeKey,
)
from stepwise.plan import progress as M
from stepwise.plan.batching import schedule_rolling
from stepwise.plan.builder import PlanBuilder
from stepwise.plan.planes import Cursor, describe_rule
from stepwise.plan.update_upgrade import on_bootstrap
from stepwise.plan.visits import Visit, VisitStep

WF = Section.UPGRADE
UPGRADE_TAGS = (Stage.UPGRADE,)


def is_sensitive(dep: Deployment, role: Role) -> bool:
    """Cluster- or schema-sensitive: the role runs a quorum cluster member (pacemaker, galera,
    ...) or a schema-sensitive (`rolling: false`) service. Ceph OSDs and computes are not."""
    return any(
        dep.catalog[s].cluster in QUORUM_CLUSTERS or not dep.catalog[s].rolling
        for s in role.services
    )


class _Cloud:
    """The cloud as the procedure sees it: which node is where."""

    def __init__(self, dep: Deployment, facts: Facts, chosen: set[str]):
        self.dep, self.facts, self.p = dep, facts, facts.progress
        self.roles = [r for r in dep.roles if not r.is_management and r.nodes]
        self.sensitive = [r for r in self.roles if is_sensitive(dep, r)]
        self.first: dict[str, str] = {}
        for r in self.sensitive:
            self.first[r.name] = self._first(r, chosen)

    def _first(self, r: Role, chosen: set[str]) -> str:
        recorded = [m.split("=", 1)[1] for m in self.p if m.startswith(f"{M.OS}first@{r.name}=")]
        if recorded:
            return recorded[0]
        on_new = [n.name for n in r.nodes if self.new_os(n.name)]
        if on_new:
            return on_new[0]
        picked = [n.name for n in r.nodes if n.name in chosen]
        return picked[0] if picked else r.bootstrap_node.name  # type: ignore[union-attr]

    def new_os(self, n: str) -> bool:
        f = self.facts.of(n)
        return (self.facts.os_known and f.os_major >= f.os_target) or M.new_os(n) in self.p

    def internal(self, n: str) -> tuple[str, ...]:
        return tuple(s for s in self.dep.services_on(n) if not self.dep.catalog[s].external)

    def leaving(self, n: str) -> tuple[str, ...]:
        """The node's services that leave load balancers and clusters before they stop."""
        return tuple(s for s in self.internal(n) if self.dep.catalog[s].has_step(WF, Step.LEAVE))

    def external(self, n: str) -> tuple[str, ...]:
        return tuple(s for s in self.dep.services_on(n) if self.dep.catalog[s].external)

    def prepared(self, n: str) -> bool:
        return M.prepared(n) in self.p or self.new_os(n)

    def ext_prepared(self, n: str) -> bool:
        return not self.external(n) or M.external_prepared(n) in self.p or self.new_os(n)

    def started(self, n: str) -> bool:
        return M.started(n) in self.p or (not self.internal(n) and self.new_os(n))

    def ext_started(self, n: str) -> bool:
        return not self.external(n) or M.external_started(n) in self.p

    def done(self, n: str) -> bool:
        return self.new_os(n) and self.started(n) and self.ext_started(n)

    def is_first(self, n: str) -> bool:
        return n in self.first.values()

    def all_started(self, roles: list[Role] | None = None) -> list[str]:
        """The milestones of every node (of `roles`) running the new OS and release."""
        out: list[str] = []
        for r in roles if roles is not None else self.roles:
            for n in r.nodes:
                if self.internal(n.name):
                    out.append(M.started(n.name))
                if self.external(n.name):
                    out.append(M.external_started(n.name))
        return out

    def old_nodes(self, r: Role) -> list[str]:
        return [n.name for n in r.nodes if n.name != self.first[r.name] and not self.new_os(n.name)]


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


def initial_state(dep: Deployment, facts: Facts) -> dict:
    """What the milestones reached so far mean for the cloud: nodes on the new OS, instances
    not serving, instances on new code, RPC pinned (for the verifier's replay)."""
    c = _Cloud(dep, facts, set())
    down: dict[str, set[str]] = {}
    new_code: dict[str, set[str]] = {}
    for r in c.roles:
        old_stopped = M.stopped_old(r.name) in c.p or M.transferred(r.name) in c.p
        for node in r.nodes:
            n = node.name
            if (c.prepared(n) and not c.started(n)) or (
                old_stopped and r in c.sensitive and not c.new_os(n) and n != c.first[r.name]
            ):
                for s in c.internal(n):
                    down.setdefault(s, set()).add(n)
            if (
                c.external(n)
                and not c.ext_started(n)
                and (c.ext_prepared(n) and M.external_prepared(n) in c.p or c.new_os(n))
            ):
                for s in c.external(n):
                    down.setdefault(s, set()).add(n)
            if c.started(n) and c.internal(n):
                for s in c.internal(n):
                    new_code.setdefault(s, set()).add(n)
            if c.external(n) and M.external_started(n) in c.p:
                for s in c.external(n):
                    new_code.setdefault(s, set()).add(n)
    return {
        "new_os": sorted(n.name for r in c.roles for n in r.nodes if c.new_os(n.name)),
        "down": {s: sorted(ns) for s, ns in sorted(down.items())},
        "new_code": {s: sorted(ns) for s, ns in sorted(new_code.items())},
        "pinned": M.PINNED in c.p,
    }


def plan_system_upgrade(
    builder: PlanBuilder,
    dep: Deployment,
    facts: Facts,
    nodes: list[str] | None,
) -> None:
    """What is left of the OS upgrade of the whole cloud (the selection picks the part the
    operator's command runs)."""
    c = _Cloud(dep, facts, set(nodes or ()))
    if not c.roles:
        raise InputError(
            Problem(
                f"deployment {dep.name} has no node to OS-upgrade outside its management roles",
                file=dep.path,
                hint="the management node's OS upgrade is `stepwise management-upgrade`",
            )
        )
    builder.params["initial"] = initial_state(dep, facts)
    start = len(builder.units)
    cur = _prerequisites(builder, c, Cursor(None))
    firsts = [f for f in c.first.values() if not c.done(f)]
    allowance, instances = service_allowances(dep)
    for wave in _waves(dep, firsts, allowance):
        cur = _first_wave(builder, c, wave, cur)
    later = [
        n.name
        for r in c.sensitive
        for n in r.nodes
        if not c.is_first(n.name) and not c.done(n.name)
    ]
    if later:
        visits: dict[str, list[Visit]] = {}
        for n in later:
            visits.setdefault(dep.role_of(n).name, []).append(_visit(c, n, evacuate=False))
        cur = _roll(
            builder,
            dep,
            visits,
            {r: 1 for r in visits},
            allowance,
            instances,
            cur,
            Phase.OS_FIRST,
            "step 8: the other nodes of the sensitive roles, one by one: they join the new "
            "clusters (no data transfer)",
        )
    rest = [n.name for r in c.roles if r not in c.sensitive for n in r.nodes if not c.done(n.name)]
    if rest:
        visits = {}
        for n in rest:
            visits.setdefault(dep.role_of(n).name, []).append(_visit(c, n, evacuate=True))
        cur = _roll(
            builder,
            dep,
            visits,
            {r.name: r.update_serial for r in dep.roles},
            allowance,
            instances,
            cur,
            Phase.OS_REST,
            "step 9: the other nodes in batches, workloads moved away first",
        )
    _finish(builder, c, cur)
    _annotate(builder, c, start)


def _secs(dep: Deployment, services, step: CatalogKey) -> float:
    return node_step_seconds([dep.catalog[s] for s in services], step)


def _prerequisites(builder: PlanBuilder, c: _Cloud, cur: Cursor) -> Cursor:
    """Step 1, as `upgrade prepare` does it: the target release's repositories on every node
    (leapp needs them), a backup, RPC pinned (old and new code will coexist)."""
    dep = c.dep
    need = [
        n.name
        for r in c.roles
        for n in r.nodes
        if M.repos(n.name) not in c.p and not c.new_os(n.name)
    ]
    after, t = cur.after, cur.t
    if need:
        after = builder.add(
            Step.REPOS,
            nodes=need,
            after=[after],
            stage=Stage.PREPARE,
            scope=Scope.DEPLOYMENT,
            duration_s=_secs(dep, [], Step.REPOS) or 10.0,
            work={n: () for n in need},
            why="step 1: switch the repositories to the target release (variable target_release); "
            "the OS upgrade downloads the new release for the new OS",
        )
        t += 10.0
    if M.PINNED not in c.p:
        pin = {
            n.name: tuple(
                s
                for s in dep.services_on(n)
                if dep.catalog[s].rpc and dep.catalog[s].has_step(WF, UpgradeKey.PIN)
            )
            for r in c.roles
            for n in r.nodes
        }
        pin = {n: ss for n, ss in pin.items() if ss}
        if pin:
            secs = max(_secs(dep, ss, UpgradeKey.PIN) for ss in pin.values())
            after = builder.add(
                Step.PIN_RPC,
                nodes=list(pin),
                services=sorted({s for v in pin.values() for s in v}),
                after=[after],
                stage=Stage.PREPARE,
                scope=Scope.DEPLOYMENT,
                duration_s=secs,
                work=pin,
                why="step 1: pin RPC to the old version everywhere: old and new code coexist until "
                "converge",
            )
            t += secs
    return Cursor(after, t)


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


def _first_wave(builder: PlanBuilder, c: _Cloud, wave: list[str], cur: Cursor) -> Cursor:
    dep, catalog = c.dep, c.dep.catalog
    after, t = cur.after, cur.t

    def add(
        step: Step, work: dict[str, tuple[str, ...]], why: str, seconds: float, stage: Stage, **kw
    ) -> None:
        nonlocal after, t
        if not work:
            return
        after = builder.add(
            step,
            nodes=list(work),
            services=sorted({s for ss in work.values() for s in ss}),
            after=[after],
            why=why,
            stage=stage,
            phase=Phase.OS_FIRST,
            duration_s=seconds,
            work=work,
            **kw,
        )
        t += seconds

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
    add(
        Step.LEAVE,
        {n: ss for n, ss in leave.items() if ss},
        f"step 2: the services of {', '.join(prep)} leave the load balancers and clusters",
        max([_secs(dep, ss, Step.LEAVE) for ss in leave.values()] + [0.0]),
        Stage.SYSTEM_UPGRADE_PREPARE,
    )
    add(
        Step.SYSTEM_UPGRADE_PREPARE,
        prep,
        f"step 2: first node of each sensitive role ({', '.join(prep)}): stop its services "
        "and prepare the OS upgrade",
        max([_secs(dep, c.internal(n), Step.STOP) for n in prep] + [0.0])
        + _secs(dep, [], SystemUpgradeKey.PREPARE),
        Stage.SYSTEM_UPGRADE_PREPARE,
        stops={s: [n for n in prep if s in c.internal(n)] for n in prep for s in c.internal(n)},
        marks=[f"{M.OS}first@{dep.role_of(n).name}={n}" for n in prep],
    )
    ext = {
        n: tuple(
            s for s in c.external(n) if catalog[s].system_upgrade.get(SystemUpgradeKey.PREPARE)
        )
        for n in wave
        if not c.ext_prepared(n)
    }
    ext = {n: ss for n, ss in ext.items() if ss}
    add(
        Step.EXTERNAL_SYSTEM_UPGRADE_PREPARE,
        ext,
        f"step 2 (external): take {', '.join(sorted({s for v in ext.values() for s in v}))} "
        f"on {', '.join(ext)} out (the monitors keep a majority)",
        max([_secs(dep, ss, Step.STOP) for ss in ext.values()] + [1.0]),
        Stage.SYSTEM_UPGRADE_PREPARE,
        stops={s: [n for n in ext if s in ext[n]] for n in ext for s in ext[n]},
    )
    run = {n: () for n in wave if not c.new_os(n)}
    add(
        Step.SYSTEM_UPGRADE_RUN,
        run,
        f"step 4: {', '.join(run)} into the new OS; they come back with no service running",
        max(
            [_secs(dep, [], SystemUpgradeKey.RUN)]
            + [catalog[s].seconds(Step.REBOOT) for n in run for s in dep.services_on(n)]
        ),
        Stage.SYSTEM_UPGRADE_RUN,
    )
    # step 5: per role, the old nodes stop and the data moves once to the new node
    for n in wave:
        r = dep.role_of(n)
        if M.transferred(r.name) in c.p:
            continue
        old = c.old_nodes(r)
        if not old:
            continue
        if M.stopped_old(r.name) not in c.p:
            stop_old = {m: c.internal(m) for m in old if c.internal(m)}
            keep = sorted({s for m in old for s in c.external(m)})
            add(
                Step.STOP,
                stop_old,
                f"step 5: control-plane downtime starts for {r.name}: "
                "stop its services on its old-OS nodes"
                + (f" except {', '.join(keep)}" if keep else "")
                + " (their clusters cannot span two OS majors)",
                max(_secs(dep, ss, Step.STOP) for ss in stop_old.values()) if stop_old else 1.0,
                Stage.SYSTEM_UPGRADE_TRANSFER_DATA,
                stops={
                    s: [m for m in stop_old if s in stop_old[m]]
                    for m in stop_old
                    for s in stop_old[m]
                },
                vars={"roles": [r.name]},
                marks=[M.stopped_old(r.name)],
            )
        movers = tuple(
            s
            for s in c.internal(n)
            if catalog[s].system_upgrade.get(SystemUpgradeKey.TRANSFER_DATA)
        )
        if movers:
            add(
                Step.SYSTEM_UPGRADE_TRANSFER_DATA,
                {n: movers},
                f"step 5: transfer the data once from {old[0]} to {n} "
                f"(refuses to run twice: flag file on {n})",
                _secs(dep, movers, SystemUpgradeKey.TRANSFER_DATA),
                Stage.SYSTEM_UPGRADE_TRANSFER_DATA,
                idempotent=False,
                vars={
                    "system_upgrade_source": old[0],
                    "roles": [r.name],
                    "stepwise_role_nodes": [m.name for m in r.nodes],
                },
                marks=[M.transferred(r.name)],
            )
    # step 6: the new nodes set up a fresh cloud on the transferred data
    todo = [n for n in wave if not c.started(n)]
    on = {n: c.internal(n) for n in todo}
    if on:
        infra = {n: tuple(s for s in ss if catalog[s].plane == "infra") for n, ss in on.items()}
        rest = {n: tuple(s for s in ss if catalog[s].plane != "infra") for n, ss in on.items()}
        sync = on_bootstrap_in(dep, on, lambda s: s.has_step(WF, Step.MIGRATE))
        _refuse_offline_elsewhere(dep, sync, todo)
        step6 = f"step 6: upgrade run on {', '.join(todo)}"
        add(
            Step.PACKAGES,
            on,
            f"{step6}: packages of the new release on the new OS",
            max(_secs(dep, ss, Step.PACKAGES) for ss in on.values()),
            Stage.UPGRADE,
        )
        cfg = {
            n: tuple(s for s in ss if catalog[s].has_step(WF, Step.CONFIG)) for n, ss in on.items()
        }
        add(
            Step.CONFIG,
            {n: ss for n, ss in cfg.items() if ss},
            f"{step6}: configuration of the new release",
            max(_secs(dep, ss, Step.CONFIG) for ss in cfg.values()),
            Stage.UPGRADE,
        )
        for first_part, part, label in (
            (
                True,
                infra,
                "databases, message bus and cluster managers first, on the transferred data; "
                "back into the cluster and the load balancers",
            ),
            (False, rest, "the rest; the control-plane downtime ends"),
        ):
            part = {n: ss for n, ss in part.items() if ss}
            if not part:
                continue
            add(
                Step.START,
                part,
                f"{step6}: {label}",
                max(_secs(dep, ss, Step.START) for ss in part.values()),
                Stage.UPGRADE,
                starts={s: [n for n in part if s in part[n]] for n in part for s in part[n]},
            )
            rej = {
                n: tuple(s for s in ss if catalog[s].has_step(WF, Step.REJOIN))
                for n, ss in part.items()
            }
            add(
                Step.REJOIN,
                {n: ss for n, ss in rej.items() if ss},
                f"{step6}: rejoin ({label.split(';')[0]})",
                max(_secs(dep, ss, Step.REJOIN) for ss in rej.values()),
                Stage.UPGRADE,
            )
            if first_part:
                add(
                    Step.MIGRATE,
                    sync,
                    f"{step6}: every DB sync, now that the databases run",
                    max([_secs(dep, ss, Step.MIGRATE) for ss in sync.values()] + [0.0]),
                    Stage.UPGRADE,
                )
        add(
            Step.VERIFY,
            {n: tuple(s for s in ss if catalog[s].health) for n, ss in on.items()},
            f"{step6}: every service healthy on the new OS",
            _secs(dep, [], Step.VERIFY),
            Stage.UPGRADE,
        )
    ext_run = {
        n: tuple(s for s in c.external(n) if catalog[s].system_upgrade.get(SystemUpgradeKey.RUN))
        for n in wave
        if not c.ext_started(n)
    }
    ext_run = {n: ss for n, ss in ext_run.items() if ss}
    add(
        Step.EXTERNAL_SYSTEM_UPGRADE_RUN,
        ext_run,
        f"step 7: {', '.join(sorted({s for v in ext_run.values() for s in v}))} "
        f"back on {', '.join(ext_run)} (the monitor count is restored)",
        max([_secs(dep, ss, Step.START) for ss in ext_run.values()] + [1.0]),
        Stage.SYSTEM_UPGRADE_RUN,
        starts={s: [n for n in ext_run if s in ext_run[n]] for n in ext_run for s in ext_run[n]},
    )
    return Cursor(after, t)


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


def _visit(c: _Cloud, node: str, *, evacuate: bool) -> Visit:
    """What is left for one node after the first wave: prepare, reboot, upgrade, external."""
    dep, catalog = c.dep, c.dep.catalog
    internal, external = c.internal(node), c.external(node)
    steps: list[VisitStep] = []
    if not c.prepared(node):
        if evacuate:
            lv = c.leaving(node)
            if lv:
                steps.append(
                    VisitStep(
                        Step.LEAVE,
                        lv,
                        _secs(dep, lv, Step.LEAVE),
                        tags=(Stage.SYSTEM_UPGRADE_PREPARE,),
                    )
                )
        prep = tuple(s for s in internal if catalog[s].system_upgrade.get(SystemUpgradeKey.PREPARE))
        steps.append(
            VisitStep(
                Step.SYSTEM_UPGRADE_PREPARE,
                prep,
                _secs(dep, internal, Step.STOP) + _secs(dep, [], SystemUpgradeKey.PREPARE),
                tags=(Stage.SYSTEM_UPGRADE_PREPARE,),
            )
        )
    if not c.ext_prepared(node):
        ext = tuple(s for s in external if catalog[s].system_upgrade.get(SystemUpgradeKey.PREPARE))
        if ext:
            steps.append(
                VisitStep(
                    Step.EXTERNAL_SYSTEM_UPGRADE_PREPARE,
                    ext,
                    _secs(dep, ext, Step.STOP) or 1.0,
                    tags=(Stage.SYSTEM_UPGRADE_PREPARE,),
                )
            )
    if not c.new_os(node):
        steps.append(
            VisitStep(
                Step.SYSTEM_UPGRADE_RUN,
                (),
                max(
                    [_secs(dep, [], SystemUpgradeKey.RUN)]
                    + [catalog[s].seconds(Step.REBOOT) for s in internal + external]
                ),
                tags=(Stage.SYSTEM_UPGRADE_RUN,),
            )
        )
    if not c.started(node) and internal:
        steps.append(
            VisitStep(
                Step.PACKAGES, internal, _secs(dep, internal, Step.PACKAGES), tags=UPGRADE_TAGS
            )
        )
        for step in (Step.CONFIG, Step.START, Step.REJOIN):
            w = tuple(s for s in internal if catalog[s].has_step(WF, step))
            if w:
                steps.append(VisitStep(step, w, _secs(dep, w, step), tags=UPGRADE_TAGS))
        steps.append(
            VisitStep(
                Step.VERIFY,
                tuple(s for s in internal if catalog[s].health),
                _secs(dep, [], Step.VERIFY),
                tags=UPGRADE_TAGS,
            )
        )
    if not c.ext_started(node):
        ext = tuple(s for s in external if catalog[s].system_upgrade.get(SystemUpgradeKey.RUN))
        if ext:
            steps.append(
                VisitStep(
                    Step.EXTERNAL_SYSTEM_UPGRADE_RUN,
                    ext,
                    _secs(dep, ext, Step.START) or 1.0,
                    tags=(Stage.SYSTEM_UPGRADE_RUN,),
                )
            )
    down = (() if c.prepared(node) and not c.new_os(node) else internal) + (
        external if not c.ext_prepared(node) or (c.new_os(node) and not c.ext_started(node)) else ()
    )
    return Visit(node, dep.role_of(node).name, down, tuple(steps))


def _roll(
    builder, dep, visits, serial, allowance, instances, cur: Cursor, phase: Phase, what: str
) -> Cursor:
    visits = {r: [v for v in vs if v.steps] for r, vs in visits.items()}
    visits = {r: vs for r, vs in visits.items() if vs}
    if not visits:
        return cur
    res = schedule_rolling(
        builder,
        visits,
        role_serial=serial,
        allowance=allowance,
        instances=instances,
        start_s=cur.t,
        after=cur.after,
        stage=Stage.SYSTEM_UPGRADE_RUN,
        phase=phase,
        describe=lambda s: describe_rule(dep, s),
        tags=(),
    )
    return Cursor(builder.gate(res.last_units, what, Stage.SYSTEM_UPGRADE_RUN), res.end_s)


def _finish(builder: PlanBuilder, c: _Cloud, cur: Cursor) -> None:
    """Steps 10-12: online data migrations, converge, cleanup."""
    dep, catalog = c.dep, c.dep.catalog
    after = cur.after
    services = {s for r in c.roles for s in r.services}
    if M.ONLINE_UPGRADED not in c.p:
        conv = on_bootstrap(dep, services, lambda s: bool(s.converge))
        if conv:
            after = builder.add(
                Step.CONVERGE,
                nodes=list(conv),
                services=sorted({s for v in conv.values() for s in v}),
                after=[after],
                work=conv,
                stage=Stage.ONLINE_UPGRADE,
                scope=Scope.DEPLOYMENT,
                duration_s=max(_secs(dep, ss, Step.CONVERGE) for ss in conv.values()),
                why="step 10: online data migrations, now that every node runs the new release",
                marks=[M.ONLINE_UPGRADED],
                requires=c.all_started(),
            )
        else:
            after = builder.gate(
                [after],
                "step 10: no online data migration to run",
                Stage.ONLINE_UPGRADE,
                marks=[M.ONLINE_UPGRADED],
            )  # reached with the rest: nothing to migrate
    if M.CONVERGED not in c.p:
        unpin = {
            n.name: tuple(
                s
                for s in dep.services_on(n)
                if catalog[s].rpc and catalog[s].has_step(WF, UpgradeKey.UNPIN)
            )
            for r in c.roles
            for n in r.nodes
        }
        unpin = {k: v for k, v in unpin.items() if v}
        if unpin:
            after = builder.add(
                Step.UNPIN_RPC,
                nodes=list(unpin),
                services=sorted({s for v in unpin.values() for s in v}),
                after=[after],
                work=unpin,
                stage=Stage.CONVERGE,
                scope=Scope.DEPLOYMENT,
                duration_s=max(_secs(dep, ss, UpgradeKey.UNPIN) for ss in unpin.values()),
                why="step 11: converge: lift the RPC pins, every peer runs the new release",
                requires=[M.ONLINE_UPGRADED],
            )
        # the expanded schemas lose their old columns only now that no old code is left (a
        # contract is idempotent: run again after an interruption, it finds the head)
        contract = on_bootstrap(dep, services, lambda s: bool(s.contract))
        if contract:
            after = builder.add(
                Step.CONTRACT,
                nodes=list(contract),
                services=sorted({s for v in contract.values() for s in v}),
                after=[after],
                work=contract,
                stage=Stage.CONVERGE,
                scope=Scope.DEPLOYMENT,
                duration_s=max(_secs(dep, ss, Step.CONTRACT) for ss in contract.values()),
                why="step 11: converge: contract the expanded schemas, no old code reads them",
                requires=[M.ONLINE_UPGRADED],
            )
        health = {
            n.name: tuple(s for s in dep.services_on(n) if catalog[s].health)
            for r in c.roles
            for n in r.nodes
        }
        after = builder.add(
            Step.VERIFY,
            nodes=list(health),
            services=sorted({s for v in health.values() for s in v}),
            after=[after],
            work=health,
            stage=Stage.CONVERGE,
            scope=Scope.DEPLOYMENT,
            duration_s=_secs(dep, [], Step.VERIFY),
            why="step 11: converge: re-assert the state",
            marks=[M.CONVERGED],
            requires=[M.ONLINE_UPGRADED],
        )
    everyone = {
        n.name: tuple(
            s for s in dep.services_on(n) if catalog[s].system_upgrade.get(SystemUpgradeKey.CLEANUP)
        )
        for r in c.roles
        for n in r.nodes
    }
    builder.add(
        Step.SYSTEM_UPGRADE_CLEANUP,
        nodes=list(everyone),
        services=sorted({s for v in everyone.values() for s in v}),
        after=[after],
        work=everyone,
        stage=Stage.SYSTEM_UPGRADE_CLEANUP,
        scope=Scope.DEPLOYMENT,
        duration_s=_secs(dep, [], SystemUpgradeKey.CLEANUP),
        requires=[M.CONVERGED],
        why="step 12: remove what the OS upgrade persisted (it may hold secrets) "
        "and re-assert flags",
    )


def _annotate(builder: PlanBuilder, c: _Cloud, start: int) -> None:
    """Give every unit of the procedure the milestones it reaches and needs, by its kind and
    nodes, so that any selection of it can be checked against what was done before."""
    units = builder.units
    control_plane = c.all_started(c.sensitive)
    last_upgrade: dict[str, int] = {}
    for i in range(start, len(units)):
        u = units[i]
        if u.stage is Stage.UPGRADE and u.step is not Step.GATE:
            for n in u.nodes:
                last_upgrade[n] = i
    for i in range(start, len(units)):
        u = units[i]
        marks, requires = list(u.marks), list(u.requires)
        for n in u.nodes:
            role = c.dep.role_of(n)
            sensitive = role in c.sensitive
            gate = [] if sensitive else control_plane
            if not sensitive or c.is_first(n):
                join: list[str] = []
            else:
                f = c.first[role.name]
                join = [M.started(f)] + ([M.external_started(f)] if c.external(f) else [])
            if u.step is Step.SYSTEM_UPGRADE_PREPARE or (
                u.step is Step.LEAVE and u.stage is Stage.SYSTEM_UPGRADE_PREPARE
            ):
                requires += [M.repos(n), *gate, *join]
                if u.step is Step.SYSTEM_UPGRADE_PREPARE:
                    marks.append(M.prepared(n))
            elif u.step is Step.EXTERNAL_SYSTEM_UPGRADE_PREPARE:
                requires += [*gate, *join]
                marks.append(M.external_prepared(n))
            elif u.step is Step.SYSTEM_UPGRADE_RUN:
                requires.append(M.prepared(n))
                if c.external(n) and any(
                    c.dep.catalog[s].system_upgrade.get(SystemUpgradeKey.PREPARE)
                    for s in c.external(n)
                ):
                    requires.append(M.external_prepared(n))
                marks.append(M.new_os(n))
            elif u.stage is Stage.UPGRADE and u.step is not Step.GATE:
                requires.append(M.new_os(n))
                if (
                    sensitive
                    and c.is_first(n)
                    and M.transferred(role.name) not in c.p
                    and c.old_nodes(role)
                ):
                    movers = any(
                        c.dep.catalog[s].system_upgrade.get(SystemUpgradeKey.TRANSFER_DATA)
                        for s in c.internal(n)
                    )
                    requires.append(
                        M.transferred(role.name) if movers else M.stopped_old(role.name)
                    )
                requires += join
                if any(c.dep.catalog[s].rpc for s in c.internal(n)):
                    requires.append(M.PINNED)
                if last_upgrade.get(n) == i:
                    marks.append(M.started(n))
            elif u.step is Step.EXTERNAL_SYSTEM_UPGRADE_RUN:
                requires.append(M.started(n) if c.internal(n) else M.new_os(n))
                marks.append(M.external_started(n))
            elif u.step is Step.SYSTEM_UPGRADE_TRANSFER_DATA:
                requires += [M.new_os(n), M.stopped_old(role.name)]
            elif u.step is Step.STOP and u.stage is Stage.SYSTEM_UPGRADE_TRANSFER_DATA:
                requires.append(M.new_os(c.first[role.name]))
        requires = [m for m in dict.fromkeys(requires) if m not in c.p and m not in marks]
        units[i] = replace(u, marks=tuple(dict.fromkeys(marks)), requires=tuple(requires))
