"""`stepwise import tripleo`: a THT roles file, the environment files given to `overcloud
deploy -e`, the stack's inventory and its containers-prepare file -> a deployment document.

The files are read and checked by `tripleo.py`, `inventory.py` and `tripleo_containers.py`;
this module decides what they mean together: which services each role runs (ServicesDefault,
or the environment's `<Role>Services`, less what the registry maps to OS::Heat::None), how
many nodes (the inventory's hosts, else --count, `<Role>Count` or CountDefault), and what is
refused rather than guessed (a counted role the inventory lacks, a containerized environment
imported without its images).
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

from stepwise.errors import InputError, Problem
from stepwise.model.catalog import Catalog
from stepwise.model.choices import DeployStyle
from stepwise.model.containers import image_name
from stepwise.model.import_common import (
    Findings,
    Imported,
    ListAt,
    checked,
    nodes_from_hosts,
    resolve_services,
    tag_roles,
)
from stepwise.model.inventory import Host, effective_hosts, group_members, load_inventory
from stepwise.model.limits import MAX_NODES
from stepwise.model.tripleo import (
    Environment,
    RolesFile,
    ThtRole,
    load_roles_file,
    read_environments,
)
from stepwise.model.tripleo_containers import load_containers_prepare
from stepwise.model.yamlsrc import line_of, load_yaml


@dataclass(frozen=True)
class _StackSources:
    """What a roles file's roles are imported against: the catalog, what the environment
    files say, the stack inventory's hosts by role (its path if given), and whether an unknown
    service refuses the import (`strict`)."""

    catalog: Catalog
    env: Environment
    hosts: dict[str, list[Host]]
    inventory: str | None
    strict: bool = False


def _stack_hosts(inventory: Path | str | None, roles: list[str]) -> dict[str, list[Host]]:
    """The inventory's hosts of each role, as Ansible reads the groups (children of
    children: every stack of a multi-stack inventory); roles it has no host for are left out."""
    if inventory is None:
        return {}
    inv = load_inventory(inventory)
    effective = effective_hosts(inv)
    found = {r: group_members(inv, r, effective) for r in roles if r in inv.groups}
    return {r: hosts for r, hosts in found.items() if hosts}


@dataclass(frozen=True)
class TripleoOptions:
    """How `import_tripleo` reads a stack: the options of `stepwise import tripleo`."""

    stack: str = "overcloud"
    #: the stack's tripleo-ansible-inventory (the real hosts, addresses and connection vars)
    inventory: Path | str | None = None
    #: --count ROLE=N
    counts: dict[str, int] = field(default_factory=dict)
    catalog_ref: str | None = None
    #: the environment files, in `overcloud deploy -e` order
    environments: list[Path | str] = field(default_factory=list)
    #: containers-prepare-parameter.yaml: a containerized cloud
    containers_prepare: Path | str | None = None
    #: refuse an unknown service of a role with nodes (else it is left unmanaged)
    strict: bool = False
    #: where `push_destination: true` pushes (the undercloud's registry)
    undercloud_registry: str | None = None


def import_tripleo(roles_data: Path | str, catalog: Catalog, **options: Any) -> Imported:
    """Import a THT roles file (and the stack's inventory) as a deployment document;
    `options` are `TripleoOptions`' fields. The environment files are read as `overcloud
    deploy -e` reads them: services mapped to OS::Heat::None are left out, `<Role>Count` and
    `<Role>Services` override the roles file. A service no catalog entry knows is left
    unmanaged (named in the plan) unless `strict`; in a role with no nodes it never refuses.
    With `containers_prepare` (containers-prepare-parameter.yaml) the cloud is containerized:
    `style: tripleo` and the `containers:` block its ContainerImagePrepare describes."""
    known = {f.name for f in fields(TripleoOptions)}
    unknown = sorted(set(options) - known)
    if unknown:
        raise TypeError(f"import_tripleo() got unexpected options {unknown}")
    opts = TripleoOptions(**{k: v for k, v in options.items() if v is not None})
    return _import_stack(roles_data, catalog, opts)


def _import_stack(roles_data: Path | str, catalog: Catalog, opts: TripleoOptions) -> Imported:
    """`import_tripleo` with its options read."""
    stack, inventory, containers_prepare = opts.stack, opts.inventory, opts.containers_prepare
    env = read_environments(list(opts.environments))
    roles_file = load_roles_file(roles_data, stack)
    fname = roles_file.fname
    names = [r.get("name") for r in roles_file.doc if isinstance(r, dict)]
    hosts = _stack_hosts(inventory, [n for n in names if isinstance(n, str)])
    inv_path = str(inventory) if inventory is not None else None
    sources = _StackSources(catalog, env, hosts, inv_path, opts.strict)
    counts = dict(opts.counts)
    found = Findings(notes=list(env.notes))
    roles: list[dict[str, Any]] = []
    for ri in range(len(roles_file.doc)):
        role = roles_file.role(ri, found.problems)
        if role is not None:
            roles.append(_imported_role(roles_file, role, sources, counts, found))
    for role_name in counts:
        found.problems.append(
            Problem(
                f"--count names role '{role_name}', whose nodes are the inventory's hosts"
                if role_name in hosts
                else f"--count names role '{role_name}', which the roles file does not have",
                file=fname,
                field="--count",
            )
        )
    found.problems.extend(_containerized_problems(env, containers_prepare))
    if found.problems:
        raise InputError(found.problems)
    _say_packages_style(roles, containers_prepare, found.notes)
    tag_roles(roles, catalog, found.notes)
    # the source names are data: they go into the document (serialised by the YAML library),
    # never into a comment of the written file
    names_ = Path(fname).name + (f" and {Path(inv_path).name}" if inv_path is not None else "")
    result: dict[str, Any] = {
        "name": stack,
        "description": f"imported from {names_} (TripleO stack {stack})",
    }
    if containers_prepare is None:
        return checked(result, roles, catalog, opts.catalog_ref, fname, found.notes)
    return _containerized(result, roles, catalog, opts, containers_prepare, fname, found.notes)


def _containerized(
    result: dict[str, Any],
    roles: list[dict[str, Any]],
    catalog: Catalog,
    opts: TripleoOptions,
    prepare: Path | str,
    fname: str,
    notes: list[str],
) -> Imported:
    """The imported cloud with its containers (style tripleo) from the prepare file, read once:
    the roles are checked first, as which entry prepares each image needs their services."""
    result["style"] = "tripleo"
    doc = load_yaml(Path(prepare))
    registry = opts.undercloud_registry
    result["containers"] = load_containers_prepare(prepare, undercloud_registry=registry, doc=doc)
    dep = checked(result, roles, catalog, opts.catalog_ref, fname, []).deployment
    images = {
        s: image_name(s, DeployStyle.TRIPLEO, dep.catalog[s].image)
        for r in dep.roles
        if r.nodes
        for s in dep.containerized(r)
    }
    result["containers"] = load_containers_prepare(
        prepare, undercloud_registry=registry, images=images, doc=doc
    )
    return checked(result, roles, catalog, opts.catalog_ref, fname, notes)


def _containerized_problems(env: Environment, prepare: Path | str | None) -> list[Problem]:
    """A ContainerImagePrepare in the environment files says the cloud is containerized:
    imported without its images, it would be planned as packages (silently wrong)."""
    given = env.parameters.get("ContainerImagePrepare")
    if given is None or prepare is not None:
        return []
    return [
        Problem(
            "the environment files describe a containerized cloud (ContainerImagePrepare), "
            "and no --containers-prepare was given: it would be planned as packages",
            file=given.file,
            line=given.line,
            field="parameter_defaults.ContainerImagePrepare",
            hint=f"add --containers-prepare {given.file}",
        )
    ]


#: THT services that say a role's services run in containers
_CONTAINER_ENGINES = frozenset({"OS::TripleO::Services::Podman", "OS::TripleO::Services::Docker"})


def _say_packages_style(
    roles: list[dict[str, Any]], prepare: Path | str | None, notes: list[str]
) -> None:
    """A note when roles run a container engine yet the cloud is imported as packages."""
    if prepare is not None:
        return
    engines = [r["name"] for r in roles if _CONTAINER_ENGINES & set(r.pop("_listed", ()))]
    if engines:
        notes.append(
            f"{', '.join(engines[:3])}{' and more' if len(engines) > 3 else ''} run a container "
            "engine (Podman/Docker), but no --containers-prepare was given: imported as "
            "packages (style packages); give the cloud's containers-prepare-parameter.yaml "
            "with --containers-prepare for a containerized cloud"
        )


def _role_services(
    roles_file: RolesFile, role: ThtRole, env: Environment
) -> tuple[list[Any], ListAt]:
    """The role's services and where they were read: the environment's `<Role>Services`
    (as `overcloud deploy -e` applies it) or else the roles file's ServicesDefault."""
    override = env.parameters.get(f"{role.name}Services")
    if override is not None and isinstance(override.value, list):
        return list(override.value), ListAt(
            override.file, override.doc, override.trail, key=f"{role.name}Services"
        )
    return list(role.services), ListAt(
        roles_file.fname, roles_file.doc, (role.index, "ServicesDefault"), key="ServicesDefault"
    )


def _role_count(role: ThtRole, env: Environment, counts: dict[str, int], found: Findings) -> int:
    """The role's node count: --count, else the environment's `<Role>Count`, else CountDefault."""
    if role.name in counts:
        return counts.pop(role.name)
    given = env.parameters.get(f"{role.name}Count")
    if given is None:
        return role.count
    value = given.value
    if isinstance(value, str) and value.isascii() and value.isdigit():
        value = int(value)  # Heat takes a number parameter given as a string
    if not isinstance(value, int) or isinstance(value, bool) or not 0 <= value <= MAX_NODES:
        found.problems.append(
            Problem(
                f"{role.name}Count must be a number of nodes from 0 to {MAX_NODES:,}",
                file=given.file,
                line=given.line,
                field=f"parameter_defaults.{role.name}Count",
            )
        )
        return 0
    return value


def _imported_role(
    roles_file: RolesFile,
    role: ThtRole,
    sources: _StackSources,
    counts: dict[str, int],
    found: Findings,
) -> dict[str, Any]:
    """The deployment document's role for a THT role: its deployed services as catalog
    entries (unknown ones unmanaged), its nodes from the stack inventory or else counted."""
    disabled = sources.env.disabled()
    listed, at = _role_services(roles_file, role, sources.env)
    if at.key != "ServicesDefault":
        where = line_of(at.doc, list(at.trail))
        found.notes.append(f"{role.name}: services from {at.key} ({at.file}, line {where})")
    skipped = [str(s) for s in listed if isinstance(s, str) and s in disabled]
    if skipped:
        found.notes.append(
            f"{role.name}: {len(skipped)} service(s) mapped to OS::Heat::None left out"
        )
    out: dict[str, Any] = {
        "name": role.name,
        "tags": [str(t) for t in role.tags],  # THT's: replaced by tag_roles
        "update_serial": max(1, role.update_serial),
    }
    if role.name in sources.hosts:
        out["nodes"] = nodes_from_hosts(
            sources.hosts[role.name], str(sources.inventory), found.problems
        )
        n = len(out["nodes"])
    else:
        asked = role.name in counts  # --count: the operator's own word, never refused
        n = _role_count(role, sources.env, counts, found)
        out["nodes"] = {"count": n, "name": roles_file.node_names(role, found.problems)}
        if not asked:
            _say_uninventoried(role, n, sources, found)
    # a role without nodes never refuses the import: nothing of it is planned
    quiet = Findings(found.problems, []) if n == 0 else found
    unmanaged: list[str] | None = None if sources.strict and n else []
    out["services"] = resolve_services(
        listed, sources.catalog, role.name, at, quiet, frozenset(skipped), unmanaged
    )
    out["unmanaged"] = unmanaged or []
    out["_listed"] = [s for s in listed if isinstance(s, str)]
    if n == 0 and unmanaged:
        found.notes.append(
            f"{role.name}: no nodes; {len(unmanaged)} unknown service(s) not checked"
        )
    return out


def _say_uninventoried(role: ThtRole, n: int, sources: _StackSources, found: Findings) -> None:
    """A role the stack's inventory has no host for: with nodes, refused (they would be
    invented); without, told."""
    if sources.inventory is None:
        if n == 0:
            found.notes.append(
                f"{role.name}: no nodes (CountDefault is 0 and no inventory was given); "
                f"give --count {role.name}=N"
            )
        return
    if n == 0:
        found.notes.append(f"{role.name}: no nodes (no host in the inventory, and its count is 0)")
        return
    found.problems.append(
        Problem(
            f"role '{role.name}' has {n} node(s) by its count, and the inventory has no host "
            f"in a group {role.name}: its nodes would be invented",
            file=sources.inventory,
            field=role.name,
            hint=f"give the stack's own inventory (tripleo-ansible-inventory), or "
            f"--count {role.name}=N to count its nodes",
        )
    )
