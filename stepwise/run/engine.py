"""Execute the pending units of a run through ansible-runner, recording everything.

All pending units go into one playbook, one play per unit in the plan's topological order,
and one ansible-playbook process runs it: per-unit processes would cost a second or more
each, which is what the "at most 1.15x plain ansible-playbook" bar forbids. Events stream
back per task and host; the play name is the unit id. A unit is recorded `done` only once
its play has ended with no failed host (at the next play's start or the playbook's end),
so a SIGKILL at any moment leaves it `running`, and the resume runs it again (or, for a
once-only unit, lets its flag-file guard decide).
"""

from __future__ import annotations

import json
import shlex
import shutil
import tempfile
import time
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping

from stepwise.errors import Problem, StepwiseError
from stepwise.model import Deployment
from stepwise.plan.units import Plan, Unit
from stepwise.run import ansible_env
from stepwise.run.events import Estimator, Failure, NullObserver, Observer, RunResult
from stepwise.run.lock import RunLock
from stepwise.run.render import DEFAULT_FLAG_DIR, inventory, marker_keys, plan_vars, render_unit, unit_hosts
from stepwise.run.store.store import Store, now

#: what a service is doing after a unit of this step finished on its node
STATE_AFTER = {"leave": "out", "stop": "stopped", "start": "running", "rejoin": "running", "upgrade": "running",
               "system_upgrade_prepare": "stopped", "system_upgrade_run": "stopped",
               "system_upgrade_transfer_data": "stopped"}


@dataclass
class EngineOptions:
    """How to run: Ansible knobs and where to keep the working files."""

    extra_vars: Mapping[str, Any] = field(default_factory=dict)
    forks: int = 50
    max_fail_percentage: int = 0
    inventory_overrides: Mapping[str, Any] | None = None
    work_dir: Path | None = None
    keep_work_dir: bool = False
    continue_command: str = ""
    verbosity: int = 0
    env: Mapping[str, str] = field(default_factory=dict)


class _Tracker:
    """Turns ansible-runner events into unit states, task results and observer calls."""

    def __init__(self, store: Store, cloud: str, run_id: int, plan: Plan, deployment: Deployment,
                 order: list[tuple[Unit, dict | None]], observer: Observer, lock: RunLock | None,
                 pidfile: Path | None):
        self.store, self.cloud, self.run_id, self.plan, self.dep = store, cloud, run_id, plan, deployment
        self.order = order
        self.pos = {u.id: i for i, (u, _) in enumerate(order)}
        self.observer, self.lock, self.pidfile = observer, lock, pidfile
        self.current: Unit | None = None
        self.next_index = 0  # first unit of `order` not yet finished or started
        self.failed_hosts: dict[str, str] = {}  # host -> unit where it failed
        self.unit_failures: dict[str, list[Failure]] = {}
        self.pending_rows: list[dict[str, Any]] = []
        self.last_flush = time.monotonic()
        self.done: list[str] = []
        self.failed: list[str] = []
        self.failures: list[Failure] = []
        self.output_tail: deque[str] = deque(maxlen=40)
        self.estimator = Estimator([u for u, _ in order])
        self.saw_pid = False
        self.detached = False

    # -- ansible-runner callbacks ---------------------------------------------------------
    def event(self, ev: Mapping[str, Any]) -> bool:
        if not self.saw_pid:
            self._record_pid()
        kind = ev.get("event", "")
        data = ev.get("event_data") or {}
        if kind == "playbook_on_play_start":
            self._play_start(data.get("play") or data.get("name") or "")
        elif kind in ("runner_on_ok", "runner_on_failed", "runner_on_unreachable", "runner_on_skipped"):
            self._task(kind, data)
        elif kind in ("verbose", "error", "warning", "debug") or (not kind and ev.get("stdout")):
            if ev.get("stdout"):
                self.output_tail.append(str(ev["stdout"]))
        if self.pending_rows and time.monotonic() - self.last_flush > 1.0:
            self._flush()
        # Our store keeps what matters; ansible-runner need not write every event to disk.
        return False

    def _record_pid(self) -> None:
        if self.pidfile is not None and self.pidfile.exists():
            try:
                pid = int(self.pidfile.read_text().strip())
            except ValueError:
                return
            self.saw_pid = True
            if self.lock is not None:
                self.lock.set_ansible(pid, detached=self.detached)

    def _play_start(self, name: str) -> None:
        if self.current is not None:
            self._finish(self.current)
        idx = self.pos.get(name)
        if idx is None:
            return
        # Units without a play between the last one and this one (barriers) are passed.
        self._pass_trivial(until=idx)
        unit = self.order[idx][0]
        self.current = unit
        self.next_index = idx + 1
        self.store.set_unit(self.run_id, unit.id, "running", message="", started=True, count_attempt=True)
        if not unit.idempotent:
            for key in marker_keys(unit):
                self.store.set_marker(self.cloud, key, self.run_id, unit.id, "started")
        self.observer.unit_started(unit)

    def _pass_trivial(self, until: int) -> None:
        for i in range(self.next_index, until):
            u, play = self.order[i]
            if play is None:
                self._mark_done(u, "nothing to run (barrier or no tasks for this step)")
        self.next_index = max(self.next_index, until)

    def _task(self, kind: str, data: Mapping[str, Any]) -> None:
        unit_id = data.get("play") or (self.current.id if self.current else "")
        host = str(data.get("host") or data.get("remote_addr") or "")
        task = str(data.get("task") or "")
        res = data.get("res") or {}
        status = {"runner_on_ok": "changed" if res.get("changed") else "ok", "runner_on_failed": "failed",
                  "runner_on_unreachable": "unreachable", "runner_on_skipped": "skipped"}[kind]
        ignored = bool(data.get("ignore_errors")) and kind == "runner_on_failed"
        if ignored:
            status = "ignored"
        message = ""
        if status in ("failed", "unreachable", "ignored"):
            message = _result_message(res)
        self.pending_rows.append({"run_id": self.run_id, "unit_id": unit_id, "host": host, "task": task,
                                  "status": status, "duration_s": float(data.get("duration") or 0.0),
                                  "message": message[:4000], "at": now()})
        if status in ("ok", "changed") and isinstance(res.get("stepwise_facts"), dict):
            self.store.update_node_facts(self.cloud, host, res["stepwise_facts"])
        if status in ("failed", "unreachable"):
            f = Failure(unit_id, host, task, message)
            self.failures.append(f)
            self.unit_failures.setdefault(unit_id, []).append(f)
            self.failed_hosts.setdefault(host, unit_id)
        self.observer.task_result(unit_id, host, task, status)

    # -- unit completion ------------------------------------------------------------------
    def _finish(self, unit: Unit) -> None:
        self._flush()
        fails = self.unit_failures.get(unit.id, [])
        hosts = unit_hosts(unit, self.dep)
        blocked = [h for h in hosts if h in self.failed_hosts and self.failed_hosts[h] != unit.id]
        if fails:
            msg = "; ".join(str(f) for f in fails[:5]) + (f" (+{len(fails) - 5} more)" if len(fails) > 5 else "")
            self._mark_failed(unit, msg)
        elif blocked:
            self._mark_failed(unit, "not run on " + ", ".join(f"{h} (failed in {self.failed_hosts[h]})"
                                                              for h in blocked))
        else:
            self._mark_done(unit, "")
        self.current = None

    def _mark_done(self, unit: Unit, message: str) -> None:
        self.store.set_unit(self.run_id, unit.id, "done", message=message, ended=True)
        self.done.append(unit.id)
        self.estimator.finished(unit.id)
        try:
            self._after_done(unit)
        except StepwiseError:
            pass  # bookkeeping of versions must never fail a finished unit
        self.observer.unit_finished(unit, "done", message)

    def _mark_failed(self, unit: Unit, message: str) -> None:
        self.store.set_unit(self.run_id, unit.id, "failed", message=message, ended=True)
        self.failed.append(unit.id)
        self.observer.unit_finished(unit, "failed", message)

    def _after_done(self, unit: Unit) -> None:
        if not unit.idempotent:
            for key in marker_keys(unit):
                self.store.set_marker(self.cloud, key, self.run_id, unit.id, "done")
        hosts = unit.nodes or unit_hosts(unit, self.dep)
        pairs = [(n, s) for n in hosts for s in unit.services_on(n) if s in self.dep.catalog]
        if unit.step == "packages":
            versions: dict[tuple[str, str], str | None] = {}
            for n, s in pairs:
                pkgs = self.dep.catalog[s].packages
                v = self.store.installed_version(self.cloud, n, pkgs[0]) if pkgs else None
                versions[(n, s)] = v or self.plan.params.get("target_release") or "updated"
            self.store.set_services(self.cloud, pairs, versions=versions, run_id=self.run_id)
        if unit.step in STATE_AFTER and pairs:
            self.store.set_services(self.cloud, pairs, state=STATE_AFTER[unit.step], run_id=self.run_id)
        if unit.step == "system_upgrade_run":
            facts = self.store.facts(self.cloud) or {"nodes": {}}
            changed = {}
            for n in unit.nodes:
                os_ = dict((facts["nodes"].get(n) or {}).get("os") or {})
                if os_.get("target"):
                    os_["major"] = os_["target"]
                    changed[n] = {"os": os_, "packages": (facts["nodes"].get(n) or {}).get("packages", {})}
            if changed:
                self.store.save_facts(self.cloud, {"nodes": changed})

    def finish(self, rc: int, until: int) -> None:
        """A playbook ended: close its last play; if all went well pass the barriers up to
        `until` (the end of that playbook's units)."""
        if self.current is not None:
            self._finish(self.current)
        if rc == 0 and not self.failed:
            self._pass_trivial(until=until)
        self._flush()

    def _flush(self) -> None:
        rows, self.pending_rows = self.pending_rows, []
        self.store.add_task_results(rows)
        self.last_flush = time.monotonic()


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


def _segments(order: list[tuple[Unit, dict | None]]) -> list[tuple[int, int, bool]]:
    """Split the units into playbooks: (start, end, detached). A once-only unit gets its own,
    detached one, so a kill of stepwise cannot cut it in half (see ansible_env.WRAPPER_DETACHED)."""
    out: list[tuple[int, int, bool]] = []
    start = 0
    for i, (u, play) in enumerate(order):
        if play is not None and not u.idempotent:
            if start < i:
                out.append((start, i, False))
            out.append((i, i + 1, True))
            start = i + 1
    if start < len(order):
        out.append((start, len(order), False))
    return out


def execute(store: Store, deployment: Deployment, plan: Plan, run_id: int, todo: list[Unit], *,
            cloud: str, options: EngineOptions, observer: Observer | None = None,
            lock: RunLock | None = None) -> RunResult:
    """Run `todo` (pending units of run `run_id`, in plan order) and record the outcome."""
    observer = observer or NullObserver()
    started = time.monotonic()
    order = [(u, render_unit(plan, u, deployment, run_id=run_id, max_fail_percentage=options.max_fail_percentage))
             for u in todo]
    work = Path(options.work_dir) if options.work_dir else Path(tempfile.mkdtemp(prefix="stepwise-run-"))
    work.mkdir(parents=True, exist_ok=True)
    pdd = Path(tempfile.mkdtemp(prefix=f"run{run_id}-", dir=work))
    tracker = _Tracker(store, cloud, run_id, plan, deployment, order, observer, lock, None)
    inv = inventory(deployment, overrides=options.inventory_overrides)
    inv_path = ansible_env.write_inventory(pdd / "inventory" / "hosts.json", inv)
    extravars = {**plan_vars(plan, deployment), "stepwise_run_id": run_id, **dict(options.extra_vars)}
    rc = 0
    try:
        for n, (a, b, detached) in enumerate(_segments(order)):
            plays = [p for _, p in order[a:b] if p is not None]
            if plays:
                rc = _run_playbook(pdd / f"seg{n}", plays, inv_path, extravars, options, tracker, lock, detached)
            tracker.finish(rc, until=b)
            if rc != 0 or tracker.failed:
                break
        if lock is not None:
            lock.set_ansible(None)
    finally:
        if tracker.pending_rows:
            tracker._flush()
        if not options.keep_work_dir:
            shutil.rmtree(pdd, ignore_errors=True)
            if not options.work_dir:
                shutil.rmtree(work, ignore_errors=True)
    return _result(store, run_id, plan, todo, tracker, rc, time.monotonic() - started, options)


def _run_playbook(pdd: Path, plays: list[dict], inv_path: Path, extravars: Mapping[str, Any],
                  options: EngineOptions, tracker: _Tracker, lock: RunLock | None, detached: bool) -> int:
    import ansible_runner

    (pdd / "project").mkdir(parents=True)
    playbook = pdd / "project" / "stepwise.yml"
    playbook.write_text(json.dumps(plays, indent=1, default=str))
    wrapper, pidfile = ansible_env.write_wrapper(pdd / "bin", detached=detached)
    tracker.pidfile, tracker.saw_pid, tracker.detached = pidfile, False, detached
    try:
        runner = ansible_runner.run(
            private_data_dir=str(pdd), inventory=str(inv_path),
            # With our wrapper as `binary`, ansible-runner passes no playbook: give it here.
            cmdline=shlex.quote(str(playbook)),
            extravars=dict(extravars), envvars=ansible_env.ansible_env(options.env), forks=options.forks,
            binary=str(wrapper), event_handler=tracker.event, quiet=True, suppress_env_files=True,
            verbosity=options.verbosity or None,
            settings={"suppress_ansible_output": True, "pexpect_timeout": 0.2, "pexpect_use_poll": True},
        )
    except (OSError, RuntimeError) as exc:
        raise describe_ansible_error(exc) from None
    rc = int(runner.rc if runner.rc is not None else 1)
    if runner.status in ("canceled", "timeout"):
        rc = rc or 1
    return rc


def _result(store: Store, run_id: int, plan: Plan, todo: list[Unit], tracker: _Tracker, rc: int,
            elapsed: float, options: EngineOptions) -> RunResult:
    states = store.unit_states(run_id)
    pending = [u.id for u in plan.units if states.get(u.id) not in ("done", "skipped")]
    failed = [u for u in pending if states.get(u) == "failed"]
    result = RunResult(run_id=run_id, status="done", units_total=len(plan.units),
                       units_done=len(plan.units) - len(pending), units_failed=failed, units_pending=pending,
                       units_reused=len(plan.units) - len(todo), failures=tracker.failures, elapsed_s=elapsed,
                       continue_command=options.continue_command)
    if pending:
        result.status = "failed"
        where = sorted({f.host for f in tracker.failures})
        if tracker.failures:
            first = tracker.failures[0]
            head = (f"unit {first.unit} failed on {', '.join(where)}: task '{first.task}': {first.message}")
        elif failed:
            head = f"unit {failed[0]} failed"
        else:
            tail = " ".join(line.strip() for line in list(tracker.output_tail)[-6:] if line.strip())
            head = f"ansible-playbook stopped (rc={rc}) before finishing the plan" + (f": {tail}" if tail else "")
        result.message = f"{head}. {result.units_done} of {result.units_total} units done, {len(pending)} left."
        if options.continue_command:
            result.message += f" Fix the cause, then continue with: {options.continue_command}"
    return result


def describe_ansible_error(exc: Exception) -> StepwiseError:
    return StepwiseError(Problem(f"could not start Ansible: {exc}",
                                 hint="check that ansible-core and ansible-runner are installed in stepwise's environment"))


__all__ = ["EngineOptions", "execute", "DEFAULT_FLAG_DIR"]
