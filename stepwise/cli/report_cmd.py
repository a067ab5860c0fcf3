"""`stepwise report`: one self-contained HTML file of runs (or of a plan) to hand around."""

from __future__ import annotations

import datetime as _dt
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

import typer

from stepwise.cli.app import app
from stepwise.cli.common import console, print_json, reported, write_stdout
from stepwise.cli.options import DEP, EXTRA, FACTS, LIMIT, STORE

if TYPE_CHECKING:
    from datetime import datetime

    from stepwise.model import Deployment
    from stepwise.observe.report.model import Section
    from stepwise.plan.units import Plan
    from stepwise.run.store.store import Store


def write_plan_html(
    plan: Plan,
    dep: Deployment,
    out: Path,
    option: str = "--output",
    force: bool = False,
    start: datetime | None = None,
) -> int:
    """`stepwise plan --html` and `report --plan`: the report of a plan that has not run (with
    wall-clock times from `start`, if given)."""
    from stepwise.observe.report import plan_section

    return _report_to(
        out,
        f"stepwise plan: {plan.workflow} of {dep.name}",
        lambda: [plan_section(plan, dep, start=start)],
        option,
        force,
    )


def _report_to(
    out: Path,
    title: str,
    sections: Callable[[], list[Section]],
    option: str = "--output",
    force: bool = False,
) -> int:
    """Write the report to `out`, or print it when `out` is `-` (as `plan --html -`); its
    size in bytes."""
    from stepwise.observe.report import report_html, write_report

    if str(out) == "-":
        data = report_html(title, sections())
        write_stdout(lambda stream: stream.write(data))
        return len(data)
    return _write(
        out, lambda: write_report(out, title, sections(), field=option, force=force), option
    )


def _write(out: Path, do: Callable[[], int], option: str = "--output") -> int:
    """Run `do` (which writes `out`); a path that cannot be written is bad input, not a bug."""
    from stepwise.errors import InputError, Problem

    try:
        return do()
    except OSError as exc:
        raise InputError(
            Problem(
                f"cannot write the report: {exc.strerror or exc}",
                file=str(out),
                field=option,
                hint="give a path in a directory you can write",
            )
        ) from None


REPORT_RUN = typer.Option(
    None,
    "--run",
    help="A run to report (repeatable; default: the latest run).",
    min=1,
    max=2**62,
)
REPORT_PLAN = typer.Option(
    None,
    "--plan",
    metavar="WORKFLOW",
    help="Report a plan that has not "
    "run instead: update | upgrade | system-upgrade | management-upgrade.",
)
REPORT_STAGE = typer.Option(None, "--stage", help="With --plan: upgrade stage.")
REPORT_PLANE = typer.Option(None, "--plane", help="With --plan: control | data.")
REPORT_OUTPUT = typer.Option(
    ..., "--output", "-o", help="The HTML file to write ('-': stdout).", metavar="FILE"
)
REPORT_FORCE = typer.Option(
    False,
    "--force",
    help="Replace an existing file stepwise did not write (a report it wrote is replaced anyway).",
)
REPORT_JSON_OUT = typer.Option(False, "--json", help="Print what was written as JSON.")
START = typer.Option(
    None,
    "--start",
    metavar="TIME",
    help="With a plan: when it starts (ISO 8601, e.g. 2026-12-01T22:00; UTC unless it names "
    "an offset), to show wall-clock times.",
)


#: the `--start` a plan may have (UTC): a year from 3000 on leaves no room for a long plan's
#: end before datetime's year 9999; before 1970 no cloud was upgraded
START_RANGE = (
    _dt.datetime(1970, 1, 1, tzinfo=_dt.UTC),
    _dt.datetime(3000, 1, 1, tzinfo=_dt.UTC),
)


def parse_start(value: str | None, option: str = "--start") -> datetime | None:
    """The plan's start as an aware datetime (a time without offset is UTC); bad input is an
    InputError naming the option and the form expected."""
    from datetime import UTC, datetime

    from stepwise.errors import InputError, Problem

    if value is None:
        return None
    hint = "give it as YYYY-MM-DDTHH:MM (UTC), e.g. 2026-12-01T22:00"
    try:
        t = datetime.fromisoformat(value.strip())
    except ValueError:
        raise InputError(
            Problem(f"'{value}' is not a date and time", field=option, hint=hint)
        ) from None
    try:
        t = t.replace(tzinfo=UTC) if t.tzinfo is None else t.astimezone(UTC)
    except OverflowError:  # 0001-01-01T00:00+01:00 is in the year 0 in UTC
        t = None
    if t is None or not START_RANGE[0] <= t < START_RANGE[1]:
        # the report adds the plan's length to it, and a time past 9999 has no datetime
        raise InputError(
            Problem(
                f"'{value}' is not between {START_RANGE[0]:%Y-%m-%d} and {START_RANGE[1]:%Y-%m-%d}",
                field=option,
                hint=hint,
            )
        )
    return t


@app.command()
def report(
    deployment: Path = DEP,
    store: str | None = STORE,
    run: list[int] | None = REPORT_RUN,
    plan: str | None = REPORT_PLAN,
    limit: str | None = LIMIT,
    facts: Path | None = FACTS,
    stage: str | None = REPORT_STAGE,
    plane: str | None = REPORT_PLANE,
    extra_vars: list[str] | None = EXTRA,
    output: Path = REPORT_OUTPUT,
    force: bool = REPORT_FORCE,
    json_out: bool = REPORT_JSON_OUT,
    start: str | None = START,
) -> None:
    """Write one self-contained HTML report (timeline, availability, summary) of runs or a plan.

    It opens in any browser with no network: scripts and styles are inline, nothing is fetched."""
    from stepwise.errors import InputError, Problem
    from stepwise.model import load_deployment
    from stepwise.run.store.store import existing_store

    with reported():
        if json_out and str(output) == "-":
            raise InputError(
                Problem(
                    "-o - and --json both print to standard output",
                    field="--output",
                    hint="write the report to a file (-o report.html) or leave out --json",
                )
            )
        begins = parse_start(start)
        dep = load_deployment(deployment)
        if plan is None and begins is not None:
            raise InputError(
                Problem("--start is for a plan (a run has its own times)", field="--start")
            )
        if plan is not None:
            if run:
                raise InputError(Problem("give --run or --plan, not both", field="--plan"))
            from stepwise.cli.options import facts_for, parse_extra_vars
            from stepwise.plan import parse_workflow, selection_for
            from stepwise.verify import plan_verified

            wf = parse_workflow(plan)
            fx = facts_for(dep, facts, existing_store(dep, store), wf)
            sel = selection_for(wf, limit, stage=stage, plane=plane)
            ev = parse_extra_vars(extra_vars)
            p = plan_verified(wf, dep, fx, sel, variables=ev, runnable=False)
            size = write_plan_html(p, dep, output, force=force, start=begins)
        else:
            st, ids = _runs_to_report(dep, store, run)
            size = write_runs_html(st, dep, ids, output, force=force)
        if json_out:
            print_json({"wrote": str(output), "bytes": size})
        elif str(output) != "-":  # the report itself is on stdout
            console.print(f"wrote {output} ({size / 1024:.0f} KiB)", markup=False, soft_wrap=True)


def _runs_to_report(dep, store: str | None, run: list[int] | None):
    """The cloud's store and the runs to report (the last one when none is named); a run of
    another cloud or of none is refused."""
    from stepwise.errors import InputError, Problem
    from stepwise.run.store.store import existing_store

    st = existing_store(dep, store)
    runs = st.runs(dep.name, limit=1) if st is not None else []
    if st is None or not runs:
        raise InputError(
            Problem(
                f"no run recorded for cloud {dep.name} yet",
                field="--run",
                hint="report a plan with --plan WORKFLOW",
            )
        )
    ids = list(run or [runs[0].id])
    for i in ids:
        r = st.run(i)
        if r is None or r.cloud != dep.name:
            raise InputError(
                Problem(
                    f"no run {i} for cloud {dep.name}",
                    field="--run",
                    hint="see `stepwise history` for the run ids",
                )
            )
    return st, ids


def write_runs_html(
    store: Store,
    dep: Deployment,
    run_ids: list[int],
    out: Path,
    title: str | None = None,
    force: bool = False,
) -> int:
    """The report of stored runs (the demo writes its own runs' report with it)."""
    from stepwise.observe.report import run_section_from_store

    return _report_to(
        out,
        title or f"stepwise report: {dep.name}, run " + ", ".join(map(str, run_ids)),
        lambda: [run_section_from_store(store, i, dep) for i in run_ids],
        force=force,
    )
