"""`status` and `history`: views of the state store (nothing here touches a node)."""

from __future__ import annotations

from datetime import datetime
from pathlib import Path
from typing import Any

from stepwise.model.vocab import RunState, UnitState
from stepwise.run.lock import read_holder
from stepwise.run.store.store import RunInfo, Store, now


def _iso(t: datetime | None) -> str | None:
    return t.isoformat(timespec="seconds") + "Z" if t else None


def _run_summary(store: Store, r: RunInfo, holder: dict | None = None) -> dict[str, Any]:
    units = store.units(r.id)
    counts: dict[str, int] = {}
    for u in units:
        counts[u.state] = counts.get(u.state, 0) + 1
    status = r.status
    if status.live and (holder is None or holder.get("pid") != r.pid):
        status = RunState.INTERRUPTED  # its process is gone: nothing holds the lock for it
    current = [u.unit_id for u in units if u.state is UnitState.RUNNING]
    last_done = [u.unit_id for u in units if u.state is UnitState.DONE]
    end = r.ended_at or (now() if status.live else None)
    return {
        "id": r.id,
        "workflow": r.workflow,
        "params": {k: v for k, v in r.params.items() if v not in (None, [], "")},
        "status": status,
        "message": r.message,
        "command": r.command,
        "user": r.user,
        "host": r.host,
        "attempts": r.attempts,
        "started_at": _iso(r.started_at),
        "ended_at": _iso(r.ended_at),
        "elapsed_s": round((end - r.started_at).total_seconds(), 1) if end else None,
        "units": {"total": len(units), **counts},
        "current": current,
        "last_done": last_done[-1] if last_done else None,
    }


def status(store: Store, cloud: str, lock_path: Path | None = None) -> dict[str, Any]:
    """Per node and service: version and state; the latest run and where it is."""
    holder = read_holder(lock_path) if lock_path else None
    nodes: dict[str, dict[str, Any]] = {}
    for row in store.node_services(cloud):
        nodes.setdefault(row.node, {})[row.service] = {
            "version": row.version,
            "state": row.state,
            "run": row.run_id,
            "updated_at": _iso(row.updated_at),
        }
    facts = store.facts(cloud) or {"nodes": {}}
    os_ = {n: f.get("os") for n, f in facts["nodes"].items() if f.get("os")}
    runs = store.runs(cloud, limit=1)
    return {
        "cloud": cloud,
        "lock": holder,
        "run": _run_summary(store, runs[0], holder) if runs else None,
        "nodes": {n: {"os": os_.get(n), "services": s} for n, s in sorted(nodes.items())},
    }


def ran_after_done(store: Store, run_id: int) -> list[Any]:
    """Task results of units recorded done that arrived after the unit was recorded done: a
    finished unit that ran again (a unit cut by a kill or an interrupt runs again from its
    start and is recorded done after that; one that had finished never runs again)."""
    ended = {
        u.unit_id: u.ended_at
        for u in store.units(run_id)
        if u.state is UnitState.DONE and u.ended_at is not None
    }
    return [t for t in store.task_results(run_id) if t.unit_id in ended and t.at > ended[t.unit_id]]


def history(
    store: Store,
    cloud: str,
    run_id: int | None = None,
    limit: int = 20,
    lock_path: Path | None = None,
) -> dict[str, Any]:
    """The runs of a cloud (most recent first), or one run's units and failures."""
    holder = read_holder(lock_path) if lock_path else None
    if run_id is None:
        return {
            "cloud": cloud,
            "runs": [_run_summary(store, r, holder) for r in store.runs(cloud, limit)],
        }
    r = store.run(run_id)
    if r is None or r.cloud != cloud:
        from stepwise.errors import InputError, Problem

        raise InputError(
            Problem(
                f"no run {run_id} for cloud {cloud}",
                field="--run",
                hint="see `stepwise history` for the run ids",
            )
        )
    units = [_unit_row(u) for u in store.units(run_id)]
    failures = _failures(store, run_id)
    return {
        "cloud": cloud,
        "run": _run_summary(store, r, holder),
        "units": units,
        "tasks": store.task_counts(run_id),
        "failures": failures,
    }


def _failures(store: Store, run_id: int) -> list[dict[str, Any]]:
    """The failed task results of a run, as history shows them."""
    return [
        {
            "unit": t.unit_id,
            "host": t.host,
            "task": t.task,
            "status": t.status,
            "message": t.message,
        }
        for t in store.task_results(run_id)
        if t.status.failed
    ]


def _unit_row(u: Any) -> dict[str, Any]:
    """One stored unit as history shows it."""
    return {
        "id": u.unit_id,
        "step": u.step,
        "stage": u.stage,
        "batch": u.batch,
        "nodes": u.nodes,
        "state": u.state,
        "attempts": u.attempts,
        "idempotent": u.idempotent,
        "message": u.message,
        "started_at": _iso(u.started_at),
        "ended_at": _iso(u.ended_at),
        "duration_s": round((u.ended_at - u.started_at).total_seconds(), 2)
        if u.started_at and u.ended_at
        else None,
    }


def schema_seconds(units: Any) -> float:
    """Seconds the stored units spent in schema work (the migrate and contract steps: a
    visit's expand, the data migration, the contract)."""
    from stepwise.model.vocab import Step

    return sum(
        (u.ended_at - u.started_at).total_seconds()
        for u in units
        if u.step in (Step.MIGRATE.value, Step.CONTRACT.value) and u.started_at and u.ended_at
    )
