"""`export`: the plan as standalone playbooks, for operators who drive Ansible themselves."""

from __future__ import annotations

from pathlib import Path

import typer

from stepwise.cli.app import app
from stepwise.cli.common import console, print_json, reported
from stepwise.cli.options import (
    DEP,
    FACTS,
    INV,
    LAB,
    LIMIT,
    SKIP,
    STORE,
    TAGS,
    connector,
    facts_for,
)
from stepwise.model import load_deployment

EXPORT_WORKFLOW = typer.Argument(
    ..., metavar="WORKFLOW", help="update | upgrade | system-upgrade | management-upgrade"
)
EXPORT_OUTPUT = typer.Option(..., "--output", "-o", help="Directory to write.")
EXPORT_STAGE = typer.Option(None, "--stage")
EXPORT_PLANE = typer.Option(None, "--plane")
EXPORT_FORCE = typer.Option(
    False,
    "--force",
    help="Replace an export stepwise wrote in that directory (never another directory).",
)
EXPORT_JSON_OUT = typer.Option(False, "--json", help="Print what was written as JSON.")


@app.command()
def export(
    workflow: str = EXPORT_WORKFLOW,
    deployment: Path = DEP,
    output: Path = EXPORT_OUTPUT,
    limit: str | None = LIMIT,
    tags: list[str] | None = TAGS,
    skip_tags: list[str] | None = SKIP,
    stage: str | None = EXPORT_STAGE,
    plane: str | None = EXPORT_PLANE,
    facts: Path | None = FACTS,
    store: str | None = STORE,
    lab: Path | None = LAB,
    inventory: Path | None = INV,
    force: bool = EXPORT_FORCE,
    json_out: bool = EXPORT_JSON_OUT,
) -> None:
    """Write the verified plan as standalone playbooks (site.yml, one file per unit, inventory,
    ansible.cfg) for `ansible-playbook`."""
    from stepwise.plan import parse_workflow, selection_for
    from stepwise.run.export import export as do_export
    from stepwise.run.store.store import existing_store
    from stepwise.verify import plan_verified

    with reported():
        dep = load_deployment(deployment)
        wf = parse_workflow(workflow)
        fx = facts_for(dep, facts, existing_store(dep, store), wf)
        sel = selection_for(
            wf, limit, stage=stage, plane=plane, tags=tags or (), skip_tags=skip_tags or ()
        )
        plan = plan_verified(wf, dep, fx, sel, runnable=False)
        files = do_export(plan, dep, output, connector=connector(lab, inventory), force=force)
        if json_out:
            print_json(
                {
                    "wrote": str(output),
                    "files": [str(f) for f in files],
                    "units": len(plan.units),
                    "playbook": str(Path(output) / "site.yml"),
                    "inventory": str(Path(output) / "inventory.yml"),
                }
            )
            return
        console.print(
            f"wrote {len(files)} files to {output}: ansible-playbook -i {output}/inventory.yml "
            f"{output}/site.yml",
            markup=False,
        )
