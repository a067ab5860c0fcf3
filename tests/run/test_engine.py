"""Engine, resume and once-only units on `local` hosts (no lab): fast, real Ansible."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest
from conftest import trace_lines

from stepwise.errors import InputError, UnsafePlanError
from stepwise.model import load_deployment
from stepwise.model.vocab import Step, Workflow
from stepwise.plan.selection import Selection
from stepwise.plan.units import Plan, Unit
from stepwise.run.resume import RunRequest, run_plan
from stepwise.run.run_options import EngineOptions
from stepwise.run.store import open_store


def _store(root: Path):
    return open_store(f"sqlite:///{root / 'store.sqlite'}")


def test_update_runs_every_unit_in_order_and_records_it(cloud: Path):
    dep = load_deployment(cloud)
    st = _store(cloud.parent)
    res = run_plan(RunRequest(st, dep, "update"))
    assert res.status == "done", res.message
    lines = trace_lines(cloud.parent, "cmp-1")
    assert [l.split()[1] for l in lines] == ["stop", "packages", "config", "start", "verify"]
    states = st.unit_states(res.run_id)
    assert set(states.values()) == {"done"}
    rows = st.task_results(res.run_id)
    assert {r.host for r in rows} == {"ctl-0", "cmp-0", "cmp-1"}
    svc = {(r.node, r.service): r.state for r in st.node_services(dep.name)}
    assert svc[("cmp-0", "worker")] == "running"
    # the same command again: the run finished and nothing changed since: nothing to do
    again = run_plan(RunRequest(st, dep, "update"))
    assert again.status == "nothing" and f"run {res.run_id}" in again.message
    assert len(st.runs(dep.name)) == 1
    assert sum(1 for l in trace_lines(cloud.parent, "cmp-1") if l.split()[1] == "packages") == 1
    # --fresh starts over after the confirmation names what runs again
    asked = []
    fresh = run_plan(RunRequest(st, dep, "update", fresh=True, confirm=asked.append))
    assert fresh.status == "done" and fresh.run_id != res.run_id
    assert "starting over" in asked[0] and f"run {res.run_id}" in asked[0]


def test_failure_stops_the_run_and_resume_continues_after_last_done_unit(cloud: Path):
    dep = load_deployment(cloud)
    st = _store(cloud.parent)
    broken = cloud.parent / "trace" / "cmp-0.log"
    broken.mkdir()  # appending to a directory fails: cmp-0's first task breaks
    res = run_plan(
        RunRequest(
            st, dep, "update", options=EngineOptions(continue_command="stepwise update run -d x")
        )
    )
    assert res.status == "failed"
    assert "cmp-0" in res.message and "stepwise update run -d x" in res.message
    assert any(f.host == "cmp-0" for f in res.failures)
    done_before = [u for u, s in st.unit_states(res.run_id).items() if s == "done"]
    assert trace_lines(cloud.parent, "cmp-1") == []  # the next batch never started
    broken.rmdir()
    res2 = run_plan(RunRequest(st, dep, "update"))
    assert res2.status == "done" and res2.resumed and res2.run_id == res.run_id
    assert res2.units_reused == len(done_before)
    # ctl-0's units were done before the failure and were not run again
    assert sum(1 for l in trace_lines(cloud.parent, "ctl-0") if l.split()[1] == "packages") == 1


def test_once_only_unit_never_runs_twice(cloud: Path):
    dep = load_deployment(cloud)
    u = Unit(
        "xfer",
        Step.SYSTEM_UPGRADE_TRANSFER_DATA,
        ("cmp-0",),
        ("worker",),
        idempotent=False,
        vars={"system_upgrade_source": "cmp-1"},
    )

    def planner(d, _facts):
        return Plan(Workflow.SYSTEM_UPGRADE, d.name, (u,), params={"limit": "cmp-0"})

    st = _store(cloud.parent)
    req = RunRequest(st, dep, Workflow.SYSTEM_UPGRADE, planner=planner)
    res = run_plan(req)
    assert res.status == "done", res.message
    assert trace_lines(cloud.parent, "cmp-0") == ["worker system_upgrade_transfer_data"]
    # a new run of the same operation is refused before anything runs (store marker)
    with pytest.raises(UnsafePlanError, match="never run twice"):
        run_plan(replace(req, fresh=True))
    assert len(st.runs(dep.name)) == 1  # the refusal recorded nothing
    # even with the store's record gone, the flag file on the node refuses it
    st.clear_marker(dep.name, "system_upgrade_transfer_data@cmp-0")
    res3 = run_plan(replace(req, fresh=True))
    assert res3.status == "failed" and "must never run twice" in res3.message
    assert trace_lines(cloud.parent, "cmp-0") == ["worker system_upgrade_transfer_data"]
    with pytest.raises(InputError, match="never run twice"):
        run_plan(replace(req, rerun=["xfer"]))


def test_second_concurrent_run_is_refused(cloud: Path):
    from stepwise.run.lock import LockedError, RunLock
    from stepwise.run.resume import lock_path_for

    dep = load_deployment(cloud)
    st = _store(cloud.parent)
    with RunLock.acquire(lock_path_for(dep, dep.name), dep.name, "stepwise upgrade run -d x"):
        with pytest.raises(LockedError, match="upgrade run") as exc:
            run_plan(RunRequest(st, dep, "update"))
        assert "pid" in str(exc.value)


def test_a_failed_transfer_can_be_retried_and_a_successful_one_cannot(cloud: Path):
    dep = load_deployment(cloud)
    u = Unit(
        "xfer",
        Step.SYSTEM_UPGRADE_TRANSFER_DATA,
        ("cmp-0",),
        ("worker",),
        idempotent=False,
        vars={"system_upgrade_source": "cmp-1"},
    )

    def planner(d, _facts):
        return Plan(Workflow.SYSTEM_UPGRADE, d.name, (u,), params={"limit": "cmp-0"})

    st = _store(cloud.parent)
    req = RunRequest(st, dep, Workflow.SYSTEM_UPGRADE, planner=planner)
    broken = cloud.parent / "trace" / "cmp-0.log"
    broken.mkdir()  # the transfer's work fails before it copied anything
    first = run_plan(req)
    assert first.status == "failed"
    flags = cloud.parent / "flags" / "cmp-0"
    assert not (
        flags / "stepwise-system_upgrade_transfer_data.flag"
    ).exists()  # an attempt is not a success
    assert (flags / "stepwise-system_upgrade_transfer_data.flag.attempt").exists()
    broken.rmdir()
    retry = run_plan(req)  # the same command resumes the failed unit: the retry runs
    assert retry.status == "done" and retry.resumed, retry.message
    assert trace_lines(cloud.parent, "cmp-0") == ["worker system_upgrade_transfer_data"]
    assert (flags / "stepwise-system_upgrade_transfer_data.flag").exists()
    with pytest.raises(UnsafePlanError, match="never run twice"):
        run_plan(replace(req, fresh=True))


def test_a_failed_prepare_blocks_the_reboot_into_the_new_os(cloud: Path):
    dep = load_deployment(cloud)
    prep = Unit(
        "prep",
        Step.SYSTEM_UPGRADE_PREPARE,
        ("cmp-0",),
        ("worker",),
        tags=("system_upgrade_prepare",),
    )
    run = Unit(
        "run",
        Step.SYSTEM_UPGRADE_RUN,
        ("cmp-0",),
        (),
        tags=("system_upgrade_run",),
        work={"cmp-0": ()},
    )
    st = _store(cloud.parent)
    reboot_log = cloud.parent / "rebooted"
    # never this machine's own reboot or leapp, whatever happens
    opts = EngineOptions(
        extra_vars={
            "stepwise_reboot_command": f"touch {reboot_log}",
            "stepwise_os_upgrade_command": "true",
        }
    )
    broken = cloud.parent / "trace" / "cmp-0.log"
    broken.mkdir()  # the prepare fails
    res = run_plan(
        RunRequest(
            st,
            dep,
            Workflow.SYSTEM_UPGRADE,
            options=opts,
            planner=lambda d, f: Plan(
                Workflow.SYSTEM_UPGRADE, d.name, (prep,), params={"limit": "cmp-0"}
            ),
        )
    )
    assert res.status == "failed"
    broken.rmdir()
    res = run_plan(
        RunRequest(
            st,
            dep,
            Workflow.SYSTEM_UPGRADE,
            options=opts,
            selection=Selection(limit="cmp-0", tags=("system_upgrade_run",)),
            planner=lambda d, f: Plan(
                Workflow.SYSTEM_UPGRADE, d.name, (run,), params={"limit": "cmp-0"}
            ),
        )
    )
    assert res.status == "failed" and "not prepared successfully" in res.message, res.message
    assert not reboot_log.exists()
