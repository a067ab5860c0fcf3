"""Abort: a run stops at its next safe point on request (`stepwise abort`, a first Ctrl-C):
the units running finish with the rest of their batches, nothing else starts, the run is
recorded `aborted`, and the same command continues it (local hosts, no lab)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from conftest import trace_lines, write_cloud
from typer.testing import CliRunner

from stepwise.cli.main import _register
from stepwise.model import load_deployment
from stepwise.model.vocab import Step, UnitState
from stepwise.plan.units import Unit
from stepwise.run.events import Observer
from stepwise.run.resume import RunRequest, run_plan
from stepwise.run.run_options import EngineOptions
from stepwise.run.scheduler import Scheduler
from stepwise.run.store import open_store

_register()
from stepwise.cli.main import app  # noqa: E402

runner = CliRunner()
#: the update of the test cloud: ctl-0 (u3-u8), then Compute#1 = cmp-0 (u10-u15), then
#: Compute#2 = cmp-1 (u16-u20); u2, u9, u21 are barriers
COMPUTE_1 = ["u10", "u11", "u12", "u13", "u14", "u15"]
COMPUTE_2 = ["u16", "u17", "u18", "u19", "u20"]


def _wait(pred, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if pred():
            return
        time.sleep(0.05)
    raise AssertionError("timed out")


def _steps(root: Path, host: str) -> list[str]:
    return [line.split()[1] for line in trace_lines(root, host)]


def _run_in_thread(req: RunRequest) -> tuple[threading.Thread, dict]:
    out: dict = {}
    t = threading.Thread(target=lambda: out.setdefault("res", run_plan(req)), daemon=True)
    t.start()
    return t, out


def test_abort_finishes_the_batch_begun_starts_nothing_else_and_continue_finishes(tmp_path):
    dep = load_deployment(write_cloud(tmp_path))
    st = open_store(f"sqlite:///{tmp_path / 'store.sqlite'}")
    cmd = "stepwise update run -d deployment.yaml"
    opts = EngineOptions(extra_vars={"step_sleep": "0.4"}, continue_command=cmd)
    t, out = _run_in_thread(RunRequest(st, dep, "update", options=opts))
    _wait(lambda: bool(st.runs(dep.name)))
    run_id = st.runs(dep.name)[0].id
    # asked while cmp-0's packages (the batch's second unit) run: its node is out of service
    _wait(lambda: st.unit_states(run_id).get("u11") == UnitState.RUNNING)
    assert st.request_abort(run_id, "aborted by the test")
    assert st.runs(dep.name)[0].status == "aborting"
    t.join(120)
    res = out["res"]
    assert res.status == "aborted", res.message
    assert "aborted by the test" in res.message and f"Continue with: {cmd}" in res.message
    states = st.unit_states(run_id)
    # the unit running and the rest of its batch finished: cmp-0 is back in service
    assert all(states[u] == UnitState.DONE for u in COMPUTE_1), states
    assert _steps(tmp_path, "cmp-0") == ["stop", "packages", "config", "migrate", "start", "verify"]
    # nothing else started
    assert all(states[u] == UnitState.PENDING for u in [*COMPUTE_2, "u21"]), states
    assert trace_lines(tmp_path, "cmp-1") == []
    run = st.run(run_id)
    assert run is not None and run.status == "aborted" and run.ended_at is not None
    # the same command continues it: the rest runs, nothing that was done runs again
    again = run_plan(RunRequest(st, dep, "update"))
    assert again.status == "done" and again.resumed and again.run_id == run_id, again.message
    assert again.units_reused == sum(1 for s in states.values() if s == UnitState.DONE)
    for host in ("ctl-0", "cmp-0"):
        steps = _steps(tmp_path, host)
        assert len(steps) == len(set(steps)), (host, steps)  # each step once
    assert _steps(tmp_path, "cmp-1") == ["stop", "packages", "config", "start", "verify"]
    assert set(st.unit_states(run_id).values()) == {UnitState.DONE}


def test_an_abort_before_a_batch_begins_starts_no_batch(tmp_path):
    dep = load_deployment(write_cloud(tmp_path))
    st = open_store(f"sqlite:///{tmp_path / 'store.sqlite'}")
    # each step longer than the engine's poll of the store (POLL_S), so the request made while
    # the validation runs is read before it ends
    opts = EngineOptions(extra_vars={"step_sleep": "2"})
    t, out = _run_in_thread(RunRequest(st, dep, "update", options=opts))
    _wait(lambda: bool(st.runs(dep.name)))
    run_id = st.runs(dep.name)[0].id
    # the validation runs: no batch has begun, so nothing more may start
    _wait(lambda: st.unit_states(run_id).get("u1") == UnitState.RUNNING)
    st.request_abort(run_id, "aborted by the test")
    t.join(120)
    assert out["res"].status == "aborted", out["res"].message
    states = st.unit_states(run_id)
    assert states["u1"] == UnitState.DONE
    assert [u for u, s in states.items() if s != UnitState.PENDING] == ["u1"]
    assert not any(trace_lines(tmp_path, h) for h in ("ctl-0", "cmp-0", "cmp-1"))


class _PressesAtStart(Observer):
    """Ctrl-C pressed `presses` times as the run is recorded, before the engine has begun."""

    def __init__(self, presses: int):
        self.presses = presses

    def run_started(self, run_id, units, todo, resumed) -> None:
        for _ in range(self.presses):
            os.kill(os.getpid(), signal.SIGINT)


@pytest.mark.parametrize("presses", [1, 2])
def test_ctrl_c_before_the_engine_begins_is_held_then_aborts_or_interrupts(tmp_path, presses):
    """A press between the run's record and the engine's handlers is no KeyboardInterrupt
    (which a second press could hit while it unwinds): the engine acts on it when it begins."""
    dep = load_deployment(write_cloud(tmp_path))
    st = open_store(f"sqlite:///{tmp_path / 'store.sqlite'}")
    before = signal.getsignal(signal.SIGINT)
    res = run_plan(RunRequest(st, dep, "update", observer=_PressesAtStart(presses)))
    assert signal.getsignal(signal.SIGINT) is before
    expected = "aborted" if presses == 1 else "interrupted"
    assert res.status == expected, res.message
    run = st.runs(dep.name)[0]
    assert run.status == expected and run.ended_at is not None
    # nothing had begun: nothing ran, and the same command runs it all
    assert set(st.unit_states(run.id).values()) == {UnitState.PENDING}
    assert not any(trace_lines(tmp_path, h) for h in ("ctl-0", "cmp-0", "cmp-1"))
    again = run_plan(RunRequest(st, dep, "update"))
    assert again.status == "done" and again.run_id == run.id, again.message


def _unit(uid: str, batch: str | None, *after: str) -> Unit:
    return Unit(uid, Step.STOP, ("n",), ("s",), after=after, batch=batch)


def test_the_safe_point_includes_what_a_begun_batch_waits_for():
    # A1 runs; A2 waits for A1 and for B1 (another batch), so B must finish too; C (not begun,
    # nothing of A or B waits for it) and the barrier after everything never start
    units = [
        _unit("a1", "A"),
        _unit("b1", "B"),
        _unit("b2", "B", "b1"),
        _unit("a2", "A", "a1", "b1"),
        _unit("c1", "C"),
        Unit("g", Step.GATE, (), (), after=("a2", "b2", "c1")),
    ]
    has_play = {u.id: not u.is_barrier for u in units}
    sched = Scheduler(units, (), max_parallel=1, has_play=has_play)
    sched.lock.acquire()  # the engine calls the scheduler with its lock held
    sched.mark_running("a1")
    assert sched.request_abort("test")
    assert sched.stop is not None and sched.stop.finishing == {"a2", "b1", "b2"}
    assert not sched.request_abort("again")  # one abort; the first reason stays
    sched.mark("a1", UnitState.DONE)
    assert sched.may_start("b1") and not sched.may_start("c1")
    assert not sched.finished()
    for u in ("b1", "b2", "a2"):
        sched.mark_running(u)
        sched.mark(u, UnitState.DONE)
    assert sched.finished() and sched.state["g"] is UnitState.PENDING
    # a failure while aborting decides how the run ends: nothing more starts
    sched2 = Scheduler(units, (), max_parallel=1, has_play=has_play)
    sched2.lock.acquire()
    sched2.mark_running("a1")
    sched2.request_abort("test")
    sched2.request_stop("unit a1 failed")
    assert sched2.stop is not None and not sched2.stop.aborted and not sched2.may_start("b1")


def test_abort_without_a_running_run_is_refused(tmp_path):
    dep = write_cloud(tmp_path)
    r = runner.invoke(app, ["abort", "-d", str(dep)])
    assert r.exit_code == 2, r.output
    assert "no run of cloud 'testcloud' is running" in r.output and "Traceback" not in r.output
    # a run recorded running whose process is gone is no run to abort either
    st = open_store(f"sqlite:///{tmp_path / '.stepwise' / 'testcloud.sqlite'}")
    r = runner.invoke(
        app, ["update", "run", "-d", str(dep), "--json", "--limit", "Controller", "--no-prestage"]
    )
    assert r.exit_code == 0, r.output
    run_id = st.runs("testcloud")[0].id
    st.reopen_run(run_id, pid=2**22 + 7)
    r = runner.invoke(app, ["abort", "-d", str(dep)])
    assert r.exit_code == 2 and "its process is gone" in r.output, r.output
    assert st.run(run_id).status == "running"  # nothing recorded


def _cli(dep: Path, *args: str) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "stepwise.cli.main", *args, "-d", str(dep)],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        cwd=str(dep.parent),
    )


def _running_unit(st, name: str) -> bool:
    runs = st.runs("testcloud", 1)
    return bool(runs) and st.unit_states(runs[0].id).get(name) == UnitState.RUNNING


def test_stepwise_abort_stops_a_cli_run_that_the_same_command_continues(tmp_path):
    dep = write_cloud(tmp_path)
    st = open_store(f"sqlite:///{tmp_path / '.stepwise' / 'testcloud.sqlite'}", create=True)
    run = _cli(dep, "update", "run", "--yes", "--no-prestage", "-e", "step_sleep=0.4")
    _wait(lambda: _running_unit(st, "u4") or run.poll() is not None)
    r = runner.invoke(app, ["abort", "-d", str(dep)])
    out, _ = run.communicate(timeout=120)
    assert r.exit_code == 0, r.output
    assert "asked to stop at its next safe point" in r.output
    assert "aborted: aborted by `stepwise abort`" in r.output.replace("\n", " ")
    assert run.returncode == 5, out
    assert "aborted: " in out and "Continue with: " in out and "update run" in out
    r = runner.invoke(app, ["status", "-d", str(dep)])
    assert "aborted" in r.output, r.output
    r = runner.invoke(app, ["history", "-d", str(dep)])
    assert "aborted" in r.output, r.output
    assert trace_lines(tmp_path, "cmp-0") == []  # the compute batches never began
    again = _cli(dep, "update", "run", "--yes", "--no-prestage")
    out, _ = again.communicate(timeout=300)
    assert again.returncode == 0, out
    assert _steps(tmp_path, "ctl-0") == ["stop", "packages", "config", "migrate", "start", "verify"]
    assert len(st.runs("testcloud")) == 1 and st.runs("testcloud")[0].status == "done"


@pytest.mark.parametrize("presses", [1, 2])
def test_first_ctrl_c_aborts_and_a_second_one_interrupts(tmp_path, presses: int):
    dep = write_cloud(tmp_path)
    st = open_store(f"sqlite:///{tmp_path / '.stepwise' / 'testcloud.sqlite'}", create=True)
    run = _cli(dep, "update", "run", "--yes", "--no-prestage", "-e", "step_sleep=1")
    _wait(lambda: _running_unit(st, "u4") or run.poll() is not None)
    os.kill(run.pid, signal.SIGINT)
    if presses == 2:
        _wait(lambda: st.runs("testcloud", 1)[0].status == "aborting" or run.poll() is not None)
        os.kill(run.pid, signal.SIGINT)
    out, _ = run.communicate(timeout=120)
    assert "aborting at the next safe point: 1 unit(s) running, 4 more finish" in out, out
    assert "press Ctrl-C again to interrupt" in out
    states = st.unit_states(st.runs("testcloud", 1)[0].id)
    if presses == 1:
        assert run.returncode == 5 and st.runs("testcloud", 1)[0].status == "aborted", out
        assert all(states[u] == UnitState.DONE for u in ("u3", "u4", "u5", "u6", "u7", "u8"))
    else:
        assert run.returncode == 130 and st.runs("testcloud", 1)[0].status == "interrupted", out
        # the second press cuts whatever runs then (u4 on an idle machine, nothing when it lands
        # between two units): the batch is not finished as the abort alone would have done
        assert "interrupted (SIGINT)" in out, out
        assert states["u8"] != UnitState.DONE, (states, out)
    assert trace_lines(tmp_path, "cmp-0") == []


@pytest.mark.e2e
@pytest.mark.lab
def test_lab_abort_leaves_every_service_serving_and_the_same_command_finishes(tmp_path: Path):
    """A real update of the lab's computes (instances live-migrate away and back), aborted
    while the first compute is out of service: the run ends aborted with that compute back,
    the second never touched, every service and instance healthy and no probe request failed;
    the same command then finishes the update."""
    import shutil
    import tempfile

    from test_e2e_lab import CLASSIC, STEPWISE, _lab_or_skip

    import stepwise.lab as lab
    from stepwise.lab.nodes import Lab
    from stepwise.lab.probe import Probe
    from stepwise.lab.status import status as lab_status

    _lab_or_skip()
    lab_dir = Path(tempfile.mkdtemp(prefix="swl-")) / "lab"  # short: unix sockets live there
    dep = tmp_path / "classic.yaml"
    dep.write_text(
        CLASSIC.read_text().replace(
            'nodes: {count: 3, name: "ceph-{index}"', 'nodes: {count: 1, name: "ceph-{index}"'
        )
    )
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
    lab.up(dep, lab_dir)
    try:
        subprocess.run(
            [STEPWISE, "discover", "-d", str(dep), "--lab", str(lab_dir)],
            check=True,
            env=env,
            capture_output=True,
        )
        cmd = [STEPWISE, "update", "run", "-d", str(dep), "--lab", str(lab_dir)]
        cmd += ["--limit", "Compute", "--yes"]
        st = open_store(f"sqlite:///{tmp_path / '.stepwise' / 'classic.sqlite'}")
        probe = Probe(Lab(lab_dir), rate=5.0).start()
        run = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)

        def first_batch_begun() -> bool:
            runs = st.runs("classic", 1)
            units = st.units(runs[0].id) if runs else []
            return any(u.batch == "Compute#1" and u.state != UnitState.PENDING for u in units)

        _wait(lambda: first_batch_begun() or run.poll() is not None, timeout=300)
        ab = subprocess.run(
            [STEPWISE, "abort", "-d", str(dep)], env=env, capture_output=True, text=True
        )
        out = run.communicate(timeout=600)[0].decode()
        summary = probe.stop()
        assert ab.returncode == 0, ab.stdout + ab.stderr
        assert run.returncode == 5 and "aborted: " in out, out
        units = st.units(st.runs("classic", 1)[0].id)
        by_batch: dict[str, set[str]] = {}
        for u in units:
            by_batch.setdefault(u.batch or "-", set()).add(u.state)
        assert by_batch["Compute#1"] == {UnitState.DONE}, by_batch
        assert by_batch["Compute#2"] == {UnitState.PENDING}, by_batch
        view = lab_status(Lab(lab_dir))
        sick = [
            (n["name"], s["name"], s["health"])
            for n in view["nodes"]
            for s in n["services"]
            if not s["healthy"]
        ]
        assert sick == [] and all(w["healthy"] for w in view["workloads"]), (sick, view)
        assert summary["total"]["requests"] > 0 and summary["total"]["failed"] == 0, summary
        done = subprocess.run(cmd, env=env, capture_output=True, text=True)
        assert done.returncode == 0, done.stdout + done.stderr
        runs = st.runs("classic")
        assert len(runs) == 1 and runs[0].status == "done" and runs[0].attempts == 2
    finally:
        lab.down(lab_dir)
        shutil.rmtree(lab_dir.parent, ignore_errors=True)
