"""Input adapters: a TripleO roles file or an Ansible inventory -> a stepwise deployment.

The model layer's way in for a cloud as it is. `import_tripleo` (`import_tht.py`) reads
tripleo-heat-templates' `roles_data.yaml` with the stack's environment files and inventory;
`import_kolla` and `import_openstack_ansible` read those deployers' own descriptions;
`import_inventory` reads any Ansible inventory whose groups are roles. THT names reach catalog
entries through the catalog's alias table. The result is a plain deployment document that has
already been checked the way `load_deployment` checks a file, so what is written is valid.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from stepwise.errors import InputError, Problem
from stepwise.model.catalog import Catalog
from stepwise.model.deployment import CONTROLPLANE_TAG
from stepwise.model.import_common import (
    Findings,
    Imported,
    ListAt,
    checked,
    closest,
    nodes_from_hosts,
    resolve_services,
    role_tags,
)
from stepwise.model.import_tht import import_tripleo
from stepwise.model.inventory import Group, Inventory, hosts_by_group, load_inventory
from stepwise.model.specs import NAME_RE

__all__ = ["Imported", "closest", "import_inventory", "import_tripleo"]


def import_inventory(
    inventory: Path | str,
    catalog: Catalog,
    *,
    name: str = "cloud",
    services: dict[str, list[str]] | None = None,
    controlplane: list[str] | None = None,
    catalog_ref: str | None = None,
) -> Imported:
    """Import an Ansible inventory: each group with hosts is a role; its services come from
    `services` (--services GROUP=a,b) or the group var `stepwise_services` (a list or "a,b")."""
    inv = load_inventory(inventory)
    fname = inv.path
    if not re.fullmatch(NAME_RE, name):
        raise InputError(Problem(f"deployment name '{name}' is not a valid name", field="--name"))
    given = dict(services or {})
    found = Findings()
    roles: list[dict[str, Any]] = []
    for group, hosts in hosts_by_group(inv).items():
        g = inv.groups[group]
        svc = _group_services(g, given.pop(group, None), catalog, fname, found)
        if svc is None:
            continue
        tags = (
            [CONTROLPLANE_TAG]
            if group in (controlplane or ())
            else role_tags(group, [], svc, catalog)
            if svc
            else []
        )
        roles.append(
            {
                "name": group,
                "tags": tags,
                "update_serial": 1,
                "services": svc,
                "nodes": nodes_from_hosts(hosts, fname, found.problems),
            }
        )
    found.problems.extend(_option_problems(inv, given, controlplane or []))
    if not roles and not found.problems:
        found.problems.append(Problem("the inventory has no group with hosts", file=fname))
    if found.problems:
        raise InputError(found.problems)
    result = {"name": name, "description": f"imported from {Path(fname).name}"}
    return checked(result, roles, catalog, catalog_ref, fname, found.notes)


def _group_services(
    group: Group, given: list[str] | None, catalog: Catalog, fname: str, found: Findings
) -> list[str] | None:
    """The catalog services of an inventory group: `given` (--services) or else its group var
    `stepwise_services`; None (and a problem) when it has none or they are not a list."""
    raw: Any = given
    if raw is None:
        var = group.vars.get("stepwise_services")
        raw = [s.strip() for s in var.split(",") if s.strip()] if isinstance(var, str) else var
    if not raw:
        found.problems.append(
            Problem(
                f"group '{group.name}' has hosts but no services",
                file=fname,
                line=group.line,
                hint=f"give --services {group.name}=svc1,svc2 or the group var stepwise_services",
            )
        )
        return None
    if not isinstance(raw, list):
        found.problems.append(
            Problem(
                "stepwise_services must be a list or a comma-separated string",
                file=fname,
                line=group.line,
                field=f"{group.name}.vars.stepwise_services",
            )
        )
        return None
    return resolve_services(
        list(raw),
        catalog,
        group.name,
        ListAt(fname, line=group.line, key="vars.stepwise_services"),
        found,
    )


def _option_problems(
    inv: Inventory, given: dict[str, list[str]], controlplane: list[str]
) -> list[Problem]:
    """What is wrong with the options: --services for groups without hosts (left in `given`),
    --controlplane for groups that are not roles."""
    problems = [
        Problem(
            f"--services names group '{group}', which has no hosts in the inventory",
            file=inv.path,
            field="--services",
        )
        for group in given
    ]
    with_hosts = set(hosts_by_group(inv))
    problems.extend(
        Problem(
            f"--controlplane names group '{group}', which is not a role of the inventory "
            "(a group with hosts)",
            file=inv.path,
            field="--controlplane",
            hint=f"one of: {', '.join(sorted(with_hosts)) or '(none)'}",
        )
        for group in controlplane
        if group not in with_hosts
    )
    return problems
