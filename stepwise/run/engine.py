"""Execute a verified plan through ansible-runner, as parallel as the plan allows.

Units run as soon as the units they wait for are done (a DAG executor). The units are cut
into chains (`chains.py`); each chain is one ansible-playbook process, one play per unit,
started as soon as its first unit could start soon (its predecessors have started), so
Ansible's start-up overlaps the work before it. Before each play the `stepwise_gate`
callback asks the engine over a Unix socket whether the unit may start; the engine answers
when its predecessors are done and the run is not stopping (`scheduler.py`). Why this
mechanism and not one process per unit or one for everything: docs/architecture.md.

Events stream back per task and host and are mapped to units by play name. A unit is done
once its play has ended with no failed host: at the next play's start in its process, or at
the end of the process. A SIGKILL of stepwise at any moment leaves it `running`, and the
resume runs it again (or, for a once-only unit, lets its flag-file guard decide); a first
SIGINT or `stepwise abort` stops at the next safe point (`abort.py`); a second SIGINT or a
SIGTERM cut the running units and record them `interrupted`.
"""

from __future__ import annotations

import os
import threading
import time
from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from stepwise.errors import Problem, StepwiseError
from stepwise.model import Deployment
from stepwise.model.vocab import MarkerState, UnitState
from stepwise.plan.units import Unit
from stepwise.run import ansible_env
from stepwise.run.abort import AbortWatch
from stepwise.run.ansible_files import to_yaml, write_private
from stepwise.run.batch_pause import BatchPause
from stepwise.run.chains import Chain, make_chains
from stepwise.run.discover import valid_node_facts
from stepwise.run.events import Estimator, Failure, RunResult
from stepwise.run.gate import GateServer
from stepwise.run.outcome import failures_summary, record_done, run_result, task_row
from stepwise.run.render import marker_keys, render_unit, unit_hosts
from stepwise.run.run_options import EngineOptions, RunContext
from stepwise.run.scheduler import Scheduler, catch_interrupts
from stepwise.run.store.store import Store
from stepwise.run.workfiles import RunFiles
from stepwise.verify import VerifiedPlan

#: exit code of a playbook stopped at a play boundary (see callback/stepwise_gate.py)
STOPPED_RC = 75
GATE_CALLBACK_DIR = Path(__file__).resolve().parent / "ansible" / "callback"


@dataclass
class _ChainRun:
    """One chain's process, as the engine follows it."""

    chain: Chain
    index: dict[str, int]
    current: Unit | None = None
    seen: str | None = None  # the last play whose start event arrived
    alive: bool = False
    pid: int | None = None
    rc: int | None = None
    canceled: bool = False
    output: deque = field(default_factory=lambda: deque(maxlen=20))


class Engine:
    """One execution of a verified plan's pending units."""

    def __init__(
        self,
        store: Store,
        deployment: Deployment,
        plan: VerifiedPlan,
        run_id: int,
        todo: list[Unit],
        *,
        context: RunContext,
        done_before: set[str],
    ):
        self.store, self.dep, self.plan, self.run_id = store, deployment, plan, run_id
        self.cloud, self.options = context.cloud, context.options
        self.observer, self.lock = context.observer, context.lock
        self.held_signals = context.held_signals
        options = context.options
        self.todo = todo
        self.plays = {
            u.id: render_unit(
                plan, u, deployment, run_id=run_id, max_fail_percentage=options.max_fail_percentage
            )
            for u in todo
        }
        has_play = {uid: p is not None for uid, p in self.plays.items()}
        self.sched = Scheduler(
            todo, done_before, max_parallel=options.max_parallel_units, has_play=has_play
        )
        self.cond = self.sched.lock
        self.chains = make_chains(todo, has_play)
        self.runs: dict[str, _ChainRun] = {
            c.id: _ChainRun(c, {u.id: i for i, u in enumerate(c.units)}) for c in self.chains
        }
        self.launched: set[str] = set()
        self.failures: list[Failure] = []
        self.unit_failures: dict[str, list[Failure]] = {}
        self.failed_hosts: set[str] = set()
        self.pending_rows: list[dict[str, Any]] = []
        self.estimator = Estimator(todo)
        self.started_at = time.monotonic()
        self.threads: list[threading.Thread] = []
        #: chain -> its ansible-playbook wrapper and pid file (written before any process starts)
        self.wrappers: dict[str, tuple[Path, Path]] = {}
        self.all_hosts = {h for u in todo for h in unit_hosts(u, deployment)}
        self.aborts = AbortWatch(store, run_id, self.sched, self.observer)
        begun = {u.batch for u in plan.units if u.batch and u.id in done_before}
        self.pause = BatchPause(options.before_batch, self.sched, self.aborts, begun)

    # -- the main loop ---------------------------------------------------------------------
    def run(self) -> RunResult:
        self.files = RunFiles.make(self.run_id, self.options)
        try:
            self.files.write(self.dep, self.plan, self.run_id, self.options)
            # every chain's wrapper before any chain's process starts: a file being written
            # while another thread forks is held open for writing by that child until its exec,
            # and executing it then fails with ETXTBSY ("Text file busy", seen in CI)
            self.wrappers = {
                c.id: ansible_env.write_wrapper(self.files.pdd / c.id / "bin", detached=c.detached)
                for c in self.chains
            }
            server = self._start_gate_server()
        except BaseException as exc:
            self.files.discard(self.options)
            if isinstance(exc, OSError):
                raise StepwiseError(
                    Problem(
                        f"cannot prepare the run's files: {exc.strerror or exc}",
                        file=getattr(exc, "filename", None),
                        hint="check the disk space and permissions of the work directory",
                    )
                ) from None
            raise
        restore = catch_interrupts(self.sched, self.held_signals)
        try:
            with self.cond:
                self._pass(self.sched.pass_barriers())
                while True:
                    self.aborts.poll()
                    self._launch()
                    if self.sched.finished() and not any(r.alive for r in self.runs.values()):
                        break
                    self.cond.wait(0.5)
            for t in self.threads:
                t.join()
        finally:
            self.files.remove_secrets()
            restore()
            server.close()
            with self.cond:
                self._flush()
            self.files.finish(self.options)
        return self._result()

    def _launch(self) -> None:
        """Start the process of every chain the scheduler says should start now."""
        for c in self.chains:
            if c.id in self.launched:
                continue
            if not self.sched.should_launch(c, [r.chain for r in self.runs.values() if r.alive]):
                continue
            self.launched.add(c.id)
            r = self.runs[c.id]
            r.alive = True
            if c.detached:
                # a once-only unit has no gate: it starts now, and nothing may cut it
                self._start_unit(r, c.first)
            t = threading.Thread(
                target=self._run_chain, args=(r,), name=f"stepwise-{c.id}", daemon=True
            )
            self.threads.append(t)
            t.start()

    # -- one chain's process ---------------------------------------------------------------
    def _run_chain(self, r: _ChainRun) -> None:
        c = r.chain
        d = self.files.pdd / c.id
        (d / "project").mkdir(parents=True)
        playbook = d / "project" / "stepwise.yml"
        playbook.write_text(to_yaml([self.plays[u.id] for u in c.units]))
        wrapper, pidfile = self.wrappers[c.id]
        env = ansible_env.ansible_env(
            self.options.env,
            plugin_dirs=self.options.connector.plugin_dirs if self.options.connector else (),
        )
        env["ANSIBLE_CALLBACK_PLUGINS"] = os.pathsep.join(
            filter(None, [str(GATE_CALLBACK_DIR), env.get("ANSIBLE_CALLBACK_PLUGINS")])
        )
        if not c.detached:
            env["STEPWISE_GATE_SOCKET"] = str(self.socket_path)
            env["STEPWISE_CHAIN"] = c.id
        forks = max(1, min(self.options.forks, max(len(unit_hosts(u, self.dep)) for u in c.units)))
        book = ansible_env.Playbook(
            directory=d,
            playbook=playbook,
            inventory=self.files.inventory_path,
            wrapper=wrapper,
            var_files=(self.files.extravars_path, *self.files.secret_files),
            env=env,
            forks=forks,
            verbosity=self.options.verbosity,
        )
        rc = 1
        try:
            runner = ansible_env.run_playbook(
                book,
                lambda ev: self._event(r, ev, pidfile),
                cancel=lambda: self._cancel(r),
            )
            rc = int(runner.rc if runner.rc is not None else 1)
            canceled = runner.status == "canceled"
        except Exception as exc:  # noqa: BLE001 - a broken Ansible must end the chain, not the run loop
            r.output.append(self.options.redact(f"could not run ansible-playbook: {exc}"))
            canceled = False
        with self.cond:
            r.rc, r.canceled = rc, canceled
            if r.pid and self.lock is not None:
                self.lock.remove_ansible(r.pid)
            self._chain_ended(r)
            r.alive = False
            self.cond.notify_all()

    def _cancel(self, r: _ChainRun) -> bool:
        stop = self.sched.stop
        return bool(stop and stop.interrupted and not r.chain.detached)

    # -- ansible-runner events (runner threads) ----------------------------------------------
    def _event(self, r: _ChainRun, ev: Mapping[str, Any], pidfile: Path) -> bool:
        with self.cond:
            if r.pid is None and pidfile.exists():
                try:
                    r.pid = int(pidfile.read_text().strip())
                except ValueError:
                    pass
                if r.pid and self.lock is not None:
                    self.lock.add_ansible(r.pid, detached=r.chain.detached)
            kind = ev.get("event", "")
            data = ev.get("event_data") or {}
            if kind == "playbook_on_play_start":
                self._play_start(r, str(data.get("play") or data.get("name") or ""))
            elif kind in (
                "runner_on_ok",
                "runner_on_failed",
                "runner_on_unreachable",
                "runner_on_skipped",
            ):
                self._task(r, kind, data)
            elif kind == "playbook_on_stats":
                self._finish_current(r)
            elif ev.get("stdout"):
                r.output.append(self.options.redact(str(ev["stdout"])))
            if self.pending_rows and len(self.pending_rows) > 200:
                self._flush()
            self.cond.notify_all()
        # our store keeps what matters: ansible-runner need not write every event to disk
        return False

    def _play_start(self, r: _ChainRun, name: str) -> None:
        # the previous play of this process ended (a detached unit was marked running at
        # launch: its own start event ends nothing)
        if r.current is not None and r.current.id != name:
            self._finish_current(r)
        r.seen = name

    def _task(self, r: _ChainRun, kind: str, data: Mapping[str, Any]) -> None:
        row, message = task_row(self.run_id, kind, data, self.options.redact, r.current)
        self.pending_rows.append(row)
        unit_id, host, task, status = row["unit_id"], row["host"], row["task"], row["status"]
        res = data.get("res") or {}
        if status.succeeded and isinstance(res.get("stepwise_facts"), dict):
            facts = valid_node_facts(res["stepwise_facts"])
            if facts is None:  # what a node reports is data: validated, never trusted
                r.output.append(f"{host}: ignored facts that are not valid")
            else:
                self.store.update_node_facts(self.cloud, host, facts)
        if status.failed:
            f = Failure(unit_id, host, task, message)
            self.failures.append(f)
            self.unit_failures.setdefault(unit_id, []).append(f)
        if "STEPWISE_ALREADY_DONE" in str(res.get("stdout", "")):
            r.output.append(f"{unit_id}: already completed by this run before it was interrupted")
        self.observer.task_result(unit_id, host, task, status)

    # -- the gate (socket threads) -----------------------------------------------------------
    def _start_gate_server(self) -> GateServer:
        self.socket_path = self.files.secret_dir / "gate.sock"
        return GateServer(self.socket_path, self._gate)

    def _gate(self, chain_id: str, unit_id: str) -> str:
        """Block until `unit_id` (the next play of `chain_id`) may start: 'go' or 'stop'."""
        with self.cond:
            r = self.runs.get(chain_id)
            if r is None or unit_id not in r.index:
                return "stop"
            u = r.chain.units[r.index[unit_id]]
            while True:
                # wait until the play's start event arrived: the previous play's results are in
                if r.seen == unit_id and r.current is None:
                    if not self.sched.allowed(unit_id):
                        return "stop"
                    if self.sched.may_start(unit_id) and self.pause.let_go(u):
                        self._start_unit(r, u)
                        return "go"
                self.cond.wait(1.0)

    def _start_unit(self, r: _ChainRun, u: Unit) -> None:
        r.current = u
        self.sched.mark_running(u.id)
        self.estimator.unit_started(u.id)
        self.store.set_unit(
            self.run_id, u.id, UnitState.RUNNING, message="", started=True, count_attempt=True
        )
        if not u.idempotent:
            for key in marker_keys(u):
                self.store.set_marker(self.cloud, key, self.run_id, u.id, MarkerState.STARTED)
        self.observer.unit_started(u)
        self.cond.notify_all()

    # -- unit ends ---------------------------------------------------------------------------
    def _finish_current(self, r: _ChainRun) -> None:
        u = r.current
        if u is None:
            return
        r.current = None
        self._flush()
        fails = self.unit_failures.get(u.id, [])
        hosts = unit_hosts(u, self.dep)
        failed_hosts = sorted({f.host for f in fails})
        tolerated = (
            self.options.max_fail_percentage > 0
            and failed_hosts
            and len(failed_hosts) * 100 <= self.options.max_fail_percentage * max(1, len(hosts))
        )
        if fails and not tolerated:
            self._end_unit(u, UnitState.FAILED, failures_summary(fails))
        else:
            if tolerated:
                self.failed_hosts.update(failed_hosts)
                write_private(
                    self.files.failed_hosts_file, "\n".join(sorted(self.failed_hosts)) + "\n"
                )
                self._check_threshold()
            self._end_unit(
                u,
                UnitState.DONE,
                f"failed on {', '.join(failed_hosts)} (tolerated)" if tolerated else "",
            )

    def _chain_ended(self, r: _ChainRun) -> None:
        """The chain's process ended: close its running unit by how it ended; units it never
        started stop the run (unless it was stopped on purpose before them)."""
        self._close_current(r)
        left = [u.id for u in r.chain.units if self.sched.state[u.id] is UnitState.PENDING]
        if left and (self.sched.stop is None or self.sched.unfinished_business(left)):
            tail = " ".join(line.strip() for line in list(r.output)[-6:] if line.strip())
            self.sched.request_stop(
                f"ansible-playbook ended (rc={r.rc}) before running {', '.join(left)}"
                + (f": {tail}" if tail else "")
            )
            self.failures.append(
                Failure(left[0], "-", "ansible-playbook", f"rc={r.rc}: {tail or 'no output'}")
            )

    def _close_current(self, r: _ChainRun) -> None:
        u = r.current
        if u is None:
            return
        if r.canceled:
            r.current = None
            self._end_unit(
                u, UnitState.INTERRUPTED, "interrupted by the operator; runs again from its start"
            )
            return
        if r.rc == 0 or self.unit_failures.get(u.id):
            self._finish_current(r)
            return
        r.current = None
        tail = " ".join(line.strip() for line in list(r.output)[-6:] if line.strip())
        self._end_unit(
            u,
            UnitState.FAILED,
            f"ansible-playbook stopped (rc={r.rc}) during the unit" + (f": {tail}" if tail else ""),
        )

    def _end_unit(self, u: Unit, state: UnitState, message: str) -> None:
        self.store.set_unit(self.run_id, u.id, state, message=message, ended=True)
        passed = self.sched.mark(u.id, state)
        if state is UnitState.DONE:
            self.estimator.finished(u.id)
            self._after_done(u)
        elif state is UnitState.FAILED:
            self.sched.request_stop(f"unit {u.id} ({u.step}) failed")
        self.observer.unit_finished(u, state, message)
        self._pass(passed)
        self.cond.notify_all()

    def _pass(self, barriers: list[str]) -> None:
        for uid in barriers:
            self.store.set_unit(
                self.run_id, uid, UnitState.DONE, message="barrier passed", ended=True
            )
            u = self.sched.by_id[uid]
            if u.marks:
                self.store.record_progress(self.cloud, self.run_id, uid, u.marks)
            self.observer.unit_finished(self.sched.by_id[uid], UnitState.DONE, "")

    def _check_threshold(self) -> None:
        if len(self.failed_hosts) * 100 > self.options.max_fail_percentage * max(
            1, len(self.all_hosts)
        ):
            self.sched.request_stop(
                f"{len(self.failed_hosts)} of {len(self.all_hosts)} hosts failed, more than "
                f"--max-fail-percentage {self.options.max_fail_percentage}"
            )

    def _after_done(self, unit: Unit) -> None:
        record_done(
            self.store, self.cloud, self.run_id, unit, self.plan, self.dep, self.failed_hosts
        )

    def _flush(self) -> None:
        rows, self.pending_rows = self.pending_rows, []
        self.store.add_task_results(rows)

    # -- the outcome -----------------------------------------------------------------------------
    def _result(self) -> RunResult:
        return run_result(
            self.store,
            self.plan,
            self.run_id,
            len(self.todo),
            self.sched.stop,
            self.failures,
            time.monotonic() - self.started_at,
            self.options.continue_command,
        )


def execute(
    store: Store,
    deployment: Deployment,
    plan: VerifiedPlan,
    run_id: int,
    todo: list[Unit],
    *,
    context: RunContext,
    done_before: set[str] | None = None,
) -> RunResult:
    """Run `todo` (the pending units of run `run_id`, in plan order) and record the outcome.
    Only a VerifiedPlan runs: what runs is exactly what the verifier checked."""
    if not isinstance(plan, VerifiedPlan):
        raise StepwiseError(
            Problem(
                "refusing to run a plan that was not verified",
                hint="plan with stepwise.plan.make_plan "
                "and verify with stepwise.verify.verify_plan",
            )
        )
    ids = {u.id for u in plan.units}
    if any(u.id not in ids for u in todo):
        raise StepwiseError(Problem("refusing to run units that are not in the verified plan"))
    done = set(done_before if done_before is not None else ids - {u.id for u in todo})
    return Engine(store, deployment, plan, run_id, todo, context=context, done_before=done).run()


__all__ = ["EngineOptions", "RunContext", "execute", "STOPPED_RC"]
