"""Run a workflow: plan and verify it, take the cloud's lock, start, resume or refuse, execute.

A run is identified by its command (workflow and selection). Issuing the same command after
a failure, an interrupt, an abort or a kill continues that run after its last completed unit.
The plan is never read back from the store to be executed: it is rebuilt from the deployment, the
catalog and the facts recorded when the run started, verified again, and compared with the
stored one; any difference is refused with what differs. Issuing a command whose run
finished does nothing ("nothing to do"); `--fresh` starts over after a confirmation that
names what will run again; `--rerun UNIT` runs completed units again (never a once-only one).
Every refusal happens before anything is recorded.
"""

from __future__ import annotations

import json
import os
import socket
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from stepwise.errors import (
    InputError,
    InterruptedBeforeStart,
    Problem,
    StepwiseError,
    UnsafePlanError,
)
from stepwise.model import Deployment
from stepwise.model.facts import NO_FACTS, Facts, facts_from_dict, facts_to_dict
from stepwise.model.vocab import MarkerState, RunState, UnitState, Workflow
from stepwise.paths import state_dir
from stepwise.plan import PLAN_VARIABLES
from stepwise.plan.selection import Selection
from stepwise.plan.stored import check_plan_doc
from stepwise.plan.units import Plan, Unit
from stepwise.run.engine import execute
from stepwise.run.events import Observer, RunResult
from stepwise.run.lock import DbLock, RunLock
from stepwise.run.plan_match import plan_difference, same_units
from stepwise.run.render import DEFAULT_FLAG_DIR, FLAG_VAR, flag_hosts, flag_name, marker_keys
from stepwise.run.run_options import EngineOptions, RunContext
from stepwise.run.scheduler import interrupts_held
from stepwise.run.store.store import RunInfo, RunOrigin, Store
from stepwise.verify import VerifiedPlan, plan_verified, verify_plan
from stepwise.verify.downtime import refuse_unaccepted_downtime

KEY_PARAMS = ("stage", "plane", "limit", "tags", "skip_tags", "external", "of_run")


def run_key(workflow: Workflow | str, selection: Selection) -> str:
    """What makes two invocations "the same command" for resume."""
    params = {
        k: v for k, v in selection.params().items() if k in KEY_PARAMS and v not in (None, [], "")
    }
    return json.dumps({"workflow": str(Workflow(workflow)), **params}, sort_keys=True)


def lock_path_for(deployment: Deployment, cloud: str) -> Path:
    return state_dir(deployment.path) / f"{cloud}.lock"


@dataclass
class RunRequest:
    """Everything a run needs; the CLI fills it in."""

    store: Store
    deployment: Deployment
    workflow: Workflow | str
    selection: Selection = field(default_factory=Selection)
    facts: Facts = NO_FACTS
    #: plan variables every task sees (target_release)
    variables: Mapping[str, Any] = field(default_factory=dict)
    cloud: str = ""
    lock_path: Path | None = None
    #: the command line as it may be recorded and shown (secrets masked)
    command: str = ""
    options: EngineOptions = field(default_factory=EngineOptions)
    fresh: bool = False
    rerun: Sequence[str] = ()
    observer: Observer | None = None
    #: asked before anything changes ("Run the update: 50 units on 8 nodes"); raises to decline
    confirm: Callable[[str], None] | None = None
    #: the plan from `facts`, if the caller made and verified it already (to refuse bad input
    #: before opening anything); a resume rebuilds its own
    plan: VerifiedPlan | None = None
    #: how plans are made (default: the workflow's planner with `selection`); a resume calls
    #: it again with the recorded facts. Whatever it returns is verified before it runs.
    planner: Callable[[Deployment, Facts], Plan] | None = None
    #: the operator accepted the downtime windows the cloud's instance counts force
    #: (`--accept-downtime`); without it such a plan is refused
    accept_downtime: bool = False
    #: the preflight before the first unit (`preflight.py`): True runs it and refuses the run
    #: on a failed check, False is the operator's --skip-preflight (recorded in the run's
    #: params), None asks nothing (the tests' and benchmarks' own runs)
    preflight: bool | None = None


def plan_run(req: RunRequest, facts: Facts) -> VerifiedPlan:
    """The plan of the request's command from `facts`, verified: the only thing that runs."""
    if req.planner is not None:  # tests' and benchmarks' own plans, taken as they are
        return verify_plan(req.planner(req.deployment, facts), req.deployment)
    return plan_verified(
        req.workflow, req.deployment, facts, req.selection, variables=req.variables
    )


def run_plan(req: RunRequest) -> RunResult:
    """Start, resume or refuse the run of the request's command; returns how it ended (a failed
    task is a result, not an exception). Raises for refusals, before anything is recorded."""
    cloud = req.cloud or req.deployment.name
    observer = req.observer or Observer()
    lock_path = req.lock_path or lock_path_for(req.deployment, cloud)
    with RunLock.acquire(lock_path, cloud, req.command) as lock:
        db_lock = DbLock(req.store.engine, cloud).acquire(lambda: _db_holder(req.store, cloud))
        try:
            return _run_locked(req, cloud, lock, observer)
        finally:
            db_lock.release()


def _db_holder(store: Store, cloud: str) -> str:
    runs = [r for r in store.runs(cloud, 5) if r.status.live]
    if not runs:
        return "holder unknown"
    r = runs[0]
    return f"{r.user}@{r.host} pid {r.pid}, run {r.id}, running `{r.command}`"


def _run_locked(req: RunRequest, cloud: str, lock: RunLock, observer: Observer) -> RunResult:
    store = req.store
    store.mark_interrupted(cloud)  # we hold the lock: a run still "running" lost its process
    key = run_key(req.workflow, req.selection)
    prev = store.latest_run(cloud, key)
    resume = (
        prev is not None and not req.fresh and (prev.status is not RunState.DONE or bool(req.rerun))
    )
    plan = _plan_for(req, prev, resume)
    if not resume and prev is not None and _done_before(req, plan, prev):
        return _nothing(
            plan,
            observer,
            f"nothing to do: run {prev.id} of this command finished at "
            f"{prev.ended_at:%Y-%m-%d %H:%M:%S} UTC (--fresh runs it again)",
            prev.id,
        )
    if not plan.units:
        return _nothing(plan, observer, "nothing to do: no selected node has anything to change", 0)
    refuse_unaccepted_downtime(plan, req.deployment, req.accept_downtime)
    resumed = prev if resume else None
    states, rerun, todo = _pending_units(req, plan, resumed)
    _refuse_repeats(store, cloud, resumed.id if resumed else None, todo)
    if req.preflight:
        _refuse_failed_preflight(req, cloud, key, plan, todo, states)
    if req.confirm is not None:
        req.confirm(
            _what(plan, todo, req, resumed, redo=prev if req.fresh and prev is not None else None)
        )
    # from its record to its end, a Ctrl-C is never a KeyboardInterrupt that could leave it
    # half recorded: before the engine's handlers are in place it is held and then acted on
    # (abort, interrupt), after them the run has ended and is recorded as it ended
    with interrupts_held() as held:
        run_id = _record_start(req, cloud, key, plan, lock, resumed, rerun)
        observer.run_started(run_id, list(plan.units), todo, resume)
        try:
            result = execute(
                store,
                req.deployment,
                plan,
                run_id,
                todo,
                context=RunContext(cloud, req.options, observer, lock, held),
            )
        except StepwiseError:
            _forget_refused(store, run_id, states, resumed)
            raise
        except BaseException:
            store.finish_run(run_id, RunState.INTERRUPTED, "stepwise stopped unexpectedly")
            raise
        result.resumed = resume
        result.stale_lock = lock.stale
        _record_finish(store, run_id, result)
        observer.run_finished(result)
    return result


def _plan_for(req: RunRequest, prev: RunInfo | None, resume: bool) -> VerifiedPlan:
    """The plan to run: the stored run's plan rebuilt when resuming, else the one given or a
    new one; the previous run's stored plan is checked as input either way."""
    if resume:
        assert prev is not None
        plan = _rebuilt(req, prev)
    else:
        plan = req.plan if req.plan is not None else plan_run(req, req.facts)
    if prev is not None and prev.plan:
        check_plan_doc(prev.plan, f"the plan of run {prev.id} in the store")  # input, like a file
    return plan


def _record_finish(store: Store, run_id: int, result: RunResult) -> None:
    """Record the run's end: done, interrupted or aborted as it ended, any other outcome as
    failed."""
    store.finish_run(
        run_id,
        (
            result.status
            if result.status in (RunState.DONE, RunState.INTERRUPTED, RunState.ABORTED)
            else RunState.FAILED
        ),
        result.message,
    )


def _done_before(req: RunRequest, plan: VerifiedPlan, prev: RunInfo) -> bool:
    """The same command already finished this very plan (and --fresh does not ask again)."""
    return not req.fresh and prev.status is RunState.DONE and same_units(plan, prev.plan)


def _pending_units(
    req: RunRequest, plan: VerifiedPlan, resumed: RunInfo | None
) -> tuple[dict[str, UnitState], list[str], list[Unit]]:
    """The recorded unit states of the run resumed, the units asked to run again, and the
    units left to run."""
    states = req.store.unit_states(resumed.id) if resumed else {}
    rerun = _rerun_units(plan, req.rerun) if resumed else []
    if req.rerun and not resumed:
        raise InputError(
            Problem(
                "--rerun needs an earlier run of the same command",
                field="--rerun",
                hint="see `stepwise history`",
            )
        )
    for uid in rerun:
        states[uid] = UnitState.PENDING
    todo = [u for u in plan.units if not UnitState(states.get(u.id, UnitState.PENDING)).finished]
    return states, rerun, todo


def _record_start(
    req: RunRequest,
    cloud: str,
    key: str,
    plan: VerifiedPlan,
    lock: RunLock,
    resumed: RunInfo | None,
    rerun: list[str],
) -> int:
    """Record the run as started (the resumed one reopened, its units asked to run again
    pending), before anything runs; its id."""
    store = req.store
    user, host = lock.info["user"], socket.gethostname()
    if resumed is not None:
        store.reopen_run(resumed.id, os.getpid(), user=user, host=host, command=req.command)
        if rerun:
            store.set_units(resumed.id, rerun, UnitState.PENDING, "asked to run again (--rerun)")
        return resumed.id
    return store.create_run(
        cloud,
        str(plan.workflow),
        key,
        RunOrigin(req.command, user=user, host=host, pid=os.getpid()),
        _recorded_params(plan, req.preflight),
        plan.to_json(),
        [u.to_json() for u in plan.units],
        facts=facts_to_dict(req.facts),
    )


def _forget_refused(
    store: Store, run_id: int, states: Mapping[str, UnitState], resumed: RunInfo | None
) -> None:
    """Refused while preparing (a play that cannot be rendered, a work file that cannot be
    written): if no unit started, nothing happened and nothing stays recorded (a resumed run
    is left as it was)."""
    if _nothing_started(store, run_id, states):
        if resumed is not None:
            store.finish_run(run_id, resumed.status, resumed.message)
        else:
            store.discard_run(run_id)
    else:
        store.finish_run(run_id, RunState.INTERRUPTED, "stepwise stopped unexpectedly")


def _nothing_started(store: Store, run_id: int, before: Mapping[str, UnitState]) -> bool:
    """True when no unit of the run changed state since it was (re)opened."""
    now_states = store.unit_states(run_id)
    return all(now_states.get(u) == before.get(u, UnitState.PENDING) for u in now_states)


def _rebuilt(req: RunRequest, prev: RunInfo) -> VerifiedPlan:
    """The plan of an unfinished run, rebuilt from what it was made of and checked against
    the stored one: never executed from the store."""
    try:
        facts = facts_from_dict(prev.facts, req.deployment) if prev.facts else NO_FACTS
        plan = plan_run(
            replace(req, variables={**_plan_variables(prev), **dict(req.variables)}), facts
        )
    except (InputError, UnsafePlanError) as exc:
        raise InputError(
            Problem(
                f"the unfinished run {prev.id} of this command cannot be planned again: "
                f"{exc.problems[0].message}",
                hint="restore the deployment and catalog it was "
                "started with, or start over with --fresh",
            )
        ) from None
    diff = plan_difference(plan, prev.plan)
    if diff:
        was, now = prev.params.get("prestage"), plan.params.get("prestage")
        hint = (
            f"it was planned with --prestage-parallel {was} (nodes fetching at once: what "
            "--prestage-parallel gave, or --forks x --max-parallel-units when that was fewer)"
            if was
            else "it was planned with --no-prestage"
        ) + ": continue it with that, or start over with --fresh"
        raise InputError(
            Problem(
                f"the unfinished run {prev.id} of this command was planned differently: {diff}",
                hint=hint
                if was != now
                else "the deployment, the catalog or the stored plan changed since it started; "
                "restore them, or start over with --fresh",
            )
        )
    return plan


def _plan_variables(prev: RunInfo) -> dict[str, Any]:
    return {k: v for k, v in prev.params.items() if k in PLAN_VARIABLES}


def _recorded_params(plan: Plan, preflight: bool | None = None) -> dict[str, Any]:
    params = dict(plan.params)
    if preflight is False:
        params["preflight"] = "skipped"  # the operator's --skip-preflight, kept with the run
    return params


def _refuse_failed_preflight(
    req: RunRequest, cloud: str, key: str, plan: Plan, todo: Sequence[Unit], states: Mapping
) -> None:
    """The preflight on the nodes of the units left to run: a failed check refuses the run
    before anything is recorded or changed, naming the node, the check and what to do."""
    from stepwise.run.preflight import Context, mid_visit
    from stepwise.run.preflight_play import preflight

    opts = req.options
    nodes = tuple(sorted({n for u in todo for n in u.nodes}))
    with interrupts_held() as held:
        report = preflight(
            Context(req.deployment, plan, dict(opts.extra_vars), nodes, mid_visit(plan, states)),
            req.store,
            cloud,
            connector=opts.connector,
            extra_vars={**dict(opts.extra_vars), **dict(opts.secrets)},
            facts=req.facts,
            run_key=key,
        )
    if held:
        raise InterruptedBeforeStart(
            Problem(
                f"interrupted ({held[0]}) during the preflight: the run did not start, nothing "
                "was recorded or changed",
                hint="run the same command again to start it",
            )
        )
    if report.ok:
        return
    problems = [
        Problem(opts.redact(f"preflight: {f.node}: {f.check}: {f.detail}"), hint=f.todo or None)
        for f in report.failed
    ]
    problems.append(
        Problem(
            f"the run did not start: {len(report.failed)} preflight check(s) failed, "
            "nothing was changed",
            hint="fix them and run the same command again (`stepwise preflight` shows every "
            "check), or bypass them with --skip-preflight",
        )
    )
    raise UnsafePlanError(problems)


def _nothing(plan: Plan, observer: Observer, message: str, run_id: int) -> RunResult:
    result = RunResult(
        run_id,
        RunState.NOTHING,
        message,
        units_total=len(plan.units),
        units_done=len(plan.units),
        units_reused=len(plan.units),
    )
    observer.run_finished(result)
    return result


def _what(
    plan: Plan, todo: list[Unit], req: RunRequest, resumed: RunInfo | None, redo: RunInfo | None
) -> str:
    nodes = len({n for u in todo for n in u.nodes})
    text = f"{plan.workflow} of {req.deployment.name}: {len(todo)} unit(s) on {nodes} node(s)"
    if resumed is not None:
        text += f", continuing run {resumed.id} ({len(plan.units) - len(todo)} unit(s) done before)"
    if redo is not None:
        text += (
            f"; starting over: everything run {redo.id} did"
            f"{' (finished)' if redo.status is RunState.DONE else ''} runs again"
        )
    return text


def _rerun_units(plan: Plan, rerun: Sequence[str]) -> list[str]:
    ids = {u.id: u for u in plan.units}
    problems = []
    chosen: list[str] = []
    for r in rerun:
        if r not in ids:
            problems.append(
                Problem(
                    f"--rerun: no unit '{r}' in this run",
                    field="--rerun",
                    hint="unit ids are shown by `stepwise history --run N`",
                )
            )
        elif not ids[r].idempotent:
            problems.append(
                Problem(
                    f"--rerun: unit '{r}' ({ids[r].step}) must never run twice", field="--rerun"
                )
            )
        else:
            chosen.append(r)
    if problems:
        raise InputError(problems)
    return chosen


def _refuse_repeats(store: Store, cloud: str, run_id: int | None, todo: list[Unit]) -> None:
    """A once-only unit that completed in another run (or as another unit) is refused; one
    that was only attempted runs again (its flag file is written on success only); in this
    very run, its guard on the node decides (pass if it completed, refuse if broken)."""
    problems = []
    for u in todo:
        if u.idempotent:
            continue
        for key, host in zip(marker_keys(u), flag_hosts(u), strict=True):
            m = store.marker(cloud, key)
            if (
                m is None
                or m.state is not MarkerState.DONE
                or (m.run_id == run_id and m.unit_id == u.id)
            ):
                continue
            problems.append(
                Problem(
                    f"{u.step} on {host} already completed in run {m.run_id} (unit {m.unit_id}); "
                    "it must never run twice",
                    hint="the target holds the data now. Only if you know it must be redone: "
                    f"remove the flag file {DEFAULT_FLAG_DIR}/{flag_name(u)} "
                    f"(or under {FLAG_VAR}) on {host} and clear the record "
                    f"with `stepwise forget {key}`",
                )
            )
    if problems:
        raise UnsafePlanError(problems)
