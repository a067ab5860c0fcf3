"""The minor update and the major upgrade (prepare / run / converge), composed per layout."""

from __future__ import annotations

from dataclasses import dataclass

from stepwise.errors import Problem, UnsafePlanError
from stepwise.model.catalog import node_step_seconds
from stepwise.model.deployment import Deployment
from stepwise.model.facts import Facts
from stepwise.model.vocab import CatalogKey, Scope, Section, Stage, Step, UpgradeKey
from stepwise.plan.builder import PlanBuilder
from stepwise.plan.changes import NodeChange, node_changes
from stepwise.plan.planes import Cursor, rollout, rollout_merged
from stepwise.plan.prestage import add_prestage, fetches
from stepwise.plan.upgrade_milestones import annotate_upgrade


def scoped_changes(
    changes: dict[str, NodeChange], nodes: list[str] | None
) -> dict[str, NodeChange]:
    """Touched nodes (within the limit) of `changes` (`node_changes`)."""
    keep = set(nodes) if nodes is not None else None
    return {n: c for n, c in changes.items() if c.touched and (keep is None or n in keep)}


@dataclass
class _Sequence:
    """Deployment-wide units one after another, each waiting for the one before: `cur` is
    where the sequence stands."""

    builder: PlanBuilder
    dep: Deployment
    cur: Cursor

    def node_wide(
        self,
        step: Step,
        stage: Stage,
        work: dict[str, tuple[str, ...]],
        why: str,
        *,
        service_step: CatalogKey | None = None,
        always: bool = False,
    ) -> None:
        """One deployment-wide unit over the nodes in `work` (skipped when there is no work)."""
        if not always and not any(work.values()):
            return
        if not work:
            return
        catalog = self.dep.catalog
        sstep = service_step or step
        # nodes of a role share their service lists: estimate each distinct list once
        seconds = max(
            node_step_seconds([catalog[s] for s in ss], sstep) or node_step_seconds([], sstep)
            for ss in set(work.values())
        )
        services = sorted({s for ss in work.values() for s in ss})
        uid = self.builder.add(
            step,
            nodes=list(work),
            services=services,
            after=[self.cur.after],
            why=why,
            stage=stage,
            scope=Scope.DEPLOYMENT,
            duration_s=seconds,
            work=work,
        )
        self.cur = Cursor(uid, self.cur.t + seconds)

    def gate(self, why: str, stage: Stage) -> None:
        """A barrier after the sequence so far."""
        self.cur = Cursor(self.builder.gate([self.cur.after], why, stage), self.cur.t)


def per_node(dep: Deployment, nodes, keep) -> dict[str, tuple[str, ...]]:
    """node -> its services for which `keep(service)` holds, computed once per role."""
    by_role: dict[str, tuple[str, ...]] = {}
    out: dict[str, tuple[str, ...]] = {}
    for n in nodes:
        role = dep.role_of(n)
        if role.name not in by_role:
            by_role[role.name] = tuple(s for s in role.services if keep(dep.catalog[s]))
        out[n] = by_role[role.name]
    return out


def on_bootstrap(dep: Deployment, services, keep) -> dict[str, tuple[str, ...]]:
    """node -> the services (among `services`, where `keep(service)`) whose once-only work
    runs there: each service's bootstrap node."""
    out: dict[str, list[str]] = {}
    for s in sorted(services):
        if keep(dep.catalog[s]):
            boot = dep.bootstrap_node(s)
            if boot is not None:
                out.setdefault(boot.name, []).append(s)
    return {n: tuple(v) for n, v in out.items()}


def rpc_pins(
    dep: Deployment, changes: dict[str, NodeChange], wf: Section
) -> dict[str, tuple[str, ...]]:
    """node -> services whose RPC pin is set (prepare) and lifted (converge): only RPC groups
    with a member that changes, on every node where the group runs."""
    catalog = dep.catalog
    changing = {s for ss in {c.services for c in changes.values()} for s in ss}
    groups = {catalog[s].rpc for s in changing if catalog[s].rpc}
    pinned = {
        s
        for s in dep.instances
        if catalog[s].rpc in groups and catalog[s].has_step(wf, UpgradeKey.PIN)
    }
    # a node's services are its role's: one tuple per role, nodes in deployment order
    pin: dict[str, tuple[str, ...]] = {}
    for role in dep.roles:
        here = tuple(sorted(s for s in set(role.services) if s in pinned))
        if here:
            pin.update(dict.fromkeys((n.name for n in role.nodes), here))
    return pin


def refuse_split_offline(
    dep: Deployment, all_changes: dict[str, NodeChange], changes: dict[str, NodeChange]
) -> None:
    """An offline schema migration needs every old reader stopped: a --limit that upgrades
    some instances of an offline service and leaves others that still change for later
    would migrate the schema under them. Refused before anything is planned."""
    catalog = dep.catalog
    problems = []
    for node, ch in all_changes.items():
        if node in changes:
            continue
        for s in ch.services:
            if not catalog[s].rolling and any(s in c.services for c in changes.values()):
                problems.append(
                    Problem(
                        f"--limit upgrades {s} on some nodes but not on {node}: its schema "
                        f"migration is offline (rolling: false) and would run under the old {s} "
                        "there",
                        field="--limit",
                        hint=f"add {node} to --limit (every node where {s} changes), "
                        "or upgrade without --limit",
                    )
                )
    if problems:
        raise UnsafePlanError(problems[:10])


def final_instances(
    dep: Deployment, facts: Facts, all_changes: dict[str, NodeChange]
) -> dict[str, list[str]]:
    """Instances that keep their code while other instances of their service (or RPC group)
    change: they already run the target (a partly upgraded cloud). Recorded in the plan, so
    the verifier counts them as new code when it proves the RPC unpin, an offline schema
    migration and a contract safe (and knows the expand ran). Only RPC-group members and
    services with a schema are listed: nothing else asks."""
    if not facts.known:
        return {}
    catalog = dep.catalog
    changing = {s for c in all_changes.values() for s in c.services}
    groups = {catalog[s].rpc for s in changing if catalog[s].rpc}
    final: dict[str, list[str]] = {}
    for s, nodes in dep.instances.items():
        if catalog[s].rpc in groups or (
            s in changing and (not catalog[s].rolling or catalog[s].schema)
        ):
            kept = [n.name for n in nodes if s not in all_changes[n.name].services]
            if kept:
                final[s] = kept
    return final


def old_instances(
    dep: Deployment, facts: Facts, all_changes: dict[str, NodeChange]
) -> dict[str, list[str]]:
    """Instances the facts show on old code (a package of theirs has a newer version, or
    their container runs another image than the target's), among the services an RPC unpin
    or a contract concerns. Recorded in the plan, so the verifier refuses lifting a pin or
    contracting a schema while one of them is still old, whatever stage was selected: only
    what the facts say, a node they do not name is no evidence."""
    if not facts.known:
        return {}
    catalog = dep.catalog
    old: dict[str, list[str]] = {}
    for s, nodes in dep.instances.items():
        if catalog[s].rpc or catalog[s].contract:
            shown = [
                n.name for n in nodes if n.name in facts.nodes and s in all_changes[n.name].services
            ]
            if shown:
                old[s] = shown
    return old


def _validate(
    seq: _Sequence, changes: dict[str, NodeChange], section: Section, stage: Stage
) -> None:
    work = per_node(seq.dep, changes, lambda s: s.has_step(section, Step.VALIDATE))
    seq.node_wide(
        Step.VALIDATE,
        stage,
        work,
        f"pre-flight checks on all {len(work)} node(s) before anything is disrupted",
        always=True,
    )


def plan_update(
    builder: PlanBuilder,
    dep: Deployment,
    facts: Facts,
    nodes: list[str] | None,
    prestage: int = 0,
) -> None:
    """Minor update: same schema and RPC; one visit per node, control plane first. A service
    whose rendered configuration changed (and not its packages) restarts in its node's visit.
    `prestage` N > 0: the prestage stage first, N nodes fetching at once."""
    changes = scoped_changes(node_changes(dep, facts, config=True), nodes)
    if not changes:
        return
    seq = _Sequence(builder, dep, add_prestage(builder, dep, changes, prestage, Cursor(None)))
    _validate(seq, changes, Section.UPDATE, Stage.RUN)
    seq.gate("validated: the rollout starts", Stage.RUN)
    rollout_merged(builder, dep, changes, Section.UPDATE, Stage.RUN, seq.cur)


def plan_upgrade(
    builder: PlanBuilder,
    dep: Deployment,
    facts: Facts,
    nodes: list[str] | None,
    prestage: int = 0,
) -> None:
    """Major upgrade: prepare (validate, repos, backup, pin RPC), run (control plane, then data
    plane in batches while RPC stays pinned), converge (unpin, online migrations, re-assert).

    `prestage` N > 0: a prestage stage first, which switches the repositories (the new
    release's packages are what a node fetches; the switch changes nothing installed, so it
    disrupts nothing either) and then lets N nodes fetch at once; prepare keeps the rest."""
    # every node's changes, also outside --limit: the offline-split check and the instances
    # already on the target need the whole cloud
    all_changes = node_changes(dep, facts)
    changes = scoped_changes(all_changes, nodes)
    if not changes:
        return
    if nodes is not None:
        refuse_split_offline(dep, all_changes, changes)
    seq = _Sequence(builder, dep, Cursor(None))
    fetching = _same_os(builder, facts, changes) if prestage > 0 else {}
    switched = any(fetches(c) for c in fetching.values())
    if switched:
        _switch_repos(seq, changes, Stage.PRESTAGE)
        seq.cur = add_prestage(builder, dep, fetching, prestage, seq.cur)
    changed_services = {s for c in changes.values() for s in c.services}
    pin = _prepare(seq, changes, changed_services, switched=switched)
    prepared, run_start = seq.cur.after, len(builder.units)
    initial: dict[str, object] = {}
    final = final_instances(dep, facts, all_changes)
    if final:
        initial["new_code"] = final
    old = old_instances(dep, facts, all_changes)
    if old:
        initial["old_code"] = old
    if initial:
        builder.params["initial"] = initial
    seq.cur = rollout(builder, dep, changes, Section.UPGRADE, Stage.RUN, seq.cur)
    converge_start = len(builder.units)
    _converge(seq, changes, changed_services, pin)
    annotate_upgrade(builder, dep, all_changes, prepared, run_start, converge_start)


def _same_os(
    builder: PlanBuilder, facts: Facts, changes: dict[str, NodeChange]
) -> dict[str, NodeChange]:
    """The changes of the nodes that stay on their OS: only they prestage. A node going to a
    new OS (the seed's major upgrade with the OS upgrade) would fetch the new release built
    for the old one; it fetches after its OS upgrade, in its own packages step (a
    container: its config step's pull; the node is out of service from its OS upgrade's
    prepare on). The plan records those nodes
    (`params["fetch_after_os"]`: node -> [OS major, target]) for the tree and --json."""
    later = {
        n: [facts.of(n).os_major, facts.of(n).os_target] for n in changes if facts.changes_os(n)
    }
    if later:
        builder.params["fetch_after_os"] = later
    return {n: c for n, c in changes.items() if n not in later}


def _switch_repos(seq: _Sequence, changes: dict[str, NodeChange], stage: Stage) -> None:
    seq.node_wide(
        Step.REPOS,
        stage,
        {n: () for n in changes},
        "switch every node's repositories to the target release (variable target_release)",
        always=True,
    )


def _prepare(
    seq: _Sequence,
    changes: dict[str, NodeChange],
    changed_services: set[str],
    switched: bool = False,
) -> dict[str, tuple[str, ...]]:
    """The upgrade's prepare stage: validate, switch repositories (unless the prestage did:
    `switched`), back up, pin RPC. Returns the RPC pins (node -> services) converge lifts."""
    wf, dep = Section.UPGRADE, seq.dep
    _validate(seq, changes, wf, Stage.PREPARE)
    if not switched:
        _switch_repos(seq, changes, Stage.PREPARE)
    backup = on_bootstrap(dep, changed_services, lambda s: s.has_step(wf, Step.BACKUP))
    seq.node_wide(
        Step.BACKUP,
        Stage.PREPARE,
        backup,
        "back up what the migration changes, once per service, before anything stops",
    )
    pin = rpc_pins(dep, changes, wf)
    seq.node_wide(
        Step.PIN_RPC,
        Stage.PREPARE,
        pin,
        "pin RPC to the old version everywhere: old and new code will coexist until converge",
        service_step=UpgradeKey.PIN,
    )
    seq.gate("prepare done: validated, repositories switched, backed up, RPC pinned", Stage.PREPARE)
    return pin


def _converge(
    seq: _Sequence,
    changes: dict[str, NodeChange],
    changed_services: set[str],
    pin: dict[str, tuple[str, ...]],
) -> None:
    """The upgrade's converge stage: unpin RPC, online data migrations, contract the schemas,
    re-assert every service's health."""
    wf, dep = Section.UPGRADE, seq.dep
    # nodes of a role share their pins: filter each distinct tuple once
    kept = {
        ss: tuple(s for s in ss if dep.catalog[s].has_step(wf, UpgradeKey.UNPIN))
        for ss in set(pin.values())
    }
    unpin = {n: kept[ss] for n, ss in pin.items()}
    seq.node_wide(
        Step.UNPIN_RPC,
        Stage.CONVERGE,
        {n: ss for n, ss in unpin.items() if ss},
        "no old peer remains: lift the RPC pins and reload",
        service_step=UpgradeKey.UNPIN,
    )
    conv = on_bootstrap(dep, changed_services, lambda s: bool(s.converge))
    seq.node_wide(
        Step.CONVERGE,
        Stage.CONVERGE,
        conv,
        "online data migrations, once per service, after every node runs the new code",
    )
    contract = on_bootstrap(dep, changed_services, lambda s: bool(s.contract))
    seq.node_wide(
        Step.CONTRACT,
        Stage.CONVERGE,
        contract,
        "contract the expanded schemas, once per service: "
        "no old code is left to read the old columns",
    )
    health = per_node(dep, changes, lambda s: bool(s.health) or s.has_step(wf, Step.VERIFY))
    seq.node_wide(
        Step.VERIFY,
        Stage.CONVERGE,
        health,
        "re-assert state: every service healthy on every node",
        always=True,
    )
