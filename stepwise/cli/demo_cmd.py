"""`stepwise demo`: the whole story on a lab: up, plan, minor update, major upgrade (prepare,
control plane, data plane, converge) under a live availability probe, what the probe saw,
whether stepwise's own status agrees with the lab, down."""

from __future__ import annotations

import tempfile
import time
from pathlib import Path
from typing import Any

import typer
from rich.text import Text

from stepwise.cli.app import app
from stepwise.cli.common import console, err_console, print_json, reported
from stepwise.cli.demo_checks import (
    _openstack_after,
    _openstack_before,
    agreement,
    failed_checks,
    kernels,
    say_failed_checks,
)
from stepwise.cli.run_cmd import ACCEPT_DOWNTIME_OPT
from stepwise.errors import StepwiseError
from stepwise.lab.openstack.tempest_conf import TempestList
from stepwise.model.vocab import Plane, Stage, Workflow

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "openstack.yaml"


#: failed probe calls listed per phase (the counts above hold them all)
MAX_FAILURES_SHOWN = 30
#: the demo ran but a check it reports failed (as `run`'s failed run)
EXIT_CHECK_FAILED = 1


def _failures_with_units(
    records: list[dict[str, Any]], units: list[Any], t0: float
) -> list[dict[str, Any]]:
    """Each failed probe call (seconds into the phase, target, error) with the units that were
    running at that moment: what the operator needs to tell which step broke a call."""

    from stepwise.run.store.base import epoch

    spans = [
        (
            epoch(u.started_at),
            epoch(u.ended_at) if u.ended_at is not None else None,
            f"{u.step} {','.join(u.services)} on {','.join(u.nodes)}",
        )
        for u in units
        if u.started_at is not None
    ]
    out = []
    for r in sorted((r for r in records if not r["ok"]), key=lambda r: r["t"])[:MAX_FAILURES_SHOWN]:
        during = [
            label
            for start, end, label in spans
            if start <= r["t"] + 0.5 and (end is None or r["t"] - 0.5 <= end)
        ]
        out.append(
            {
                "t_s": round(r["t"] - t0, 1),
                "target": r["target"],
                "detail": r.get("detail", ""),
                "during": during,
            }
        )
    return out


def _phase(
    title: str,
    workflow: Workflow,
    dep,
    store,
    lab_dir: Path,
    facts,
    json_out: bool,
    accept_downtime: bool = False,
    **kw: Any,
) -> dict[str, Any]:
    import stepwise.lab as lab
    from stepwise.lab.nodes import Lab
    from stepwise.lab.probe import Probe
    from stepwise.plan import selection_for
    from stepwise.run.resume import RunRequest, run_plan
    from stepwise.run.run_options import EngineOptions
    from stepwise.verify import plan_verified

    extra = kw.pop("extra_vars", {})
    selection = selection_for(workflow, kw.pop("limit", None), **kw)
    # the milestones the earlier phases recorded: each stage of the upgrade needs the last
    facts = facts.with_progress(facts.progress | store.progress(dep.name))
    plan = plan_verified(workflow, dep, facts, selection, variables=extra)
    observer = _phase_observer(title, json_out)
    conn = lab.connector(lab_dir)
    t0 = time.time()
    with Probe(Lab(lab_dir)) as probe:
        result = run_plan(
            RunRequest(
                store,
                dep,
                workflow,
                selection,
                facts,
                variables=extra,
                plan=plan,
                options=EngineOptions(connector=conn, extra_vars=extra),
                observer=observer,
                command=f"stepwise demo ({title})",
                accept_downtime=accept_downtime,
            )
        )
        summary = probe.stop()
    from stepwise.lab.probe import per_second

    # the probe's measurements stay with the run: its report needs no lab
    store.add_probe_samples(result.run_id, per_second(probe.records))
    out = _phase_report(title, plan, result, summary, probe.records, store, t0, dep)
    if not json_out:
        _say_phase(title, plan, result, summary, out)
    if not result.ok:
        raise StepwiseError(f"{title} failed: {result.message}")
    return out


def _phase_observer(title: str, json_out: bool) -> Any:
    """Live progress on a terminal, lines otherwise, none for --json."""
    if json_out:
        return None
    from stepwise.cli.progress import LineProgress, LiveProgress

    return LiveProgress(console, title) if console.is_terminal else LineProgress(err_console, title)


def _phase_report(
    title: str,
    plan: Any,
    result: Any,
    summary: dict[str, Any],
    records: list[dict[str, Any]],
    store: Any,
    t0: float,
    dep: Any,
) -> dict[str, Any]:
    """What a phase did and what the probe saw meanwhile, against the planned windows (a
    target's failure is announced inside a window of its service or of what it needs)."""
    failed = {k: v for k, v in summary["targets"].items() if v["failed"]}
    windows = [w.to_json() for w in plan.windows]
    from stepwise.observe.windows import outside_windows, target_needs, window_intervals

    needs = target_needs(dep.catalog, dep.instances)
    unannounced = outside_windows(
        records, window_intervals(plan, store, result.run_id), needs=needs
    )
    client = {
        k: {"requests": v["requests"], "failed": v["failed"]}
        for k, v in summary["targets"].items()
        if k.startswith("client:")
    }
    from stepwise.observe.status import schema_seconds

    migration_s = schema_seconds(store.units(result.run_id))
    failures = _failures_with_units(records, store.units(result.run_id), t0)
    out = {
        "phase": title,
        "run": result.run_id,
        "status": result.status,
        "message": result.message,
        "units": len(plan.units),
        "elapsed_s": round(time.time() - t0, 1),
        "planned_windows": windows,
        "migration_s": round(migration_s, 1),
        "probe": {
            "requests": summary["total"]["requests"],
            "failed": summary["total"]["failed"],
            "targets_with_failures": failed,
            "failed_outside_windows": unannounced,
            "client": client,
            "failures": failures,
            "stopped_early": summary.get("stopped_early"),
        },
    }
    return out


def _say_phase(
    title: str, plan: Any, result: Any, summary: dict[str, Any], out: dict[str, Any]
) -> None:
    """One phase's line: its outcome, the probe's counts and, when calls failed, where."""
    failed = out["probe"]["targets_with_failures"]
    unannounced = out["probe"]["failed_outside_windows"]
    windows = out["planned_windows"]
    stopped = out["probe"]["stopped_early"]
    colour = "green" if result.ok and not failed else ("yellow" if result.ok else "red")
    if unannounced or stopped:  # a failed check (failed_checks), not planned downtime
        colour = "red"
    console.print(
        Text(
            f"{title}: {result.status} in {out['elapsed_s']}s, {len(plan.units)} units; probe: "
            f"{summary['total']['requests']} requests, {summary['total']['failed']} failed"
            + (f", {sum(unannounced.values())} outside the announced windows" if failed else "")
            + "".join(
                f"\n   {k}: {v['failed']} failed, down {v['downtime_s']}s"
                for k, v in failed.items()
            )
            + (
                "".join(
                    f"\n   planned window: {w['service']} "
                    f"{w['end_s'] - w['start_s']:.0f}s ({w['why']})"
                    for w in windows
                )
                if failed
                else ""
            )
            + (f"\n   the probe: {stopped}" if stopped else ""),
            style=colour,
        ),
        soft_wrap=True,
    )


def _after_phase(
    report: dict[str, Any],
    workflow: Workflow,
    before: dict[str, dict[str, str | None]],
    lab_dir: Path,
    json_out: bool,
) -> None:
    """After the minor update: which nodes rebooted into the new kernel."""
    if workflow is not Workflow.UPDATE:
        return
    after = kernels(lab_dir)
    report["kernels"] = {
        n: {"before": before[n]["running"], "installed": k["installed"], "running": k["running"]}
        for n, k in after.items()
    }
    if not json_out:
        changed = sorted(n for n, k in report["kernels"].items() if k["before"] != k["running"])
        console.print(
            Text(
                f"kernel: {len(changed)} of {len(after)} nodes rebooted into the new "
                f"kernel ({', '.join(sorted({after[n]['running'] or '?' for n in changed}))})"
                + (f": {', '.join(changed)}" if changed else ""),
                style="dim",
            )
        )


def _write_report(store, dep, path: Path, report: dict[str, Any], json_out: bool) -> None:
    """The HTML report of the demo's runs (timeline, availability with the probe, summary)."""
    from stepwise.cli.report_cmd import write_runs_html

    runs = sorted(r.id for r in store.runs(dep.name, limit=100))
    if not runs:
        return
    try:
        size = write_runs_html(store, dep, runs, path, title=f"stepwise demo: {dep.name}")
    except StepwiseError as exc:
        # said, not raised: this runs while a failed phase's error may be on its way out
        err_console.print(Text(f"report not written: {exc}", style="yellow"), soft_wrap=True)
        return
    report["report"] = str(path.resolve())
    if not json_out:
        console.print(
            Text(f"report: {path.resolve()} ({size / 1024:.0f} KiB): open it in a browser"),
            soft_wrap=True,
        )


def _check_report_dir(report_path: Path) -> None:
    """Said now, not after a quarter of an hour: the report's directory must exist."""
    if not report_path.resolve().parent.is_dir():
        from stepwise.errors import InputError, Problem

        raise InputError(
            Problem(
                "the report's directory does not exist", file=str(report_path), field="--report"
            )
        )


def _plan_update(dep: Any, facts: Any, json_out: bool) -> None:
    """Plan the minor update and say what it will do before anything runs."""
    from stepwise.plan import selection_for
    from stepwise.verify import plan_verified

    # verified: its windows (the planned downtime said below) are the verifier's
    p = plan_verified(Workflow.UPDATE, dep, facts, selection_for(Workflow.UPDATE))
    if not json_out:
        console.print(
            Text(
                f"plan: minor update of {dep.name}: {len(p.units)} units, estimated "
                f"{p.duration_s / 60:.0f} min on real hardware, planned API downtime: "
                f"{'none' if not p.windows else ', '.join(w.service for w in p.windows)}"
            )
        )


def _demo_phases(
    dep: Any, facts: Any, target_release: str
) -> list[tuple[str, Workflow, Any, dict[str, Any]]]:
    """The demo's phases: the minor update, then the major upgrade stage by stage (its data
    plane only when the deployment has one)."""
    from stepwise.model import NO_FACTS

    phases: list[tuple[str, Workflow, Any, dict[str, Any]]] = [
        ("minor update", Workflow.UPDATE, facts, {})
    ]
    ev = {"extra_vars": {"target_release": target_release}}
    phases += [
        ("upgrade prepare", Workflow.UPGRADE, NO_FACTS, {"stage": Stage.PREPARE, **ev}),
        (
            "upgrade run (control plane)",
            Workflow.UPGRADE,
            NO_FACTS,
            {"stage": Stage.RUN, "plane": Plane.CONTROL, **ev},
        ),
        (
            "upgrade run (data plane)",
            Workflow.UPGRADE,
            NO_FACTS,
            {"stage": Stage.RUN, "plane": Plane.DATA, **ev},
        ),
        (
            "upgrade converge",
            Workflow.UPGRADE,
            NO_FACTS,
            {"stage": Stage.CONVERGE, **ev},
        ),
    ]
    if not any(dep.catalog[s].plane == Plane.DATA for s in dep.instances):
        phases = [ph for ph in phases if ph[0] != "upgrade run (data plane)"]
    return phases


def _run_phases(
    phases: list[tuple[str, Workflow, Any, dict[str, Any]]],
    dep: Any,
    store: Any,
    lab_dir: Path,
    report: dict[str, Any],
    report_path: Path,
    json_out: bool,
    accept_downtime: bool = False,
) -> None:
    """Run each phase in turn (the kernels before them kept to tell which nodes rebooted), then
    write the report."""
    before = kernels(lab_dir)
    try:
        for title, wf, fx, kw in phases:
            report["phases"].append(
                _phase(title, wf, dep, store, lab_dir, fx, json_out, accept_downtime, **dict(kw))
            )
            _after_phase(report, wf, before, lab_dir, json_out)
    finally:
        # written whatever happened: a failed demo is when the report helps most
        _write_report(store, dep, report_path, report, json_out)


def _verdict(report: dict[str, Any], json_out: bool) -> None:
    """The checks that failed go into the report (`failed_checks`, printed under --json) and
    on stderr; the demo then exits EXIT_CHECK_FAILED: a failed check never exits 0."""
    failures = failed_checks(report)
    report["failed_checks"] = failures
    if json_out:
        print_json(report)
    if failures:
        say_failed_checks(failures)
        raise typer.Exit(EXIT_CHECK_FAILED)


def _say_agreement(a: dict[str, Any]) -> None:
    console.print(
        f"status vs lab: {a['checked']} node/service versions checked, "
        f"{len(a['mismatches'])} mismatch(es)"
    )


REPORT_OPT = typer.Option(
    Path("stepwise-demo-report.html"),
    "--report",
    metavar="FILE",
    help="Where to write the HTML report of the demo's runs.",
)
TEMPEST_OPT = typer.Option(
    TempestList.SHORT,
    "--tempest",
    help="tempest's acceptance list after the upgrade: short (per API the tests an upgrade "
    "breaks first, ~1 minute) or full (every identity, image, compute and network test the "
    "lab supports, as CI runs: a few minutes).",
)


@app.command()
def demo(
    deployment: Path = typer.Option(
        EXAMPLE, "--deployment", "-d", help="Deployment to bring up in the lab."
    ),
    lab_dir: Path | None = typer.Option(
        None, "--lab-dir", help="Where the lab lives (default: a temp dir)."
    ),
    target_release: str = typer.Option(
        "R2", "--target-release", help="Release of the major upgrade."
    ),
    keep: bool = typer.Option(False, "--keep", help="Leave the lab up at the end."),
    accept_downtime: bool = ACCEPT_DOWNTIME_OPT,
    tempest: TempestList = TEMPEST_OPT,
    json_out: bool = typer.Option(False, "--json", help="Print a JSON report."),
    report_path: Path = REPORT_OPT,
) -> None:
    """Lab up, plan, minor update, major upgrade (prepare, control plane, data plane, converge),
    probe summary, lab down."""
    import stepwise.lab as lab
    from stepwise.model import load_deployment
    from stepwise.run.discover import discover, stored_facts
    from stepwise.run.store import open_store

    with reported():
        dep = load_deployment(deployment)
        _check_report_dir(report_path)
        work = Path(tempfile.mkdtemp(prefix="stepwise-demo-"))
        lab_dir = lab_dir or work / "lab"
        say = (lambda m: None) if json_out else (lambda m: console.print(Text(m, style="dim")))
        report: dict[str, Any] = {"deployment": str(deployment), "lab": str(lab_dir), "phases": []}
        from stepwise.cli.buildbar import build_bar

        with build_bar(err_console if json_out else console) as build:
            lab.up(deployment, lab_dir, progress=say, build=build)
        try:
            store = open_store(f"sqlite:///{work / (dep.name + '.sqlite')}")
            conn = lab.connector(lab_dir)
            discover(dep, store, connector=conn)
            facts = stored_facts(dep, store)
            _plan_update(dep, facts, json_out)
            phases = _demo_phases(dep, facts, target_release)
            seeded = _openstack_before(lab_dir, report, say)
            _run_phases(phases, dep, store, lab_dir, report, report_path, json_out, accept_downtime)
            _openstack_after(lab_dir, seeded, report, work, json_out, tempest)
            discover(dep, store, connector=conn)
            report["status_agrees_with_lab"] = agreement(store, dep, lab_dir)
            if not json_out:
                _say_agreement(report["status_agrees_with_lab"])
        finally:
            if not keep:
                lab.down(lab_dir)
                import shutil

                shutil.rmtree(work, ignore_errors=True)
                say("lab down")
        _verdict(report, json_out)
