"""What a rollback plans from: the versions an update run replaced, from the store.

An update run records the facts it was planned from when it starts (`runs.facts`: per node
and package the version installed then and the one it went to) and, per unit, whether it
finished. So the versions before run N are the installed versions of its recorded facts, on
the nodes where a packages unit of it is done, for the packages that unit updated; what the
nodes run now is what they reported after their last packages step (the stored facts). Those
become the rollback's facts (`plan.rollback`): "installed" now, "available" before.

Refused with the reason (exit 2), before anything is planned: a run that is not in the store,
not a minor update, not finished, already rolled back, followed by another run that changed the
same nodes' packages (that one must go back first), one that recorded no versions (planned
without facts), or one that switched containers to new images (a rollback takes back packages
only: it would say done with the containers still on the new images).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from stepwise.errors import InputError, Problem
from stepwise.model.deployment import Deployment
from stepwise.model.facts import Facts, PackageFact, facts_from_dict
from stepwise.model.vocab import RunState, Step, UnitState, Workflow
from stepwise.plan.table import WorkflowEntry, entry
from stepwise.plan.units import Plan, Unit
from stepwise.run.store.store import RunInfo, Store

#: how many of a cloud's latest runs are searched for a rollback and for later changes
RUNS_SEARCHED = 10_000


def rollback_facts(deployment: Deployment, store: Store | None, run_id: int) -> Facts:
    """The rollback facts of run `run_id` of this cloud (see the module), with the cloud's
    milestones (so prepared nodes stay fenced). Raises InputError for a run that cannot be
    rolled back, saying why."""
    cloud = deployment.name
    run = store.run(run_id) if store is not None else None
    if store is None or run is None or run.cloud != cloud:
        raise _refused(
            run_id,
            f"{cloud} has no run {run_id} in its store",
            "`stepwise history -d DEPLOYMENT` lists the runs",
        )
    _check_rollbackable(store, run, deployment)
    changed = _updated_packages(store, run, deployment)
    recorded = _stored(run.facts, deployment, f"the facts run {run_id} recorded in the store")
    now = _stored(store.facts(cloud), deployment, "the nodes' facts in the store")
    nodes: dict[str, Any] = {}
    for node, packages in changed.items():
        before = _packages(recorded, node)
        current = _packages(now, node)
        back = {}
        for p in sorted(packages):
            was, cur = before.get(p), current.get(p)
            old = was.installed if was else None
            new = (cur.installed if cur else None) or (was.available if was else None)
            if old is not None and new is not None:
                back[p] = {"installed": new, "available": old}
        nodes[node] = {"packages": back}
    facts = facts_from_dict({"nodes": nodes}, deployment, source=f"run {run_id}")
    return facts.with_progress(store.progress(cloud))


def _stored(data: Mapping[str, Any] | None, dep: Deployment, source: str) -> Facts:
    """Stored facts (facts-file shape) validated as a facts file is: a list or a string where
    the file has a mapping is an InputError naming the field, never a crash halfway."""
    try:
        return facts_from_dict(dict(data or {}), dep, source=source)
    except InputError as exc:
        hint = "the store was changed outside stepwise: restore it from a backup"
        raise InputError(
            [p if p.hint else dataclasses.replace(p, hint=hint) for p in exc.problems]
        ) from None


def _packages(facts: Facts, node: str) -> Mapping[str, PackageFact]:
    """A node's package facts (none when the facts do not name the node)."""
    found = facts.nodes.get(node)
    return found.packages if found is not None else {}


def _refused(run_id: int, why: str, what: str) -> InputError:
    return InputError(Problem(f"cannot roll back run {run_id}: {why}", field="--run", hint=what))


def _check_rollbackable(store: Store, run: RunInfo, dep: Deployment) -> None:
    """Refuse what a rollback cannot take back (see the module)."""
    n = run.id
    kind = _entry_of(run)
    if kind is None or not kind.reversible:
        raise _refused(
            n,
            f"it ran {kind.name if kind else run.workflow}, not a minor update",
            "only a minor update run (`update run`) can be rolled back",
        )
    if run.status is not RunState.DONE:
        raise _refused(
            n,
            f"it is {run.status}, not finished",
            f"finish it first (run `{run.command}` again), then roll it back",
        )
    if not (run.facts or {}).get("known", True) or not (run.facts or {}).get("nodes"):
        raise _refused(
            n,
            "it recorded no package versions when it started (it was planned without facts, "
            "or by a stepwise that did not record them)",
            "bring the nodes back by hand, or by an update from repositories that hold the "
            "old versions",
        )
    switched = _switched_containers(store, run, dep)
    if switched:
        nodes = ", ".join(sorted(switched)[:5]) + (" ..." if len(switched) > 5 else "")
        raise _refused(
            n,
            f"it switched containers to new images on {nodes}, and a rollback takes back "
            "packages only (not container images yet)",
            "point the deployment's containers tag at images holding the old release and run "
            "`stepwise update run` (a minor update to those digests), or switch the "
            "containers back by hand",
        )
    later = [r for r in store.runs(run.cloud, RUNS_SEARCHED) if r.id > n]
    for r in sorted(later, key=lambda r: r.id):
        if r.params.get("of_run") == n and r.status is RunState.DONE:
            raise _refused(n, f"run {r.id} rolled it back already", "nothing is left to take back")
    _refuse_later_changes(store, run, later, dep)


def _entry_of(run: RunInfo) -> WorkflowEntry | None:
    """The table's entry of a stored run's workflow (None: a value this stepwise lacks)."""
    try:
        return entry(Workflow(run.workflow))
    except ValueError:
        return None


def _refuse_later_changes(
    store: Store, run: RunInfo, later: list[RunInfo], dep: Deployment
) -> None:
    """A later run that changed packages on a node run N changed would be undone as well."""
    mine = set(_updated_packages(store, run, dep))
    for r in sorted(later, key=lambda r: r.id):
        if r.params.get("of_run") == run.id:
            continue  # this rollback's own earlier attempts
        touched = sorted(mine & set(_updated_packages(store, r, dep)))
        if touched:
            raise _refused(
                run.id,
                f"run {r.id} ({r.workflow}) changed packages on {', '.join(touched[:5])} after it",
                f"roll back run {r.id} first, or leave run {run.id} in place",
            )


def _done_units(store: Store, run: RunInfo, step: Step) -> list[Unit]:
    """The units of `step` in the stored plan of `run` that it finished."""
    if not run.plan:
        return []
    plan = Plan.from_json(run.plan, f"the plan of run {run.id} in the store")
    done = {u.unit_id for u in store.units(run.id) if u.state == UnitState.DONE}
    return [u for u in plan.units if u.step is step and u.id in done]


def _switched_containers(store: Store, run: RunInfo, dep: Deployment) -> set[str]:
    """The nodes where a done `config` unit of `run` switched a containerized service to
    another image (the style's switch is its config step)."""
    return {
        node
        for u in _done_units(store, run, Step.CONFIG)
        for node in u.nodes
        if node in dep.node_by_name
        and set(u.services_on(node)) & set(dep.containerized(dep.role_of(node)))
    }


def _updated_packages(store: Store, run: RunInfo, dep: Deployment) -> dict[str, set[str]]:
    """node -> the packages a done packages unit of `run` updated there (its services'
    packages and the unowned packages it carried)."""
    out: dict[str, set[str]] = {}
    for u in _done_units(store, run, Step.PACKAGES):
        extra = _extra_packages(u, run)
        for node in u.nodes:
            names = {
                p for s in u.services_on(node) if s in dep.catalog for p in dep.catalog[s].packages
            }
            out.setdefault(node, set()).update(names | set(extra.get(node, ())))
    return out


def _extra_packages(u: Unit, run: RunInfo) -> Mapping[str, list[str]]:
    """A stored unit's `extra_packages` (node -> package names): the plan model keeps a
    unit's vars as they were, so their shape is checked here, where they are read."""
    extra = u.vars.get("extra_packages") or {}
    if isinstance(extra, Mapping) and all(
        isinstance(v, list) and all(isinstance(p, str) for p in v) for v in extra.values()
    ):
        return extra
    raise InputError(
        Problem(
            "not a mapping of nodes to package names",
            file=f"the plan of run {run.id} in the store",
            field=f"units.{u.id[:100]}.vars.extra_packages",
            hint="the store was changed outside stepwise: restore it from a backup",
        )
    )
