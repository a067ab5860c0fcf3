"""Input adapters: a TripleO roles file or an Ansible inventory -> a stepwise deployment.

The model layer's way in for a cloud as it is. `import_tripleo` reads tripleo-heat-templates'
`roles_data.yaml` (a list of roles with `name`, `CountDefault`, `HostnameFormatDefault`,
`tags`, `update_serial`, `ServicesDefault` of `OS::TripleO::Services::*`), optionally with the
`tripleo-ansible-inventory.yaml` of the deployed stack for the real hosts and addresses;
`import_inventory` reads any Ansible inventory whose groups are roles. THT names reach catalog
entries through the catalog's alias table. The result is a plain deployment document that has
already been checked the way `load_deployment` checks a file, so what is written is valid.
"""

from __future__ import annotations

import difflib
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from stepwise.errors import InputError, Problem
from stepwise.model.catalog import Catalog
from stepwise.model.checks import validate
from stepwise.model.deployment import CONTROLPLANE_TAG, Deployment, build_deployment
from stepwise.model.inventory import Host, hosts_by_group, load_inventory
from stepwise.model.specs import NAME_RE, DeploymentSpec
from stepwise.model.values import check_address
from stepwise.model.yamlsrc import line_of, load_yaml

#: THT role tags that make a role part of the control plane (updated before the data plane)
CONTROL_TAGS = frozenset({"primary", "controller"})
#: THT role names of the management node (upgraded by `undercloud-upgrade`, on its own)
MANAGEMENT_ROLES = frozenset({"Undercloud", "UndercloudMinion"})


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


def _resolve_services(
    names: list[Any],
    catalog: Catalog,
    doc: Any,
    trail: list[Any],
    fname: str,
    problems: list[Problem],
    notes: list[str],
    role: str,
    line: int | None = None,
    skip: frozenset[str] = frozenset(),
) -> list[str]:
    """Canonical names of `names` (names or aliases), each once; unknown ones become problems
    at their line (or at `line` when the names do not come from a YAML document)."""
    out: list[str] = []
    for i, raw in enumerate(names):
        if raw in skip:
            continue
        line = line_of(doc, trail + [i]) if doc is not None else line
        if not isinstance(raw, str):
            problems.append(
                Problem(f"a service name must be a string, not {raw!r}", file=fname, line=line)
            )
            continue
        canonical = catalog.resolve(raw)
        if canonical is None:
            problems.append(
                Problem(
                    f"unknown service '{raw}' (role {role})",
                    file=fname,
                    line=line,
                    hint=closest(raw, catalog),
                )
            )
        elif canonical in out:
            # several THT services are one catalog entry (OsloMessagingRpc and ...Notify are
            # one rabbitmq; the backend services one configuration): worth a word only when
            # something runs
            if catalog[canonical].has_runtime:
                notes.append(f"{role}: {raw} is {canonical}, already listed")
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


def _hostname_template(fmt: str, stack: str) -> str:
    """THT's `%stackname%-controller-%index%` as a stepwise counted name."""
    return (
        fmt.replace("{", "{{")
        .replace("}", "}}")
        .replace("%stackname%", stack)
        .replace("%index%", "{index}")
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


def disabled_services(environments: list[Path | str]) -> dict[str, str]:
    """THT service names the environment files map to `OS::Heat::None` (not deployed), with
    the file that says so; a later file overrides an earlier one, as `openstack overcloud
    deploy -e` does."""
    registry: dict[str, tuple[Any, str]] = {}
    for env in environments:
        doc = load_yaml(Path(env))
        reg = doc.get("resource_registry") if isinstance(doc, dict) else None
        if reg is None:
            continue
        if not isinstance(reg, dict):
            raise InputError(
                Problem(
                    "resource_registry must be a mapping",
                    file=str(env),
                    line=line_of(doc, ["resource_registry"]),
                )
            )
        for key, value in reg.items():
            registry[str(key)] = (value, str(env))
    return {k: src for k, (v, src) in registry.items() if v == "OS::Heat::None"}


def import_tripleo(
    roles_data: Path | str,
    catalog: Catalog,
    *,
    stack: str = "overcloud",
    inventory: Path | str | None = None,
    counts: dict[str, int] | None = None,
    catalog_ref: str | None = None,
    environments: list[Path | str] | None = None,
) -> Imported:
    """Import a THT roles file (and the stack's inventory) as a deployment document; services
    the environment files map to OS::Heat::None are left out (a roles file lists what a role
    may run, the resource registry decides what is deployed)."""
    fname = str(roles_data)
    disabled = disabled_services(list(environments or ()))
    doc = load_yaml(Path(roles_data))
    if not re.fullmatch(NAME_RE, stack):
        raise InputError(Problem(f"stack name '{stack}' is not a valid name", field="--stack"))
    if not isinstance(doc, list) or not doc:
        raise InputError(
            Problem(
                "a roles file is a list of roles (- name: Controller ...)",
                file=fname,
                line=getattr(doc, "line", None) or 1,
                hint="give tripleo-heat-templates' roles_data.yaml (or one generated by "
                "`openstack overcloud roles generate`)",
            )
        )
    hosts = hosts_by_group(load_inventory(inventory)) if inventory is not None else {}
    counts = dict(counts or {})
    problems: list[Problem] = []
    notes: list[str] = []
    roles: list[dict[str, Any]] = []
    for ri, role in enumerate(doc):
        if not isinstance(role, dict) or not isinstance(role.get("name"), str):
            problems.append(
                Problem(
                    "a role must be a mapping with a 'name'", file=fname, line=line_of(doc, [ri])
                )
            )
            continue
        name = role["name"]
        where = [ri]
        if not re.fullmatch(NAME_RE, name):
            problems.append(
                Problem(
                    f"role name '{name}' is not a valid name",
                    file=fname,
                    line=line_of(doc, where + ["name"]),
                )
            )
            continue
        tht_tags = role.get("tags") or []
        serial = role.get("update_serial", 1)
        count = role.get("CountDefault", 0)
        services = role.get("ServicesDefault") or []
        before = len(problems)
        for key, value, kind in (
            ("tags", tht_tags, list),
            ("ServicesDefault", services, list),
            ("update_serial", serial, int),
            ("CountDefault", count, int),
        ):
            if not isinstance(value, kind) or isinstance(value, bool):
                problems.append(
                    Problem(
                        f"{key} must be a {'list' if kind is list else 'number'}",
                        file=fname,
                        line=line_of(doc, where + [key]),
                        field=f"{name}.{key}",
                    )
                )
        if len(problems) > before:
            continue
        skipped = [str(s) for s in services if isinstance(s, str) and s in disabled]
        if skipped:
            notes.append(f"{name}: {len(skipped)} service(s) mapped to OS::Heat::None left out")
        svc = _resolve_services(
            services,
            catalog,
            doc,
            where + ["ServicesDefault"],
            fname,
            problems,
            notes,
            name,
            skip=frozenset(skipped),
        )
        out: dict[str, Any] = {
            "name": name,
            "tags": [str(t) for t in tht_tags],  # THT's: replaced below
            "update_serial": max(1, serial),
            "services": svc,
        }
        if name in hosts:
            out["nodes"] = _nodes_from_hosts(hosts[name], str(inventory), problems)
        else:
            n = counts.pop(name, count)
            fmt = role.get("HostnameFormatDefault") or f"%stackname%-{name.lower()}-%index%"
            template = _hostname_template(str(fmt), stack)
            if not re.fullmatch(NAME_RE, template.format(index=0)):
                problems.append(
                    Problem(
                        "HostnameFormatDefault gives node names like "
                        f"'{template.format(index=0)}', not a valid node name",
                        file=fname,
                        line=line_of(doc, where + ["HostnameFormatDefault"]),
                        field=f"{name}.HostnameFormatDefault",
                    )
                )
            out["nodes"] = {"count": n, "name": template}
            if n == 0:
                notes.append(
                    f"{name}: no nodes (CountDefault is 0 and the inventory has no group {name}); "
                    f"give --count {name}=N"
                )
        roles.append(out)
    for role_name in counts:
        problems.append(
            Problem(
                f"--count names role '{role_name}', which the roles file does not have",
                file=fname,
                field="--count",
            )
        )
    if problems:
        raise InputError(problems)
    _tag_roles(roles, catalog, notes)
    # the source names are data: they go into the document (serialised by the YAML library),
    # never into a comment of the written file
    sources = Path(fname).name + (
        f" and {Path(str(inventory)).name}" if inventory is not None else ""
    )
    result = {"name": stack, "description": f"imported from {sources} (TripleO stack {stack})"}
    return _checked(result, roles, catalog, catalog_ref, fname, notes)


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
    problems: list[Problem] = []
    notes: list[str] = []
    roles: list[dict[str, Any]] = []
    for group, hosts in hosts_by_group(inv).items():
        g = inv.groups[group]
        raw = given.pop(group, None)
        if raw is None:
            var = g.vars.get("stepwise_services")
            raw = [s.strip() for s in var.split(",") if s.strip()] if isinstance(var, str) else var
        if not raw:
            problems.append(
                Problem(
                    f"group '{group}' has hosts but no services",
                    file=fname,
                    line=g.line,
                    hint=f"give --services {group}=svc1,svc2 or the group var stepwise_services",
                )
            )
            continue
        if not isinstance(raw, list):
            problems.append(
                Problem(
                    "stepwise_services must be a list or a comma-separated string",
                    file=fname,
                    line=g.line,
                    field=f"{group}.vars.stepwise_services",
                )
            )
            continue
        svc = _resolve_services(list(raw), catalog, None, [], fname, problems, notes, group, g.line)
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
                "nodes": _nodes_from_hosts(hosts, fname, problems),
            }
        )
    for group in given:
        problems.append(
            Problem(
                f"--services names group '{group}', which has no hosts in the inventory",
                file=fname,
                field="--services",
            )
        )
    with_hosts = set(hosts_by_group(inv))
    for group in controlplane or ():
        if group not in with_hosts:
            problems.append(
                Problem(
                    f"--controlplane names group '{group}', which is not a role of the inventory "
                    "(a group with hosts)",
                    file=fname,
                    field="--controlplane",
                    hint=f"one of: {', '.join(sorted(with_hosts)) or '(none)'}",
                )
            )
    if not roles and not problems:
        problems.append(Problem("the inventory has no group with hosts", file=fname))
    if problems:
        raise InputError(problems)
    result = {"name": name, "description": f"imported from {Path(fname).name}"}
    return _checked(result, roles, catalog, catalog_ref, fname, notes)


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
    return Imported(doc, build_deployment(spec, catalog, None, where), notes)
