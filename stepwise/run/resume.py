"""Run a plan: take the cloud's lock, start or resume the run in the store, refuse what must
not happen again, execute what is left.

A run is identified by its command (workflow, stage, plane, limit, tags): issuing the same
command after a failure or a kill continues that run after its last completed unit, with the
plan recorded when it started (so new facts do not reshuffle a half-done upgrade). Completed
units run again only when asked (`rerun`, or `fresh` for a new run); a once-only unit never
runs twice, whatever is asked.
"""

from __future__ import annotations

import json
import os
import socket
from dataclasses import dataclass, field
from pathlib import Path
from typing import Sequence

from stepwise.errors import InputError, Problem, UnsafePlanError
from stepwise.model import Deployment
from stepwise.plan.units import Plan, Unit
from stepwise.run.engine import EngineOptions, execute
from stepwise.run.events import NullObserver, Observer, RunResult
from stepwise.run.lock import DbLock, RunLock
from stepwise.run.render import flag_hosts, flag_name, marker_keys, DEFAULT_FLAG_DIR
from stepwise.run.store.store import Store

KEY_PARAMS = ("stage", "plane", "limit", "tags", "skip_tags")


def run_key(plan: Plan) -> str:
    """What makes two invocations "the same command" for resume."""
    params = {k: plan.params.get(k) for k in KEY_PARAMS if plan.params.get(k) not in (None, [], "")}
    return json.dumps({"workflow": plan.workflow, **params}, sort_keys=True)


def lock_path_for(deployment: Deployment, cloud: str) -> Path:
    base = Path(deployment.path).resolve().parent if deployment.path != "<memory>" else Path.cwd()
    return base / ".stepwise" / f"{cloud}.lock"


@dataclass
class RunRequest:
    """Everything a run needs; the CLI fills it in."""

    store: Store
    deployment: Deployment
    plan: Plan
    cloud: str = ""
    lock_path: Path | None = None
    command: str = ""
    options: EngineOptions = field(default_factory=EngineOptions)
    fresh: bool = False
    rerun: Sequence[str] = ()
    observer: Observer | None = None


def run_plan(req: RunRequest) -> RunResult:
    """Start or resume the run of `req.plan`; returns how it ended (never raises for a failed
    task: that is a result; raises for refusals before anything ran)."""
    cloud = req.cloud or req.deployment.name
    observer = req.observer or NullObserver()
    lock_path = req.lock_path or lock_path_for(req.deployment, cloud)
    with RunLock.acquire(lock_path, cloud, req.command) as lock:
        store = req.store
        db_lock = DbLock(store.engine, cloud).acquire(lambda: _db_holder(store, cloud))
        try:
            return _run_locked(req, store, cloud, lock, observer)
        finally:
            db_lock.release()


def _db_holder(store: Store, cloud: str) -> str:
    runs = [r for r in store.runs(cloud, 5) if r.status == "running"]
    if not runs:
        return "holder unknown"
    r = runs[0]
    return f"{r.user}@{r.host} pid {r.pid}, run {r.id}, running `{r.command}`"


def _run_locked(req: RunRequest, store: Store, cloud: str, lock: RunLock, observer: Observer) -> RunResult:
    store.mark_interrupted(cloud)
    key = run_key(req.plan)
    prev = None if req.fresh else store.resumable(cloud, key)
    plan = req.plan
    if prev is not None and prev.plan.get("units"):
        plan = Plan.from_json(prev.plan)
        _check_same_cloud(plan, req.deployment)
        run_id = prev.id
        store.reopen_run(run_id, os.getpid(), user=lock.info["user"], host=socket.gethostname(),
                         command=req.command)
    else:
        run_id = store.create_run(cloud, plan.workflow, key, req.command, dict(plan.params), plan.to_json(),
                                  [u.to_json() for u in plan.units], user=lock.info["user"],
                                  host=socket.gethostname(), pid=os.getpid())
    states = store.unit_states(run_id)
    _apply_rerun(store, plan, run_id, states, req.rerun)
    todo = [u for u in plan.units if states.get(u.id) not in ("done", "skipped")]
    try:
        _refuse_repeats(store, cloud, run_id, todo)
    except UnsafePlanError as exc:
        store.finish_run(run_id, "failed", str(exc))
        raise
    observer.run_started(run_id, list(plan.units), todo, prev is not None)
    if not todo:
        store.finish_run(run_id, "done", "nothing left to do")
        result = RunResult(run_id, "nothing", "every unit of this run is already done", resumed=prev is not None,
                           units_total=len(plan.units), units_done=len(plan.units),
                           units_reused=len(plan.units))
        observer.run_finished(result)
        return result
    try:
        result = execute(store, req.deployment, plan, run_id, todo, cloud=cloud, options=req.options,
                         observer=observer, lock=lock)
    except KeyboardInterrupt:
        store.finish_run(run_id, "interrupted", "interrupted by the operator")
        raise
    result.resumed = prev is not None
    result.stale_lock = lock.stale
    store.finish_run(run_id, "done" if result.ok else "failed", result.message)
    observer.run_finished(result)
    return result


def _check_same_cloud(plan: Plan, deployment: Deployment) -> None:
    unknown = sorted({n for u in plan.units for n in u.nodes if n not in deployment.node_by_name})
    if unknown:
        raise InputError(Problem(f"the unfinished run to resume names nodes the deployment no longer has: "
                                 f"{', '.join(unknown[:5])}", file=deployment.path,
                                 hint="restore the deployment file, or start over with --fresh"))


def _apply_rerun(store: Store, plan: Plan, run_id: int, states: dict[str, str], rerun: Sequence[str]) -> None:
    if not rerun:
        return
    ids = {u.id: u for u in plan.units}
    problems = []
    chosen: list[str] = []
    for r in rerun:
        if r not in ids:
            problems.append(Problem(f"--rerun: no unit '{r}' in this run", field="--rerun",
                                    hint="unit ids are shown by `stepwise history --run N`"))
        elif not ids[r].idempotent:
            problems.append(Problem(f"--rerun: unit '{r}' ({ids[r].step}) must never run twice", field="--rerun"))
        else:
            chosen.append(r)
    if problems:
        raise InputError(problems)
    store.set_units(run_id, chosen, "pending", "asked to run again")
    for r in chosen:
        states[r] = "pending"


def _refuse_repeats(store: Store, cloud: str, run_id: int, todo: list[Unit]) -> None:
    """A once-only unit already attempted by another run (or another unit) is refused; in this
    very run, its flag-file guard on the node decides (skip if it finished, refuse if it broke)."""
    problems = []
    for u in todo:
        if u.idempotent:
            continue
        for key, host in zip(marker_keys(u), flag_hosts(u)):
            m = store.marker(cloud, key)
            if m is None or (m.run_id == run_id and m.unit_id == u.id):
                continue
            problems.append(Problem(
                f"{u.step} on {host} already {'ran' if m.state == 'done' else 'started'} in run {m.run_id} "
                f"(unit {m.unit_id}); it must never run twice",
                hint=f"the target holds the data now. Only if you know it must be redone: remove the flag file "
                     f"{DEFAULT_FLAG_DIR}/{flag_name(u)} (or under stepwise_flag_dir) on {host} and clear the record "
                     f"with `stepwise forget {key}`"))
    if problems:
        raise UnsafePlanError(problems)
