"""What the engine records and reports: each task result as the store keeps it, and the
outcome of a run (what is done, what failed where, what is left and the command that
continues)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from stepwise.model import Deployment
from stepwise.model.vocab import MarkerState, RunState, ServiceState, Step, TaskStatus, UnitState
from stepwise.plan.progress import implicit_clears, implicit_marks
from stepwise.plan.units import Plan, Unit
from stepwise.run.events import Failure, RunResult
from stepwise.run.once_only import marker_keys
from stepwise.run.render import unit_hosts
from stepwise.run.store.store import Store, now

#: a task's status by the ansible-runner event that reports it
_STATUS = {
    "runner_on_failed": TaskStatus.FAILED,
    "runner_on_unreachable": TaskStatus.UNREACHABLE,
    "runner_on_skipped": TaskStatus.SKIPPED,
}


def task_row(
    run_id: int,
    kind: str,
    data: Mapping[str, Any],
    redact: Callable[[str], str],
    current: Unit | None,
) -> tuple[dict[str, Any], str]:
    """A task result event (`kind`: runner_on_ok/failed/unreachable/skipped) as the store's
    row, and its whole message (the row keeps 4,000 characters). Task names and messages are
    masked: they may quote a secret."""
    unit_id = str(data.get("play") or (current.id if current else ""))
    host = str(data.get("host") or data.get("remote_addr") or "")
    task = redact(str(data.get("task") or ""))
    res = data.get("res") or {}
    status = (
        (TaskStatus.CHANGED if res.get("changed") else TaskStatus.OK)
        if kind == "runner_on_ok"
        else _STATUS[kind]
    )
    if bool(data.get("ignore_errors")) and kind == "runner_on_failed":
        status = TaskStatus.IGNORED
    message = redact(_result_message(res)) if status.failed or status is TaskStatus.IGNORED else ""
    row = {
        "run_id": run_id,
        "unit_id": unit_id,
        "host": host,
        "task": task,
        "status": status,
        "duration_s": float(data.get("duration") or 0.0),
        "message": message[:4000],
        "at": now(),
    }
    return row, message


def _result_message(res: Mapping[str, Any]) -> str:
    parts = []
    for k in ("msg", "stderr", "module_stderr", "exception"):
        v = res.get(k)
        if v:
            parts.append(str(v).strip().splitlines()[-1] if k == "exception" else str(v).strip())
    if not parts and res.get("rc") is not None:
        parts.append(f"rc={res['rc']}")
    text = " | ".join(dict.fromkeys(parts)) or "failed"
    return text if len(text) < 600 else text[:600] + "..."


def record_done(
    store: Store,
    cloud: str,
    run_id: int,
    unit: Unit,
    plan: Plan,
    deployment: Deployment,
    failed_hosts: set[str],
) -> None:
    """What a unit that is done leaves in the store: the milestones it reached, its
    once-only markers, and what its services run and in which state on the nodes that did
    not fail."""
    marks = tuple(unit.marks) + implicit_marks(unit)
    clears = implicit_clears(unit)
    if marks or clears:
        store.record_progress(cloud, run_id, unit.id, marks, clears)
    if not unit.idempotent:
        for key in marker_keys(unit):
            store.set_marker(cloud, key, run_id, unit.id, MarkerState.DONE)
    hosts = unit.nodes or unit_hosts(unit, deployment)
    pairs = [
        (n, s)
        for n in hosts
        for s in unit.services_on(n)
        if s in deployment.catalog and n not in failed_hosts
    ]
    if unit.step is Step.PACKAGES:
        versions: dict[tuple[str, str], str | None] = {}
        for n, s in pairs:
            pkgs = deployment.catalog[s].packages
            v = store.installed_version(cloud, n, pkgs[0]) if pkgs else None
            versions[(n, s)] = v or plan.params.get("target_release") or "updated"
        store.set_services(cloud, pairs, versions=versions, run_id=run_id)
    state = unit.step.info.state_after
    if state is not None and pairs:
        store.set_services(cloud, pairs, state=state, run_id=run_id)
    if unit.step.info.node_work is not None and unit.step is Step.SYSTEM_UPGRADE_RUN:
        on_node = [(n, s) for n in hosts for s in deployment.services_on(n)]
        store.set_services(cloud, on_node, state=ServiceState.STOPPED, run_id=run_id)


def failures_summary(fails: list[Failure]) -> str:
    """A failed unit's message: its first five failures and how many more."""
    return "; ".join(str(f) for f in fails[:5]) + (
        f" (+{len(fails) - 5} more)" if len(fails) > 5 else ""
    )


def run_result(
    store: Store,
    plan: Plan,
    run_id: int,
    todo: int,
    stop: Any,
    failures: list[Failure],
    elapsed_s: float,
    continue_command: str,
) -> RunResult:
    """The outcome of a run from what the store recorded of its units: done, or why not
    (`stop`: the scheduler's reason to stop, if any), what is left and how to continue."""
    states = store.unit_states(run_id)
    all_units = plan.units
    pending = [u.id for u in all_units if not states.get(u.id, UnitState.PENDING).finished]
    failed = [u for u in pending if states.get(u) == UnitState.FAILED]
    interrupted = [u for u in pending if states.get(u) == UnitState.INTERRUPTED]
    done = len(all_units) - len(pending)
    res = RunResult(
        run_id=run_id,
        status=RunState.DONE,
        units_total=len(all_units),
        units_done=done,
        units_failed=failed,
        units_pending=pending,
        units_reused=len(all_units) - todo,
        failures=failures,
        elapsed_s=elapsed_s,
        continue_command=continue_command,
    )
    if not pending:
        return res
    if stop is not None and stop.interrupted:
        res.status = RunState.INTERRUPTED
        head = (
            f"{stop.reason}: {len(interrupted)} running unit(s) cut "
            f"({', '.join(interrupted[:5])}) and recorded interrupted; "
            "they run again from their start"
        )
    elif stop is not None and stop.aborted and not failed:
        res.status = RunState.ABORTED
        head = (
            f"{stop.reason}: stopped at a safe point (the units running and the rest of their "
            "batches finished, nothing else started)"
        )
    else:
        res.status = RunState.FAILED
        head = _why_failed(store, run_id, failures, failed)
    res.message = f"{head}. {done} of {len(all_units)} units done, {len(pending)} left."
    if continue_command:
        res.message += (
            " Continue with"
            if res.status in (RunState.INTERRUPTED, RunState.ABORTED)
            else " Fix the cause, then continue with"
        ) + f": {continue_command}"
    return res


def _why_failed(store: Store, run_id: int, failures: list[Failure], failed: list[str]) -> str:
    if failures:
        first = failures[0]
        where = sorted({f.host for f in failures})
        return (
            f"unit {first.unit} failed on {', '.join(where)}: task '{first.task}': {first.message}"
        )
    if failed:
        msg = next((u.message for u in store.units(run_id) if u.unit_id == failed[0]), "")
        return f"unit {failed[0]} failed" + (f": {msg}" if msg else "")
    return "the run stopped before finishing the plan"
