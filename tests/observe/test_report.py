"""The HTML report: of the 1,000-node reference plan and of a stored run (without a lab),
rendered in headless Chromium; escaping; probe samples kept in the store."""

from __future__ import annotations

import calendar
import sys
from datetime import timedelta
from pathlib import Path

import pytest

from tests.observe.browser import (
    assert_readable,
    assert_rendered,
    assert_self_contained,
    open_report,
)

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
    assert "Batches: nodes, the command that runs one alone" in doc
    check = open_report(out, tmp_path / "plan.png", tmp_path)
    assert_rendered(check)
    assert_readable(check)
    # a 900 px window: the charts keep their size and scroll; text stays at 11 px
    narrow = open_report(out, None, tmp_path, width=900)
    assert narrow["width"] <= 900 and narrow["smallest_px"] >= 11, narrow
    assert_readable(narrow)


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
    assert 'data-kind="failed"' in doc and 'data-kind="resumed"' in doc
    check = open_report(out, tmp_path / "run.png", tmp_path)
    assert_rendered(check)
    assert_readable(check)
    assert_readable(open_report(out, None, tmp_path, width=900))
    # zoom on a run: planned and actual bars outside the range hidden, reset restores
    zoom = open_report(out, None, tmp_path, fragment="#zoom=0.5-1")
    assert_readable(zoom)
    before, zoomed = zoom["zoom"]["before"]["timeline"], zoom["zoom"]["zoomed"]["timeline"]
    assert -1 in zoomed["bars"] and -1 not in before["bars"]
    assert zoom["zoom"]["reset"]["timeline"] == before


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
        app, ["update", "run", "-d", str(dep), "--json", "--limit", "Controller", "--no-prestage"]
    )
    assert r.exit_code == 0, r.output
    rid = json.loads(r.output)["run_id"]
    out = tmp_path / "run.html"
    r = CliRunner().invoke(app, ["report", "-d", str(dep), "-o", str(out)])
    assert r.exit_code == 0, r.output
    doc = out.read_text()
    assert (
        f"run {rid}: update (done)" in doc
        and 'data-kind="done"' in doc
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


# ------------------------------------------------------------------ read at a glance (issue 22)
CLASSIC = ROOT / "examples" / "classic.yaml"


@pytest.fixture(scope="module")
def classic_upgrade():
    from stepwise.model import load_deployment
    from stepwise.plan import make_plan
    from stepwise.verify import verify_plan

    dep = load_deployment(CLASSIC)
    return dep, verify_plan(make_plan("upgrade", dep), dep)


def test_every_step_has_a_kind_of_work_and_bars_are_coloured_by_it(classic_upgrade):
    from stepwise.model.step_kinds import STEP_KINDS, StepKind
    from stepwise.model.vocab import Step
    from stepwise.observe.report import plan_section
    from stepwise.observe.report.batches import unit_kind
    from stepwise.observe.report.svg import COLOURS
    from stepwise.plan import make_plan, selection_for
    from stepwise.verify import verify_plan

    assert set(STEP_KINDS) == set(Step)
    dep, plan = classic_upgrade
    by_step = {u.step: unit_kind(u) for u in plan.units if u.batch}
    assert by_step[Step.STOP] is StepKind.DISRUPTIVE and by_step[Step.LEAVE] is StepKind.DISRUPTIVE
    assert by_step[Step.PACKAGES] is StepKind.SOFTWARE and by_step[Step.VERIFY] is StepKind.CHECKS
    sec = plan_section(plan, dep)
    kinds = {b.kind for b in sec.planned} | {k for b in sec.planned for *_, k in b.segments}
    # the four kinds of a plan without a prestage, four colours
    assert kinds == set(StepKind) - {StepKind.PRESTAGE}
    assert len({COLOURS[k] for k in kinds}) == 4
    # with one, its own kind and colour
    with_prestage = verify_plan(
        make_plan("upgrade", dep, selection=selection_for("upgrade", prestage=2)), dep
    )
    kinds = {b.kind for b in plan_section(with_prestage, dep).planned}
    assert StepKind.PRESTAGE in kinds and len({COLOURS[k] for k in set(StepKind)}) == 5
    # a batch of a node visit shows its steps' kinds in time order
    batch = next(b for b in sec.planned if b.short.startswith("Controller#"))
    assert [k for *_, k in batch.segments][:2] == [StepKind.DISRUPTIVE, StepKind.SOFTWARE]
    assert batch.nodes and batch.nodes[0].startswith("controller-")


def test_the_critical_path_is_the_longest_chain_by_estimated_time():
    from stepwise.model.vocab import Step
    from stepwise.observe.report.batches import critical_path
    from stepwise.plan.schedule import asap
    from stepwise.plan.units import Plan, Unit

    units = [
        Unit("a", Step.STOP, ("n1",), (), duration_s=10),
        Unit("b", Step.STOP, ("n2",), (), duration_s=50),
        Unit("c", Step.PACKAGES, ("n1",), (), after=("a", "b"), duration_s=5),
        Unit("d", Step.VERIFY, ("n3",), (), duration_s=40),
    ]
    timed, makespan = asap(units)
    plan = Plan("update", "x", timed, duration_s=makespan)
    assert critical_path(plan) == {"b", "c"}


def test_a_plan_report_with_a_start_shows_wall_clock_times_and_reads_at_a_glance(
    classic_upgrade, tmp_path: Path
):
    from datetime import UTC, datetime

    from stepwise.observe.report import plan_section, write_report

    dep, plan = classic_upgrade
    out = tmp_path / "plan.html"
    start = datetime(2026, 12, 1, 22, 0, tzinfo=UTC)
    write_report(out, "classic upgrade", [plan_section(plan, dep, start=start)])
    doc = out.read_text()
    assert "2026-12-01 22:00 UTC" in doc and ">22:00</text>" in doc
    end = datetime.fromtimestamp(start.timestamp() + plan.duration_s, UTC)
    assert f"end {end:%H:%M} UTC" in doc
    # the critical path, the legend of kinds, the at-limit spans, the y-axis
    assert 'class="bar crit"' in doc and "critical path (outlined)" in doc
    assert "disruptive: leave, stop, reboot" in doc and "checks: validate, verify" in doc
    assert 'class="at-limit"' in doc and 'class="tick y"' in doc
    assert "serving exactly at the limit" in doc and "the least the rule allows" in doc
    # the batch table: node names and the command that runs that batch alone
    assert f"stepwise upgrade run -d {CLASSIC} --limit controller-0</code>" in doc
    assert f"stepwise upgrade prepare -d {CLASSIC}</code>" in doc
    # labelled markers: stages and dependency levels
    assert 'class="mark part"' in doc and 'class="mark level"' in doc
    check = open_report(out, tmp_path / "p.png", tmp_path)
    assert_rendered(check)
    assert_readable(check)
    assert_readable(open_report(out, None, tmp_path, width=900))


def test_the_axis_is_in_one_unit_and_says_its_end():
    from stepwise.observe.report.svg import Frame, axis_svg

    svg = "".join(axis_svg(Frame(5585.0, 150.0), 100))
    labels = [t.split(">")[1] for t in svg.split("<text")[1:]]
    labels = [x.removesuffix("</text") for x in labels]
    assert labels[0] == "end 93.1 min"
    assert all(x.endswith(" min") for x in labels), labels
    svg = "".join(axis_svg(Frame(40.0, 150.0), 100))
    assert "end 40 s" in svg and " min<" not in svg


def test_the_summary_shows_no_python_reprs(tmp_path: Path):
    from stepwise.model import load_deployment
    from stepwise.observe.report import plan_section
    from stepwise.observe.report.batches import plain
    from stepwise.plan import make_plan, selection_for
    from stepwise.verify import verify_plan

    assert plain({"a": 1, "b": ["x", "y"]}) == "a 1; b x, y"
    # the OS upgrade's initial state with nothing in it says nothing
    assert plain({"initial": {"new_os": [], "down": {}, "pinned": False}}) == ""
    dep = load_deployment(CLASSIC)
    sel = selection_for("update", "Compute")
    plan = verify_plan(make_plan("update", dep, selection=sel), dep)
    for _, v in plan_section(plan, dep).summary:
        assert not any(c in v for c in "{}[]'"), v


def test_a_run_is_drawn_on_the_plan_clock_with_the_delta_of_each_batch(tmp_path: Path):
    from stepwise.observe.report import run_section_from_store

    dep, plan, st, rid = _stored_run(tmp_path)
    sec = run_section_from_store(st, rid, dep)
    # not rescaled: the planned bars keep the plan's estimated times, on the run's clock
    assert sec.axis_s >= plan.duration_s
    assert max(b.end for b in sec.planned) == pytest.approx(
        max(u.end_s for u in plan.units if str(u.step) != "gate")
    )
    # the test run took seconds where the plan says minutes: its batches ended early
    rows = [b for b in sec.batches if b["delta"]]
    assert all(r["delta"] == "on time" or r["delta"].endswith("min early") for r in rows)
    assert any(r["delta"].endswith("min early") for r in rows)
    assert any(b.short.endswith("min early") for b in sec.actual)
    assert sec.t0 is not None and "ended" in sec.batches[0]


def test_report_and_plan_take_a_start(tmp_path: Path):
    from typer.testing import CliRunner

    from stepwise.cli.main import _register, app

    _register()
    out = tmp_path / "p.html"
    r = CliRunner().invoke(
        app,
        ["plan", "upgrade", "-d", str(CLASSIC), "--html", str(out), "--start", "2026-12-01T22:00"],
    )
    assert r.exit_code == 0, r.output
    assert "2026-12-01 22:00 UTC" in out.read_text()
    r = CliRunner().invoke(
        app,
        ["report", "-d", str(CLASSIC), "--plan", "update", "-o", str(out)]
        + ["--start", "2026-12-01T23:30+01:00"],
    )
    assert r.exit_code == 0, r.output
    assert "2026-12-01 22:30 UTC" in out.read_text()
    r = CliRunner().invoke(
        app,
        ["report", "-d", str(CLASSIC), "--plan", "update", "-o", str(out), "--start", "soon"],
    )
    assert r.exit_code == 2 and "--start" in r.output and "YYYY-MM-DDTHH:MM" in r.output
    r = CliRunner().invoke(
        app, ["plan", "update", "-d", str(CLASSIC), "--start", "2026-12-01T22:00"]
    )
    assert r.exit_code == 2 and "--html" in r.output


def test_the_os_upgrade_batches_carry_the_seed_commands_and_its_summary_no_repr():
    from stepwise.model import load_deployment
    from stepwise.observe.report import plan_section
    from stepwise.plan import make_plan
    from stepwise.verify import verify_plan

    dep = load_deployment(ROOT / "examples" / "composed.yaml")
    plan = verify_plan(make_plan("system-upgrade", dep), dep)
    sec = plan_section(plan, dep)
    commands = {b["command"] for b in sec.batches}
    path = str(ROOT / "examples" / "composed.yaml")
    assert f"stepwise upgrade prepare -d {path}" in commands
    assert any("--tags system_upgrade_prepare --limit " in c for c in commands)
    assert any("--tags system_upgrade_transfer_data --limit " in c for c in commands)
    assert dict(sec.summary)["selection"] == "all"
    assert all(b["nodes"] for b in sec.batches if b["roles"])


@pytest.mark.parametrize("wall_clock", [False, True])
def test_zoom_on_a_time_range_stretches_the_charts_and_reset_restores_them(
    classic_upgrade, tmp_path: Path, wall_clock: bool
):
    """The page's self-check types a range (minutes) into the zoom inputs of the first section,
    as an operator would, and records the charts before, zoomed and after reset."""
    from datetime import UTC, datetime

    from stepwise.observe.report import plan_section, write_report

    dep, plan = classic_upgrade
    out = tmp_path / "plan.html"
    start = datetime(2026, 12, 1, 22, 0, tzinfo=UTC) if wall_clock else None
    write_report(out, "classic upgrade", [plan_section(plan, dep, start=start)])
    minutes = plan.duration_s / 60
    a, b = round(minutes * 0.4, 1), round(minutes * 0.6, 1)
    first, last = f"{a:g} min", f"{b:g} min"
    if start is not None:
        first = f"{start + timedelta(minutes=a):%H:%M}"
        last = f"{start + timedelta(minutes=b):%H:%M} UTC"
    check = open_report(out, None, tmp_path, fragment=f"#zoom={a}-{b}")
    assert_rendered(check)
    zoom = check["zoom"]
    before, zoomed, reset = zoom["before"], zoom["zoomed"], zoom["reset"]
    bars_before, bars_zoomed = before["timeline"]["bars"], zoomed["timeline"]["bars"]
    assert len(bars_before) == len(bars_zoomed) > 0
    # bars wholly outside the range are hidden, those inside are about 5x wider
    assert -1 in bars_zoomed and -1 not in bars_before
    assert any(z > 3 * w > 3 for w, z in zip(bars_before, bars_zoomed, strict=True))
    # the availability lines are redrawn on the range
    lines = before["availability"]["lines"]
    zlines = zoomed["availability"]["lines"]
    assert lines and all(z != w for w, z in zip(lines, zlines, strict=True))
    for chart in ("timeline", "availability"):
        # the axis says the range: its first label is the range's start, its last the end
        ticks = zoomed[chart]["ticks"]
        assert ticks != before[chart]["ticks"], chart
        assert first in ticks and last in ticks, (first, last, ticks)
        assert not any(t.startswith("end ") for t in ticks), ticks
        # reset: the page as rendered again
        assert reset[chart] == before[chart], chart
    assert before["timeline"]["ticks"][0].startswith("end ")
    for state in (before, zoomed, reset):
        assert state["smallest_px"] >= 11 and state["overlaps"] == [], state
    # the page ends zoomed (the range set again after reset): still readable
    assert_readable(check)


def test_a_range_that_is_empty_or_past_the_end_is_flagged_and_changes_nothing(
    classic_upgrade, tmp_path: Path
):
    from stepwise.observe.report import plan_section, write_report

    dep, plan = classic_upgrade
    out = tmp_path / "plan.html"
    write_report(out, "classic upgrade", [plan_section(plan, dep)])
    past = plan.duration_s / 60 + 5
    for fragment in ("#zoom=30-20", f"#zoom={past:.0f}-{past + 10:.0f}"):
        zoom = open_report(out, None, tmp_path, fragment=fragment)["zoom"]
        assert zoom["zoomed"]["bad"] and not zoom["before"]["bad"], fragment
        assert zoom["zoomed"]["timeline"] == zoom["before"]["timeline"], fragment
        assert not zoom["reset"]["bad"], fragment


def test_dragging_across_the_axis_zooms_on_that_range(classic_upgrade, tmp_path: Path):
    """A drag across the timeline's axis from a quarter to half of it fills in the zoom inputs
    with that range and zooms on it."""
    from stepwise.observe.report import plan_section, write_report

    dep, plan = classic_upgrade
    out = tmp_path / "plan.html"
    write_report(out, "classic upgrade", [plan_section(plan, dep)])
    check = open_report(out, None, tmp_path, fragment="#zoomdrag")
    assert_rendered(check)
    drag = check["zoom"]
    minutes = plan.duration_s / 60
    assert float(drag["from"]) == pytest.approx(minutes / 4, rel=0.02), drag["from"]
    assert float(drag["to"]) == pytest.approx(minutes / 2, rel=0.02), drag["to"]
    ticks = drag["after"]["timeline"]["ticks"]
    assert f"{float(drag['from']):g} min" in ticks and not any(t.startswith("end") for t in ticks)
    assert drag["after"]["availability"]["ticks"] == ticks
    assert_readable(check)
