"""`export`: the plan as standalone playbooks, for operators who drive Ansible themselves."""

from __future__ import annotations

from pathlib import Path
from typing import List, Optional

import typer

from stepwise.cli.common import console, print_json, reported
from stepwise.cli.main import app
from stepwise.cli.options import DEP, FACTS, INV, LAB, LIMIT, SKIP, STORE, TAGS, connector, facts_for
from stepwise.model import load_deployment


@app.command()
def export(workflow: str = typer.Argument(..., metavar="WORKFLOW", help="update | upgrade | system-upgrade | "
                                          "management-upgrade"),
           deployment: Path = DEP, output: Path = typer.Option(..., "--output", "-o", help="Directory to write."),
           limit: Optional[str] = LIMIT, tags: Optional[List[str]] = TAGS, skip_tags: Optional[List[str]] = SKIP,
           stage: Optional[str] = typer.Option(None, "--stage"), plane: Optional[str] = typer.Option(None, "--plane"),
           facts: Optional[Path] = FACTS, store: Optional[str] = STORE, lab: Optional[Path] = LAB,
           inventory: Optional[Path] = INV,
           force: bool = typer.Option(False, "--force", help="Replace an export stepwise wrote in that directory "
                                      "(never another directory)."),
           json_out: bool = typer.Option(False, "--json", help="Print what was written as JSON.")) -> None:
    """Write the verified plan as standalone playbooks (site.yml, one file per unit, inventory,
    ansible.cfg) for `ansible-playbook`."""
    from stepwise.plan import make_plan
    from stepwise.run.export import export as do_export
    from stepwise.run.store.store import existing_store
    from stepwise.verify import verify_plan

    from stepwise.plan import parse_workflow

    with reported():
        dep = load_deployment(deployment)
        wf = parse_workflow(workflow)
        fx = facts_for(dep, facts, existing_store(dep, store), wf)
        plan = verify_plan(make_plan(wf, dep, fx, limit, stage=stage, plane=plane, tags=tags or (),
                                     skip_tags=skip_tags or ()), dep)
        files = do_export(plan, dep, output, connector=connector(lab, inventory), force=force)
        if json_out:
            print_json({"wrote": str(output), "files": [str(f) for f in files], "units": len(plan.units),
                        "playbook": str(Path(output) / "site.yml"), "inventory": str(Path(output) / "inventory.yml")})
            return
        console.print(f"wrote {len(files)} files to {output}: ansible-playbook -i {output}/inventory.yml "
                      f"{output}/site.yml", markup=False)
