"""`stepwise preflight`: the read-only checks a run makes before its first unit, shown on their
own before a window (a table, or --json); exit 3 when a check fails."""

from __future__ import annotations

from pathlib import Path

import typer

from stepwise.cli.app import app
from stepwise.cli.common import console, print_json, reported
from stepwise.cli.options import DEP, EXTRA, FACTS, INV, JSON, LAB, LIMIT, SECRET, SKIP, STORE, TAGS
from stepwise.errors import UnsafePlanError
from stepwise.model.vocab import Verdict

PREFLIGHT_WORKFLOW = typer.Argument(
    ..., metavar="WORKFLOW", help="update | upgrade | system-upgrade | management-upgrade"
)
PREFLIGHT_STAGE = typer.Option(None, "--stage", help="upgrade only: prepare | run | converge.")


@app.command()
def preflight(
    workflow: str = PREFLIGHT_WORKFLOW,
    deployment: Path = DEP,
    limit: str | None = LIMIT,
    tags: list[str] | None = TAGS,
    skip_tags: list[str] | None = SKIP,
    stage: str | None = PREFLIGHT_STAGE,
    extra_vars: list[str] | None = EXTRA,
    secret: list[str] | None = SECRET,
    store: str | None = STORE,
    facts: Path | None = FACTS,
    lab: Path | None = LAB,
    inventory: Path | None = INV,
    json_out: bool = JSON,
) -> None:
    """Check the nodes of a workflow's plan before a window, changing nothing: free disk,
    repositories, leapp inhibitors (OS upgrade), Galera, pacemaker, Ceph, the services'
    upgrade checks, nodes left prepared or half-done. Exit 3 when a check fails."""
    from stepwise.cli.options import connector, facts_for, parse_extra_vars, parse_secrets
    from stepwise.cli.plan_cmd import _existing_store
    from stepwise.model import load_deployment
    from stepwise.plan import parse_workflow, selection_for
    from stepwise.run.preflight import Context
    from stepwise.run.preflight_play import preflight as run_preflight
    from stepwise.run.resume import run_key
    from stepwise.secrets import Redactor, secret_values
    from stepwise.verify import plan_verified

    with reported():
        dep = load_deployment(deployment)
        wf = parse_workflow(workflow)
        ev = parse_extra_vars(extra_vars)
        hidden = parse_secrets(secret)
        redact = Redactor(secret_values(ev, hidden))
        st = _existing_store(dep, store)
        fx = facts_for(dep, facts, st, wf)
        sel = selection_for(wf, limit, stage=stage, tags=tags or (), skip_tags=skip_tags or ())
        p = plan_verified(wf, dep, fx, sel, variables=ev, runnable=False)
        nodes = tuple(sorted({n for u in p.units for n in u.nodes}))
        report = run_preflight(
            Context(dep, p, ev, nodes),
            st,
            dep.name,
            connector=connector(lab, inventory),
            extra_vars={**ev, **hidden},
            facts=fx,
            run_key=run_key(wf, sel),
        )
        doc = report.to_json()
        for f in doc["findings"]:
            f["detail"] = redact(f["detail"])
        if json_out:
            print_json({"workflow": str(wf), "nodes": list(nodes), **doc})
        else:
            _table(doc, str(wf), len(nodes))
        if not report.ok:
            raise typer.Exit(UnsafePlanError.exit_code)


#: the colour of each verdict in the table
STYLES = {
    Verdict.PASS: "green",
    Verdict.WARN: "yellow",
    Verdict.FAIL: "bold red",
    Verdict.SKIP: "dim",
}


def _table(doc: dict, workflow: str, nodes: int) -> None:
    """One row per node and check; data goes in as Text, never as markup."""
    from rich.table import Table
    from rich.text import Text

    if not doc["findings"]:
        console.print(f"preflight {workflow}: nothing to check (the plan has no unit)")
        return
    table = Table(title=f"preflight {workflow}: {nodes} node(s)", title_justify="left")
    for col in ("node", "check", "verdict", "detail", "what to do"):
        table.add_column(col, overflow="fold")
    for f in doc["findings"]:
        table.add_row(
            Text(f["node"]),
            Text(f["check"]),
            Text(f["verdict"], style=STYLES[Verdict(f["verdict"])]),
            Text(f["detail"]),
            Text(f["todo"]),
        )
    console.print(table)
    failed = doc["failed"]
    console.print(
        Text(
            f"{failed} check(s) failed: a run would refuse to start"
            if failed
            else "every check passed",
            style="bold red" if failed else "green",
        )
    )
