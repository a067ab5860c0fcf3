"""Input adapters: a TripleO roles file or an Ansible inventory -> a stepwise deployment.

The model layer's way in for a cloud as it is. `import_tripleo` reads tripleo-heat-templates'
`roles_data.yaml` (read and checked by `tripleo.py`), optionally with the
`tripleo-ansible-inventory.yaml` of the deployed stack for the real hosts and addresses;
`import_inventory` reads any Ansible inventory whose groups are roles. THT names reach catalog
entries through the catalog's alias table. The result is a plain deployment document that has
already been checked the way `load_deployment` checks a file, so what is written is valid.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from stepwise.errors import InputError, Problem
from stepwise.model.catalog import Catalog
from stepwise.model.checks import validate
from stepwise.model.deployment import CONTROLPLANE_TAG, Deployment, build_deployment
from stepwise.model.inventory import Group, Host, Inventory, hosts_by_group, load_inventory
from stepwise.model.specs import NAME_RE, DeploymentSpec
from stepwise.model.tripleo import (
    CONTROL_TAGS,
    MANAGEMENT_ROLES,
    RolesFile,
    ThtRole,
    disabled_services,
    load_roles_file,
)
from stepwise.model.tripleo_containers import load_containers_prepare
from stepwise.model.values import check_address
from stepwise.model.yamlsrc import line_of


@dataclass
class Imported:
    """An imported deployment: the document to write, the checked model, notes for the operator."""

    doc: dict[str, Any]
    deployment: Deployment
    notes: list[str] = field(default_factory=list)


def closest(name: str, catalog: Catalog) -> str:
    """A hint naming the known names closest to `name` (THT aliases compare without the prefix)."""
    known = catalog.known_names()
    close = difflib.get_close_matches(name, known, n=2, cutoff=0.6)
    if not close and "::" in name:
        tail = name.rsplit("::", 1)[-1].lower()
        close = [
            a for a in known if a.rsplit("::", 1)[-1].lower() == tail
        ] or difflib.get_close_matches(name, [a for a in known if "::" in a], n=2, cutoff=0.4)
    return (
        f"did you mean {' or '.join(close)}?"
        if close
        else "add a catalog entry (or an alias to an existing one) for it; "
        "`stepwise catalog list` shows them all"
    )


@dataclass(frozen=True)
class _Findings:
    """What an import found: problems (raised together, in the order found) and notes."""

    problems: list[Problem] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class _ListAt:
    """Where a list of names was read: its file and either the YAML document with the trail to
    the list (each item at its own line) or one line for them all."""

    file: str
    doc: Any = None
    trail: tuple[Any, ...] = ()
    line: int | None = None
    #: the field that holds the list, as the error names it
    key: str = "services"

    def item_line(self, i: int) -> int | None:
        """The line of item `i` of the list."""
        return line_of(self.doc, [*self.trail, i]) if self.doc is not None else self.line


def _kind(value: Any) -> str:
    """What a YAML value is, in words (never its repr: a deep or huge value stays out of it)."""
    if isinstance(value, Mapping):
        return "mapping"
    if isinstance(value, (list, tuple)):
        return "list"
    return type(value).__name__


def _resolve_services(
    names: list[Any],
    catalog: Catalog,
    role: str,
    at: _ListAt,
    found: _Findings,
    skip: frozenset[str] = frozenset(),
) -> list[str]:
    """Canonical names of `names` (names or aliases), each once; unknown ones become problems
    at their line."""
    out: list[str] = []
    for i, raw in enumerate(names):
        line = at.item_line(i)
        # checked before `skip`: a list or mapping item is unhashable (a TypeError, exit 70)
        if not isinstance(raw, str):
            found.problems.append(
                Problem(
                    f"a service name must be a string, not a {_kind(raw)}",
                    file=at.file,
                    line=line,
                    field=f"{role}.{at.key}[{i}]",
                    hint="list each service by its name, one string per item",
                )
            )
            continue
        if raw in skip:
            continue
        canonical = catalog.resolve(raw)
        if canonical is None:
            found.problems.append(
                Problem(
                    f"unknown service '{raw}' (role {role})",
                    file=at.file,
                    line=line,
                    hint=closest(raw, catalog),
                )
            )
        elif canonical in out:
            # several THT services are one catalog entry (OsloMessagingRpc and ...Notify are
            # one rabbitmq; the backend services one configuration): worth a word only when
            # something runs
            if catalog[canonical].has_runtime:
                found.notes.append(f"{role}: {raw} is {canonical}, already listed")
        else:
            out.append(canonical)
    return out


def _tags(name: str, tht_tags: list[str], services: list[str], catalog: Catalog) -> list[str]:
    """stepwise tags of an imported role: management for the undercloud; controlplane for THT's
    primary/controller roles and for roles that run only infra/control services (THT's
    Database and Messaging carry no tag, yet their clusters are updated with the controllers)."""
    if name in MANAGEMENT_ROLES:
        return ["management"]
    running = [catalog[s] for s in services if catalog[s].has_runtime]
    if CONTROL_TAGS & set(tht_tags) or (running and all(s.plane != "data" for s in running)):
        return [CONTROLPLANE_TAG]
    return []


def _tag_roles(roles: list[dict[str, Any]], catalog: Catalog, notes: list[str]) -> None:
    """stepwise's tags for imported roles (in place; each role's `tags` holds THT's on entry).

    Services every role runs (logrotate_crond, snmp, ...) say nothing about what a role is:
    a role is judged by its own. A role left with none of its own that runs (all disabled by
    the environment files) is not control plane, and the operator is told."""
    common = set.intersection(*(set(r["services"]) for r in roles)) if len(roles) > 1 else set()
    for r in roles:
        own = [s for s in r["services"] if s not in common]
        r["tags"] = _tags(r["name"], r["tags"], own, catalog)
        if r["name"] not in MANAGEMENT_ROLES and not any(catalog[s].has_runtime for s in own):
            notes.append(
                f"{r['name']}: no service of its own is left running (disabled, or only what "
                "every role runs): not tagged control plane; an update touches its nodes only "
                "for packages no service owns and reboots"
            )


def _nodes_from_hosts(
    hosts: list[Host], inv_path: str, problems: list[Problem]
) -> list[dict[str, Any]]:
    nodes = []
    for h in hosts:
        if not re.fullmatch(NAME_RE, h.name):
            problems.append(
                Problem(
                    f"host name '{h.name}' is not a valid node name",
                    file=inv_path,
                    line=h.line,
                    hint="letters, digits, '_', '.', '-'; not starting with a digit or '-'",
                )
            )
            continue
        node: dict[str, Any] = {"name": h.name}
        if h.address is not None:
            try:
                node["address"] = check_address(h.address)
            except ValueError as exc:
                problems.append(
                    Problem(str(exc), file=inv_path, line=h.line, field=f"{h.name}.ansible_host")
                )
                continue
        nodes.append(node)
    return nodes


@dataclass(frozen=True)
class _StackSources:
    """What a roles file's roles are imported against: the catalog, the services the
    environment files disable and the stack inventory's hosts by group (its path if given)."""

    catalog: Catalog
    disabled: dict[str, str]
    hosts: dict[str, list[Host]]
    inventory: str | None


def import_tripleo(
    roles_data: Path | str,
    catalog: Catalog,
    *,
    stack: str = "overcloud",
    inventory: Path | str | None = None,
    counts: dict[str, int] | None = None,
    catalog_ref: str | None = None,
    environments: list[Path | str] | None = None,
    containers_prepare: Path | str | None = None,
) -> Imported:
    """Import a THT roles file (and the stack's inventory) as a deployment document; services
    the environment files map to OS::Heat::None are left out (a roles file lists what a role
    may run, the resource registry decides what is deployed). With `containers_prepare`
    (containers-prepare-parameter.yaml) the cloud is containerized: `style: tripleo` and the
    `containers:` block its ContainerImagePrepare describes."""
    disabled = disabled_services(list(environments or ()))
    roles_file = load_roles_file(roles_data, stack)
    fname = roles_file.fname
    hosts = hosts_by_group(load_inventory(inventory)) if inventory is not None else {}
    inv_path = str(inventory) if inventory is not None else None
    sources = _StackSources(catalog, disabled, hosts, inv_path)
    counts = dict(counts or {})
    found = _Findings()
    roles: list[dict[str, Any]] = []
    for ri in range(len(roles_file.doc)):
        role = roles_file.role(ri, found.problems)
        if role is not None:
            roles.append(_imported_role(roles_file, role, sources, counts, found))
    for role_name in counts:
        found.problems.append(
            Problem(
                f"--count names role '{role_name}', which the roles file does not have",
                file=fname,
                field="--count",
            )
        )
    if found.problems:
        raise InputError(found.problems)
    _tag_roles(roles, catalog, found.notes)
    # the source names are data: they go into the document (serialised by the YAML library),
    # never into a comment of the written file
    names = Path(fname).name + (f" and {Path(inv_path).name}" if inv_path is not None else "")
    result: dict[str, Any] = {
        "name": stack,
        "description": f"imported from {names} (TripleO stack {stack})",
    }
    if containers_prepare is not None:
        result["style"] = "tripleo"
        result["containers"] = load_containers_prepare(containers_prepare)
    return _checked(result, roles, catalog, catalog_ref, fname, found.notes)


def _imported_role(
    roles_file: RolesFile,
    role: ThtRole,
    sources: _StackSources,
    counts: dict[str, int],
    found: _Findings,
) -> dict[str, Any]:
    """The deployment document's role for a THT role: its deployed services as catalog
    entries, its nodes from the stack inventory or else counted (its --count taken from
    `counts`)."""
    skipped = [str(s) for s in role.services if isinstance(s, str) and s in sources.disabled]
    if skipped:
        found.notes.append(
            f"{role.name}: {len(skipped)} service(s) mapped to OS::Heat::None left out"
        )
    services = _resolve_services(
        role.services,
        sources.catalog,
        role.name,
        _ListAt(
            roles_file.fname,
            roles_file.doc,
            (role.index, "ServicesDefault"),
            key="ServicesDefault",
        ),
        found,
        skip=frozenset(skipped),
    )
    out: dict[str, Any] = {
        "name": role.name,
        "tags": [str(t) for t in role.tags],  # THT's: replaced by _tag_roles
        "update_serial": max(1, role.update_serial),
        "services": services,
    }
    if role.name in sources.hosts:
        out["nodes"] = _nodes_from_hosts(
            sources.hosts[role.name], str(sources.inventory), found.problems
        )
        return out
    n = counts.pop(role.name, role.count)
    out["nodes"] = {"count": n, "name": roles_file.node_names(role, found.problems)}
    if n == 0:
        found.notes.append(
            f"{role.name}: no nodes (CountDefault is 0 and the inventory has no group "
            f"{role.name}); give --count {role.name}=N"
        )
    return out


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
    found = _Findings()
    roles: list[dict[str, Any]] = []
    for group, hosts in hosts_by_group(inv).items():
        g = inv.groups[group]
        svc = _group_services(g, given.pop(group, None), catalog, fname, found)
        if svc is None:
            continue
        tags = (
            [CONTROLPLANE_TAG]
            if group in (controlplane or ())
            else _tags(group, [], svc, catalog)
            if svc
            else []
        )
        roles.append(
            {
                "name": group,
                "tags": tags,
                "update_serial": 1,
                "services": svc,
                "nodes": _nodes_from_hosts(hosts, fname, found.problems),
            }
        )
    found.problems.extend(_option_problems(inv, given, controlplane or []))
    if not roles and not found.problems:
        found.problems.append(Problem("the inventory has no group with hosts", file=fname))
    if found.problems:
        raise InputError(found.problems)
    result = {"name": name, "description": f"imported from {Path(fname).name}"}
    return _checked(result, roles, catalog, catalog_ref, fname, found.notes)


def _group_services(
    group: Group, given: list[str] | None, catalog: Catalog, fname: str, found: _Findings
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
    return _resolve_services(
        list(raw),
        catalog,
        group.name,
        _ListAt(fname, line=group.line, key="vars.stepwise_services"),
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


def _checked(
    head: dict[str, Any],
    roles: list[dict[str, Any]],
    catalog: Catalog,
    catalog_ref: str | None,
    source: str,
    notes: list[str],
) -> Imported:
    """The document with its roles, checked as `load_deployment` checks a file."""
    doc: dict[str, Any] = dict(head)
    if catalog_ref:
        doc["catalog"] = catalog_ref
    doc["roles"] = [{k: v for k, v in r.items() if v != [] or k == "services"} for r in roles]
    where = f"{source} (as imported)"
    spec = validate(DeploymentSpec, doc, None, where)
    dep = build_deployment(spec, catalog, None, where)
    forced = dep.forced_downtime
    if forced:
        # not an error (a one-controller cloud is a real cloud), but the operator should know
        # before the first plan shows the windows
        first = sorted(forced)[0]
        notes.append(
            f"{len(forced)} service(s) cannot stay available while updated with these counts "
            f"({first}: {forced[first]}): plans announce their downtime windows and runs need "
            "--accept-downtime"
        )
    return Imported(doc, dep, notes)
