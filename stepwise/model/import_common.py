"""What every importer shares: the imported result, resolving service names against the
catalog (unknown ones unmanaged or refused), tagging roles, nodes from inventory hosts with
their connection variables, and the final check of the document as `load_deployment` does.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from stepwise.errors import Problem
from stepwise.model.catalog import Catalog
from stepwise.model.checks import validate
from stepwise.model.deployment import CONTROLPLANE_TAG, Deployment, build_deployment
from stepwise.model.inventory import Host
from stepwise.model.specs import NAME_RE, DeploymentSpec
from stepwise.model.tripleo import CONTROL_TAGS, MANAGEMENT_ROLES, RENAMED
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
class Findings:
    """What an import found: problems (raised together, in the order found) and notes."""

    problems: list[Problem] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class ListAt:
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


def kind_of(value: Any) -> str:
    """What a YAML value is, in words (never its repr: a deep or huge value stays out of it)."""
    if isinstance(value, Mapping):
        return "mapping"
    if isinstance(value, (list, tuple)):
        return "list"
    return type(value).__name__


def resolve_services(
    names: list[Any],
    catalog: Catalog,
    role: str,
    at: ListAt,
    found: Findings,
    skip: frozenset[str] = frozenset(),
    unmanaged: list[str] | None = None,
) -> list[str]:
    """Canonical names of `names` (names, aliases, or a THT name an earlier release gave the
    service), each once. An unknown name is a problem at its line, or with `unmanaged` (a
    list) appended there and noted: the role runs it, stepwise leaves it running."""
    out: list[str] = []
    for i, raw in enumerate(names):
        line = at.item_line(i)
        # checked before `skip`: a list or mapping item is unhashable (a TypeError, exit 70)
        if not isinstance(raw, str):
            found.problems.append(
                Problem(
                    f"a service name must be a string, not a {kind_of(raw)}",
                    file=at.file,
                    line=line,
                    field=f"{role}.{at.key}[{i}]",
                    hint="list each service by its name, one string per item",
                )
            )
            continue
        if raw in skip:
            continue
        canonical = catalog.resolve(raw) or catalog.resolve(RENAMED.get(raw, raw))
        if canonical is None and unmanaged is not None:
            if raw not in unmanaged:
                unmanaged.append(raw)
                found.notes.append(
                    f"{role}: unknown service '{raw}' ({at.file}, line {line}) is left "
                    "unmanaged: running, never stopped or changed by a plan "
                    f"({closest(raw, catalog)}; --strict refuses it)"
                )
        elif canonical is None:
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


def role_tags(name: str, tht_tags: list[str], services: list[str], catalog: Catalog) -> list[str]:
    """stepwise tags of an imported role: management for the undercloud; controlplane for THT's
    primary/controller roles and for roles that run only infra/control services (THT's
    Database and Messaging carry no tag, yet their clusters are updated with the controllers)."""
    if name in MANAGEMENT_ROLES:
        return ["management"]
    running = [catalog[s] for s in services if catalog[s].has_runtime]
    if CONTROL_TAGS & set(tht_tags) or (running and all(s.plane != "data" for s in running)):
        return [CONTROLPLANE_TAG]
    return []


def tag_roles(roles: list[dict[str, Any]], catalog: Catalog, notes: list[str]) -> None:
    """stepwise's tags for imported roles (in place; each role's `tags` holds THT's on entry).

    Services every role runs (logrotate_crond, snmp, ...) say nothing about what a role is:
    a role is judged by its own. A role left with none of its own that runs (all disabled by
    the environment files) is not control plane, and the operator is told."""
    common = set.intersection(*(set(r["services"]) for r in roles)) if len(roles) > 1 else set()
    for r in roles:
        own = [s for s in r["services"] if s not in common]
        r["tags"] = role_tags(r["name"], r["tags"], own, catalog)
        if r["name"] not in MANAGEMENT_ROLES and not any(catalog[s].has_runtime for s in own):
            notes.append(
                f"{r['name']}: no service of its own is left running (disabled, or only what "
                "every role runs): not tagged control plane; an update touches its nodes only "
                "for packages no service owns and reboots"
            )


#: host variables of an inventory that say how a node is reached: kept on the imported node,
#: so plays (run, and `export`) connect as the inventory does (user, port, a local host)
CONNECTION_VARS = frozenset(
    {
        "ansible_connection",
        "ansible_port",
        "ansible_ssh_port",
        "ansible_user",
        "ansible_ssh_user",
        "ansible_become",
        "ansible_become_method",
        "ansible_become_user",
        "ansible_python_interpreter",
        "ansible_ssh_private_key_file",
        "ansible_private_key_file",
        "ansible_ssh_common_args",
        "ansible_ssh_extra_args",
    }
)


def connection_vars(h: Host) -> dict[str, Any]:
    """The host's connection variables that are plain values (a password is no such thing:
    it is left to the operator's own inventory, given at run time with -i)."""
    return {
        k: v
        for k, v in h.vars.items()
        if k in CONNECTION_VARS and isinstance(v, (str, int, float, bool))
    }


def nodes_from_hosts(
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
        if connection_vars(h):
            node["vars"] = connection_vars(h)
        nodes.append(node)
    return nodes


def checked(
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
    doc["roles"] = [
        {k: v for k, v in r.items() if (v != [] or k == "services") and not k.startswith("_")}
        for r in roles
    ]
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


def roles_of_hosts(
    placed: list[tuple[Host, tuple[str, ...], tuple[str, ...]]],
    catalog: Catalog,
    source: str,
    found: Findings,
) -> list[dict[str, Any]]:
    """Roles of hosts placed by a deployer's groups: `placed` is (host, the host groups that
    name its role, its service names); hosts with the same host groups and services are one
    role, named after its host groups. Unknown services are left unmanaged (noted)."""
    roles: dict[tuple[tuple[str, ...], tuple[str, ...]], dict[str, Any]] = {}
    for host, host_groups, services in placed:
        role = roles.get((host_groups, services))
        if role is None:
            name = "-".join(host_groups) or "services"
            taken = {r["name"] for r in roles.values()}
            while name in taken:
                name += "-b"
            unmanaged: list[str] = []
            at = ListAt(source, line=host.line, key="groups")
            resolved = resolve_services(
                list(services), catalog, name, at, found, unmanaged=unmanaged
            )
            role = {
                "name": name,
                "tags": role_tags(name, [], resolved, catalog) if resolved else [],
                "update_serial": 1,
                "services": resolved,
                "unmanaged": unmanaged,
                "hosts": [],
            }
            roles[(host_groups, services)] = role
        role["hosts"].append(host)
    for role in roles.values():
        role["nodes"] = nodes_from_hosts(role.pop("hosts"), source, found.problems)
    return list(roles.values())
