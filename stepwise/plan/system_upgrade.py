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

from collections.abc import Mapping
from dataclasses import replace
from types import MappingProxyType

from stepwise.errors import InputError, Problem
from stepwise.model.availability import service_allowances
from stepwise.model.deployment import Deployment
from stepwise.model.facts import Facts
from stepwise.model.vocab import Phase, Scope, Stage, Step, SystemUpgradeKey, UpgradeKey
from stepwise.plan import progress
from stepwise.plan.builder import PlanBuilder
from stepwise.plan.os_cloud import WF, OsCloud, is_sensitive, secs
from stepwise.plan.os_finish import finish
from stepwise.plan.os_first_wave import first_wave, waves
from stepwise.plan.os_milestones import annotate
from stepwise.plan.os_visits import Pass, Rules, role_visits, roll
from stepwise.plan.planes import Cursor
from stepwise.plan.units import Unit

__all__ = ["initial_state", "is_sensitive", "plan_system_upgrade"]


def initial_state(dep: Deployment, facts: Facts) -> dict:
    """What the milestones reached so far mean for the cloud: nodes on the new OS, instances
    not serving, instances on new code, RPC pinned (for the verifier's replay)."""
    c = OsCloud(dep, facts, set())
    down: dict[str, set[str]] = {}
    new_code: dict[str, set[str]] = {}
    for r in c.roles:
        old_stopped = progress.stopped_old(r.name) in c.p or progress.transferred(r.name) in c.p
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
                and (c.ext_prepared(n) and progress.external_prepared(n) in c.p or c.new_os(n))
            ):
                for s in c.external(n):
                    down.setdefault(s, set()).add(n)
            if c.started(n) and c.internal(n):
                for s in c.internal(n):
                    new_code.setdefault(s, set()).add(n)
            if c.external(n) and progress.external_started(n) in c.p:
                for s in c.external(n):
                    new_code.setdefault(s, set()).add(n)
    return {
        "new_os": sorted(n.name for r in c.roles for n in r.nodes if c.new_os(n.name)),
        "down": {s: sorted(ns) for s, ns in sorted(down.items())},
        "new_code": {s: sorted(ns) for s, ns in sorted(new_code.items())},
        "pinned": progress.PINNED in c.p,
    }


def _refuse_clusters_in_containers(dep: Deployment) -> None:
    """Refuse the OS upgrade where a cluster that starts over on the new OS runs in a
    container: its catalog entry forms and joins the new cluster with the host's commands
    (`galera_new_cluster`, `pcs cluster setup`), which a node whose service is in a container
    has not. Containers of every other service are planned (recreated from their images)."""
    boxed = [
        f"{s} on {r.name} ({r.style})"
        for r in dep.roles
        for s in dep.containerized(r)
        if dep.catalog[s].system_upgrade.keys()
        & {SystemUpgradeKey.FORM_CLUSTER, SystemUpgradeKey.JOIN_CLUSTER}
    ]
    if boxed:
        raise InputError(
            Problem(
                "the OS upgrade forms these clusters anew with host commands, and they run in "
                "containers here: " + ", ".join(boxed),
                file=dep.path,
                field="style",
                hint="run them on the host (a packages-style role, or `styles: {<style>: "
                "{host: true}}` in their catalog entry, as pacemaker has), or OS-upgrade those "
                "nodes with the deployment's own procedure",
            )
        )


def plan_system_upgrade(
    builder: PlanBuilder,
    dep: Deployment,
    facts: Facts,
    nodes: list[str] | None,
) -> None:
    """What is left of the OS upgrade of the whole cloud (the selection picks the part the
    operator's command runs)."""
    _refuse_clusters_in_containers(dep)
    c = OsCloud(dep, facts, set(nodes or ()))
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
    rules = Rules(*service_allowances(dep))
    for wave in waves(dep, firsts, rules.allowance):
        cur = first_wave(builder, c, wave, cur)
    passes = [len(builder.units)]  # where steps 8 and 9 begin, and where they end
    later = [
        n.name
        for r in c.sensitive
        for n in r.nodes
        if not c.is_first(n.name) and not c.done(n.name)
    ]
    if later:
        visits = role_visits(c, later, evacuate=False)
        step8 = Pass(
            Phase.OS_FIRST,
            {r: 1 for r in visits},
            "step 8: the other nodes of the sensitive roles, one by one: they join the new "
            "clusters (no data transfer)",
        )
        cur = roll(builder, c, visits, rules, cur, step8)
    passes.append(len(builder.units))
    rest = [n.name for r in c.roles if r not in c.sensitive for n in r.nodes if not c.done(n.name)]
    if rest:
        step9 = Pass(
            Phase.OS_REST,
            {r.name: r.update_serial for r in dep.roles},
            "step 9: the other nodes in batches, workloads moved away first",
        )
        cur = roll(builder, c, role_visits(c, rest, evacuate=True), rules, cur, step9)
    passes.append(len(builder.units))
    finish(builder, c, cur)
    annotate(builder, c, start)
    mark_seed_steps(builder.units, start, passes)


#: the seed's step of a unit of the first nodes or of the end, by its stage (the external
#: services' return, step 7, shares step 4's stage and is told by its step)
_SEED_STEPS: Mapping[Stage, int] = MappingProxyType(
    {
        Stage.PREPARE: 1,
        Stage.SYSTEM_UPGRADE_PREPARE: 2,
        Stage.SYSTEM_UPGRADE_RUN: 4,
        Stage.SYSTEM_UPGRADE_TRANSFER_DATA: 5,
        Stage.UPGRADE: 6,
        Stage.ONLINE_UPGRADE: 10,
        Stage.CONVERGE: 11,
        Stage.SYSTEM_UPGRADE_CLEANUP: 12,
    }
)


def mark_seed_steps(units: list[Unit], start: int, passes: list[int]) -> None:
    """Give every unit from `start` on the seed's step it belongs to: the units between
    `passes[0]` and `passes[1]` are step 8 (the other nodes of the sensitive roles: steps 2,
    4, 6 and 7 again, node by node), those up to `passes[2]` step 9; the others by kind."""
    for i in range(start, len(units)):
        u = units[i]
        if passes[0] <= i < passes[2]:
            n = 8 if i < passes[1] else 9
        else:
            n = 7 if u.step is Step.EXTERNAL_SYSTEM_UPGRADE_RUN else _SEED_STEPS[u.stage]
        units[i] = replace(u, seed_step=n)


def _prerequisites(builder: PlanBuilder, c: OsCloud, cur: Cursor) -> Cursor:
    """Step 1, as `upgrade prepare` does it: the target release's repositories on every node
    (leapp needs them), a backup, RPC pinned (old and new code will coexist)."""
    dep = c.dep
    need = [
        n.name
        for r in c.roles
        for n in r.nodes
        if progress.repos(n.name) not in c.p and not c.new_os(n.name)
    ]
    after, t = cur.after, cur.t
    if need:
        after = builder.add(
            Step.REPOS,
            nodes=need,
            after=[after],
            stage=Stage.PREPARE,
            scope=Scope.DEPLOYMENT,
            duration_s=secs(dep, [], Step.REPOS) or 10.0,
            work={n: () for n in need},
            why="step 1: switch the repositories to the target release (variable target_release); "
            "the OS upgrade downloads the new release for the new OS",
        )
        t += 10.0
    if progress.PINNED not in c.p:
        pin = c.per_node(lambda s: bool(s.rpc) and s.has_step(WF, UpgradeKey.PIN))
        pin = {n: ss for n, ss in pin.items() if ss}
        if pin:
            pin_s = max(secs(dep, ss, UpgradeKey.PIN) for ss in set(pin.values()))
            after = builder.add(
                Step.PIN_RPC,
                nodes=list(pin),
                services=sorted({s for v in pin.values() for s in v}),
                after=[after],
                stage=Stage.PREPARE,
                scope=Scope.DEPLOYMENT,
                duration_s=pin_s,
                work=pin,
                why="step 1: pin RPC to the old version everywhere: old and new code coexist until "
                "converge",
            )
            t += pin_s
    return Cursor(after, t)
