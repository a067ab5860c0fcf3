"""The HTML report: of the 1,000-node reference plan and of a stored run (without a lab),
rendered in headless Chromium; escaping; probe samples kept in the store."""

from __future__ import annotations

import calendar
import sys
from datetime import timedelta
from pathlib import Path

import pytest

from tests.observe.browser import assert_rendered, assert_self_contained, open_report

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def reference():
    sys.path.insert(0, str(ROOT))
    from benchmarks.clouds import reference_cloud
    from stepwise.plan import make_plan
    from stepwise.verify import verify_plan

    dep = reference_cloud()
    return dep, verify_plan(make_plan("upgrade", dep), dep)


def test_report_of_the_1000_node_plan_is_small_and_renders(reference, tmp_path: Path):
    from stepwise.observe.report import plan_section, write_report

    dep, plan = reference
    out = tmp_path / "plan.html"
    size = write_report(out, "reference plan", [plan_section(plan, dep)])
    assert size < 2_000_000, size
    doc = out.read_text()
    assert_self_contained(doc)
    # aggregated: one lane per role, not per node; the why of every batch is in the table
    assert doc.count('class="lane"') < 200
    assert "Batches and why" in doc
    check = open_report(out, tmp_path / "plan.png", tmp_path)
    assert_rendered(check)


def _stored_run(tmp_path: Path):
    """A small cloud's update recorded as a lab run would be: units done, one failed with a
    hostile message, probe samples with failures."""
    from stepwise.model import load_deployment
    from stepwise.plan import make_plan
    from stepwise.run.store.store import RunOrigin, open_store
    from stepwise.verify import verify_plan
    from tests.run.conftest import write_cloud

    dep = load_deployment(write_cloud(tmp_path / "cloud", computes=3, controllers=3))
    plan = verify_plan(make_plan("update", dep), dep)
    st = open_store(f"sqlite:///{tmp_path / 'store.sqlite'}")
    rid = st.create_run(
        dep.name,
        "update",
        "k",
        RunOrigin("stepwise update run -d x -e db_password=hunter2", user="ops", host="bastion"),
        {},
        plan.to_json(),
        [u.to_json() for u in plan.units],
    )
    run = st.run(rid)
    t0 = run.started_at
    from stepwise.run.store.models import UnitRow

    work = [u.id for u in plan.units if str(u.step) != "gate"]
    failed, resumed = work[-1], work[1]
    with st.session() as s:
        for i, u in enumerate(plan.units):
            row = s.get(UnitRow, (rid, u.id))
            row.started_at, row.ended_at = (
                t0 + timedelta(seconds=i * 2),
                t0 + timedelta(seconds=i * 2 + 1.5),
            )
            row.state, row.attempts = (
                ("failed", 1) if u.id == failed else ("done", 1 + (u.id == resumed))
            )
    st.add_task_results(
        [
            {
                "run_id": rid,
                "unit_id": failed,
                "host": "cmp-2",
                "task": "start <b>worker</b>",
                "status": "failed",
                "message": "<script>alert(1)</script> exit 1",
                "at": t0,
            }
        ]
    )
    st.finish_run(rid, "failed", "unit failed")
    base = calendar.timegm(t0.timetuple()) + t0.microsecond / 1e6  # the store's times are naive UTC
    samples = [
        {
            "target": "vip:api",
            "t": base + s,
            "requests": 5,
            "failed": 2 if 4 <= s <= 6 else 0,
            "max_ms": 3.0,
        }
        for s in range(len(plan.units) * 2)
    ]
    assert st.add_probe_samples(rid, samples) == len(samples)
    return dep, plan, st, rid


def test_report_of_a_stored_run_renders_with_probe_and_failures(tmp_path: Path):
    from stepwise.cli.report_cmd import write_runs_html

    dep, plan, st, rid = _stored_run(tmp_path)
    samples = st.probe_samples(rid)
    assert len(samples) == len(plan.units) * 2
    out = tmp_path / "run.html"
    write_runs_html(st, dep, [rid], out)
    doc = out.read_text()
    assert_self_contained(doc)
    assert "<script>alert" not in doc and "&lt;script&gt;alert(1)&lt;/script&gt;" in doc
    assert "<b>worker" not in doc
    assert "hunter2" not in doc  # the command is shown without its secrets
    assert "cmp-2" in doc and "To continue" in doc and "probe-failed" in doc
    # the update announces no window: every failed API request is outside one
    assert f"{5 * len(samples)} requests" in doc
    assert "6 failed, 6 failed API requests outside the announced windows" in doc
    assert 'class="bar failed"' in doc and 'class="bar resumed"' in doc
    check = open_report(out, tmp_path / "run.png", tmp_path)
    assert_rendered(check)


def test_report_command_and_plan_html(tmp_path: Path):
    from typer.testing import CliRunner

    from stepwise.cli.main import _register, app
    from tests.run.conftest import write_cloud

    _register()
    dep = write_cloud(tmp_path / "cloud")
    out = tmp_path / "p.html"
    r = CliRunner().invoke(app, ["plan", "update", "-d", str(dep), "--html", str(out)])
    assert r.exit_code == 0, r.output
    assert out.exists() and 'id="timeline"' in out.read_text()
    out2 = tmp_path / "r.html"
    r = CliRunner().invoke(app, ["report", "-d", str(dep), "--plan", "update", "-o", str(out2)])
    assert r.exit_code == 0, r.output
    assert 'id="availability"' in out2.read_text()
    r = CliRunner().invoke(app, ["report", "-d", str(dep), "-o", str(tmp_path / "x.html")])
    assert r.exit_code == 2 and "no run recorded" in r.output


def test_report_of_a_real_run_through_the_cli(tmp_path: Path):
    """`update run` through Ansible (local hosts), then `stepwise report` of the latest run."""
    import json

    from typer.testing import CliRunner

    from stepwise.cli.main import _register, app
    from tests.run.conftest import write_cloud

    _register()
    dep = write_cloud(tmp_path)
    r = CliRunner().invoke(
        app, ["update", "run", "-d", str(dep), "--json", "--limit", "Controller"]
    )
    assert r.exit_code == 0, r.output
    rid = json.loads(r.output)["run_id"]
    out = tmp_path / "run.html"
    r = CliRunner().invoke(app, ["report", "-d", str(dep), "-o", str(out)])
    assert r.exit_code == 0, r.output
    doc = out.read_text()
    assert (
        f"run {rid}: update (done)" in doc
        and 'class="bar done"' in doc
        and "To continue" not in doc
    )
    r = CliRunner().invoke(app, ["report", "-d", str(dep), "--run", str(rid + 1), "-o", str(out)])
    assert r.exit_code == 2 and "no run" in r.output


def test_the_demo_writes_the_report_of_its_runs(tmp_path: Path):
    """The demo's last step (without a lab: its runs are in the store already)."""
    from stepwise.cli.demo_cmd import _write_report

    dep, plan, st, rid = _stored_run(tmp_path)
    report: dict = {}
    _write_report(st, dep, tmp_path / "demo.html", report, json_out=True)
    assert report["report"] == str((tmp_path / "demo.html").resolve())
    assert f"run {rid}: update (failed)" in (tmp_path / "demo.html").read_text()
