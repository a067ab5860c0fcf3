"""`stepwise validate` and `stepwise plan`: see what will happen before anything runs.

The model, plan and verify layers are imported inside the commands, the run layer (state
store, SQLAlchemy) only when the cloud has a store, and rich's tree only to print one:
every `stepwise` command registers these at start, and a plan of a big cloud should cost its
planning, not its imports (see docs/architecture.md, "Start-up and output at scale").
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import typer

from stepwise.cli.app import app
from stepwise.cli.common import console, err_console, gc_paused, print_json, reported, write_stdout
from stepwise.cli.options import NO_PRESTAGE, PRESTAGE_PARALLEL
from stepwise.cli.safety import esc

if TYPE_CHECKING:
    from datetime import datetime

    from stepwise.model import Deployment
    from stepwise.run.store.store import Store

DEPLOYMENT_OPT = typer.Option(
    ..., "--deployment", "-d", help="The deployment YAML (roles, nodes, services).", metavar="PATH"
)


@app.command()
def validate(
    deployment: Path = DEPLOYMENT_OPT,
    json_out: bool = typer.Option(False, "--json", help="Print a JSON summary."),
) -> None:
    """Check a deployment and its catalog; report every problem with file, line and field."""
    from stepwise.model import load_deployment

    with reported():
        dep = load_deployment(deployment)
        summary = {
            "deployment": dep.name,
            "catalog": dep.catalog.path,
            "services": len(dep.catalog),
            # services: what runs (and is planned); configuration_only: listed with runtime: none
            "roles": [
                {
                    "name": r.name,
                    "nodes": len(r.nodes),
                    "services": list(r.services),
                    "update_serial": r.update_serial,
                    "tags": list(r.tags),
                    "configuration_only": [s for s in r.declared if s not in r.services],
                }
                for r in dep.roles
            ],
            "nodes": len(dep.nodes),
            "valid": True,
        }
        if json_out:
            print_json(summary)
            return
        console.print(
            "[green]valid[/]: "
            + esc(
                f"{dep.name}: {len(dep.roles)} role(s), {len(dep.nodes)} node(s), "
                f"{len(dep.instances)} placed service(s) of {len(dep.catalog)} "
                f"in {dep.catalog.path}"
            )
        )
        for r in dep.roles:  # data: printed as text, brackets included
            console.print(
                f"  {r.name}: {len(r.nodes)} node(s), update_serial {r.update_serial}"
                f"{' [' + ', '.join(r.tags) + ']' if r.tags else ''}: {', '.join(r.services)}"
                + (
                    f" (+{len(r.declared) - len(r.services)} configuration-only)"
                    if len(r.declared) > len(r.services)
                    else ""
                ),
                markup=False,
            )


PLAN_WORKFLOW = typer.Argument(
    ...,
    metavar="WORKFLOW",
    help="update | upgrade | system-upgrade | management-upgrade | rollback",
)
PLAN_RUN = typer.Option(
    None, "--run", help="rollback only: the update run to take back (see `stepwise history`)."
)
PLAN_LIMIT = typer.Option(
    None,
    "--limit",
    "-l",
    help="Nodes or roles, Ansible-style: "
    "controller-0,Compute,'compute-*','!compute-3'. Required for system-upgrade.",
)
PLAN_FACTS = typer.Option(
    None,
    "--facts",
    help="Installed/available versions per node (YAML/JSON); "
    "without it every service's packages are taken to change.",
)
PLAN_STAGE = typer.Option(None, "--stage", help="upgrade only: prepare | run | converge.")
PLAN_PLANE = typer.Option(None, "--plane", help="control | data: only that part of the rollout.")
PLAN_TAGS = typer.Option(
    None,
    "--tags",
    "-t",
    help="Only units with these tags or steps, as the "
    "run commands take them (system_upgrade_prepare, ...).",
)
PLAN_SKIP_TAGS = typer.Option(None, "--skip-tags", help="Leave out units with these tags.")
PLAN_STORE = typer.Option(
    None,
    "--store",
    help="State store whose facts and progress the plan "
    "starts from (default: the cloud's, if it exists).",
)
PLAN_EXTRA_VARS = typer.Option(
    None,
    "--extra-vars",
    "-e",
    help="As the run commands take "
    "them: -e system_upgrade_mode=in-place previews the management "
    "node's upgrade with its OS upgrade.",
)
PLAN_JSON_OUT = typer.Option(
    False, "--json", help="Print the plan as JSON (the documented contract)."
)
PLAN_HTML = typer.Option(
    None,
    "--html",
    metavar="FILE",
    help="Also write the plan's report: one "
    "self-contained HTML file (timeline, availability, the why of each batch); "
    "'-' prints it instead of the plan.",
)
PLAN_EXPAND = typer.Option(
    False,
    "--expand",
    help="Show every batch (a level with many batches is otherwise folded into one line per role).",
)
PLAN_START = typer.Option(
    None,
    "--start",
    metavar="TIME",
    help="With --html: when the plan starts (ISO 8601, UTC unless it names an offset, e.g. "
    "2026-12-01T22:00): the report shows wall-clock times.",
)
PLAN_VERBOSE = typer.Option(False, "--verbose", "-v", help="Show every batch and unit.")
PLAN_FORCE = typer.Option(
    False,
    "--force",
    help="With --html: replace an existing file stepwise did not "
    "write (a report it wrote is replaced anyway).",
)


@app.command()
def plan(
    workflow: str = PLAN_WORKFLOW,
    deployment: Path = DEPLOYMENT_OPT,
    limit: str | None = PLAN_LIMIT,
    facts: Path | None = PLAN_FACTS,
    stage: str | None = PLAN_STAGE,
    plane: str | None = PLAN_PLANE,
    tags: list[str] | None = PLAN_TAGS,
    skip_tags: list[str] | None = PLAN_SKIP_TAGS,
    store: str | None = PLAN_STORE,
    extra_vars: list[str] | None = PLAN_EXTRA_VARS,
    json_out: bool = PLAN_JSON_OUT,
    html: Path | None = PLAN_HTML,
    expand: bool = PLAN_EXPAND,
    verbose: bool = PLAN_VERBOSE,
    force: bool = PLAN_FORCE,
    of_run: int | None = PLAN_RUN,
    start: str | None = PLAN_START,
    prestage_parallel: int = PRESTAGE_PARALLEL,
    no_prestage: bool = NO_PRESTAGE,
) -> None:
    """Show what a workflow will do, in what order, how long it takes and where the downtime is.

    The plan is verified before it is shown: a plan that would break an availability rule,
    a quorum, RPC pinning or the schema-migration order is refused (exit 3) with the reason.
    """
    from stepwise.cli.options import facts_for, parse_extra_vars, prestage_bound
    from stepwise.model import load_deployment
    from stepwise.plan import parse_workflow, selection_for

    with reported(), gc_paused():
        begins = _html_start(start, html, json_out)
        dep = load_deployment(deployment)
        wf = parse_workflow(workflow)
        ev = parse_extra_vars(extra_vars)
        sel = selection_for(
            wf,
            _seed_limit(limit, ev),
            stage=stage,
            plane=plane,
            tags=tags or (),
            skip_tags=skip_tags or (),
            of_run=of_run,
            prestage=prestage_bound(prestage_parallel, no_prestage),
        )
        fx = facts_for(dep, facts, _existing_store(dep, store), wf, of_run)

        p = _previewed(wf, dep, fx, sel, ev)
        if html is not None and str(html) == "-":
            write_stdout(lambda out: out.write(_plan_html(p, dep, begins)))
            return
        if html is not None:
            _write_html(p, dep, html, json_out, force, begins)
        if json_out:
            write_stdout(p.write_json)
            return
        from stepwise.cli.render import render_plan

        render_plan(p, console, verbose=verbose, expand=expand, unmanaged=_unmanaged(dep))
        _say_accept_downtime(p, dep)


def _unmanaged(dep: Deployment) -> dict[str, tuple[str, ...]]:
    """The services each role with nodes runs that stepwise leaves alone (no catalog entry)."""
    return {r.name: r.unmanaged for r in dep.roles if r.unmanaged and r.nodes}


def _seed_limit(limit: str | None, ev: dict) -> str | None:
    """--limit, else `-e system_upgrade_nodes=` (the seed's external-upgrade --limit), taken
    as the run commands take it, so a seed command previews with its own arguments."""
    nodes = ev.get("system_upgrade_nodes")
    return limit if limit is not None or not nodes else str(nodes)


def _previewed(wf, dep: Deployment, fx, sel, ev):
    """The verified plan shown: a preview assuming the earlier seed steps done where that is
    safe, else the plan a run would get (and its refusal)."""
    from stepwise.errors import UnsafePlanError
    from stepwise.verify import plan_verified

    try:
        return plan_verified(wf, dep, fx, sel, variables=ev, runnable=False, preview=True)
    except UnsafePlanError:
        # a step cannot be proven safe on assumptions alone: the refusal a run would get,
        # with the command of the earliest step still to run (when the preview assumed
        # nothing, the same plan and the same refusal)
        return plan_verified(wf, dep, fx, sel, variables=ev, runnable=False)


def _say_accept_downtime(p, dep: Deployment) -> None:
    """Under the windows: which of them a run must accept with --accept-downtime."""
    from stepwise.verify.downtime import ACCEPT_DOWNTIME, downtime_to_accept

    forced = sorted({w.service for w in downtime_to_accept(p, dep)})
    if forced:
        console.print(
            f"{len(forced)} service(s) cannot keep their availability rule with this cloud's "
            f"instances ({', '.join(forced[:6])}{', ...' if len(forced) > 6 else ''}): "
            f"a run takes these windows only with {ACCEPT_DOWNTIME}.",
            markup=False,
            soft_wrap=True,
        )


def _plan_html(p, dep: Deployment, start: datetime | None) -> bytes:
    """The plan's report as `--html -` prints it."""
    from stepwise.observe.report import plan_section, report_html

    return report_html(
        f"stepwise plan: {p.workflow} of {dep.name}", [plan_section(p, dep, start=start)]
    )


def _html_start(start: str | None, html: Path | None, json_out: bool = False) -> datetime | None:
    """`--start`, which only the report uses: without `--html` it is bad input (as is
    `--html -` with `--json`: both would be standard output)."""
    from stepwise.cli.report_cmd import parse_start

    if json_out and html is not None and str(html) == "-":
        from stepwise.errors import InputError, Problem

        raise InputError(
            Problem(
                "--html - and --json both print to standard output",
                field="--html",
                hint="write the report to a file (--html plan.html) or leave out --json",
            )
        )
    begins = parse_start(start)
    if begins is not None and html is None:
        from stepwise.errors import InputError, Problem

        raise InputError(
            Problem("--start goes with --html (the report's wall-clock times)", field="--start")
        )
    return begins


def _write_html(
    p, dep: Deployment, html: Path, json_out: bool, force: bool, start: datetime | None = None
) -> None:
    """The plan's report beside what is printed; the note goes to stderr under --json (stdout
    is the plan there, and scripts parse it)."""
    from stepwise.cli.report_cmd import write_plan_html

    size = write_plan_html(p, dep, html, "--html", force=force, start=start)
    (err_console if json_out else console).print(
        f"wrote {html} ({size / 1024:.0f} KiB)", markup=False, soft_wrap=True
    )


def _existing_store(dep: Deployment, url: str | None) -> Store | None:
    """The cloud's store if one exists; SQLAlchemy is imported only then."""
    from stepwise.run.store.location import existing_store_url

    found = existing_store_url(dep, url)
    if found is None:
        return None
    from stepwise.run.store.store import open_store

    return open_store(found, create=False)  # a read command: never creates, never chmods
