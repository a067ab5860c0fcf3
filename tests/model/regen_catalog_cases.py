"""The tasks each built-in catalog entry renders, per workflow, deployment style and step: what
`tests/model/catalog_cases/<service>.json` records and `test_catalog_cases.py` compares.

After a deliberate change to the catalog (or to how its tasks are rendered), regenerate them
and review the diff as part of the change:

    .venv/bin/python -m tests.model.regen_catalog_cases

It rewrites every entry's file and removes the files of entries the catalog no longer has.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from stepwise.model import Catalog, Deployment, load_catalog
from stepwise.model.choices import DeployStyle
from stepwise.model.vocab import Section, Step, Workflow, task_source
from stepwise.run.service_tasks import service_tasks

CASES_DIR = Path(__file__).resolve().parent / "catalog_cases"


def _section_of(step: Step, workflow: Workflow) -> Section | None:
    """The catalog section `step`'s tasks come from in `workflow` (None: no section)."""
    src = task_source(step, workflow)
    return None if src is None else src[0]


#: the steps recorded per workflow: a step whose tasks come from a section that another
#: workflow records already (backup in an update, stop in an OS upgrade) would only repeat it
WORKFLOW_STEPS: dict[Workflow, tuple[Step, ...]] = {
    Workflow.UPDATE: tuple(
        s for s in Step if _section_of(s, Workflow.UPDATE) in (None, Section.UPDATE)
    ),
    Workflow.UPGRADE: tuple(
        s for s in Step if _section_of(s, Workflow.UPGRADE) is not Section.SYSTEM_UPGRADE
    ),
    Workflow.SYSTEM_UPGRADE: tuple(
        s for s in Step if _section_of(s, Workflow.SYSTEM_UPGRADE) is Section.SYSTEM_UPGRADE
    ),
}


def entry_cases(catalog: Catalog, service: str) -> dict[str, Any]:
    """workflow -> style -> step -> the tasks `service` renders there (empty ones left out).

    Tasks equal to those of the same step in a workflow and style recorded before are written
    as "same as WORKFLOW STYLE": the file shows what each style and workflow changes, and a
    step that stops (or starts) being the same shows in the diff."""
    # the tasks of a service read only the deployment's catalog: no roles, no nodes
    deployment = Deployment(name="catalog-cases", roles=(), catalog=catalog)
    out: dict[str, Any] = {"service": service}
    seen: dict[str, list[tuple[str, list[dict[str, Any]]]]] = {}
    for workflow, steps in WORKFLOW_STEPS.items():
        styles: dict[str, Any] = {}
        for style in DeployStyle:
            rendered: dict[str, Any] = {}
            for step in steps:
                tasks = service_tasks(deployment, workflow, service, step, style)
                if tasks:
                    rendered[str(step)] = _same_as(seen.setdefault(step, []), tasks)
                    seen[step].append((f"{workflow} {style}", tasks))
            if rendered:
                styles[str(style)] = rendered
        if styles:
            out[str(workflow)] = styles
    return out


def _same_as(before: list[tuple[str, list[dict[str, Any]]]], tasks: list[dict[str, Any]]) -> Any:
    """`tasks`, or "same as WHERE" naming the first place recorded before with these tasks."""
    for where, earlier in before:
        if earlier == tasks:
            return f"same as {where}"
    return tasks


def dumps(cases: dict[str, Any]) -> str:
    """The file text of one entry's cases (stable, one key per line: a reviewable diff)."""
    return json.dumps(cases, indent=1, ensure_ascii=False) + "\n"


def case_file(service: str) -> Path:
    """Where the cases of `service` are recorded."""
    return CASES_DIR / f"{service}.json"


def regenerate(catalog: Catalog | None = None) -> list[str]:
    """Write every entry's cases and remove stale files; returns the files that changed."""
    catalog = catalog if catalog is not None else load_catalog()
    CASES_DIR.mkdir(exist_ok=True)
    changed: list[str] = []
    for service in catalog.services:
        path = case_file(service)
        text = dumps(entry_cases(catalog, service))
        if not path.exists() or path.read_text() != text:
            path.write_text(text)
            changed.append(path.name)
    for stale in CASES_DIR.glob("*.json"):
        if stale.stem not in catalog.services:
            stale.unlink()
            changed.append(stale.name)
    return changed


if __name__ == "__main__":
    done = regenerate()
    print(f"{len(done)} file(s) changed under {CASES_DIR}", *done, sep="\n  ")
    sys.exit(0)
