"""The cloud as it is: roles, their nodes and the services placed on them."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from types import MappingProxyType
from typing import Any

from stepwise.errors import InputError, Problem
from stepwise.model.catalog import Catalog, Service, load_catalog
from stepwise.model.catalog_checks import _did_you_mean
from stepwise.model.checks import validate
from stepwise.model.choices import DeployStyle, DrainPolicy
from stepwise.model.containers import Containers
from stepwise.model.specs import DeploymentSpec, NodeCountSpec, RoleSpec
from stepwise.model.yamlsrc import line_of, load_yaml, to_plain
from stepwise.paths import checked_path, is_directory

CONTROLPLANE_TAG = "controlplane"
MANAGEMENT_TAGS = frozenset({"management", "undercloud"})
#: the hypervisor agent: its nodes run the tenants' instances, which its leave drains
HYPERVISOR_SERVICE = "nova_compute"


@dataclass(frozen=True, slots=True)
class Node:
    """One machine of the cloud."""

    name: str
    role: str
    address: str | None
    index: int  # position in the whole deployment, for deterministic ordering
    vars: Mapping[str, Any] = field(default_factory=lambda: MappingProxyType({}))


@dataclass(frozen=True, eq=False)
class Role:
    """A group of nodes running the same services."""

    name: str
    tags: tuple[str, ...]
    update_serial: int
    services: tuple[str, ...]
    nodes: tuple[Node, ...]
    bootstrap: str | None = None
    vars: Mapping[str, Any] = field(default_factory=lambda: MappingProxyType({}))
    tool_packages: tuple[str, ...] = ()
    #: every service the role lists (canonical names), configuration-only ones included;
    #: `services` keeps only those with a runtime, so the planner never sees the others
    declared: tuple[str, ...] = ()
    #: how the role's services are deployed (its own `style:` or the deployment's)
    style: DeployStyle = DeployStyle.PACKAGES
    #: services the role runs that stepwise does not manage (no catalog entry): left running
    unmanaged: tuple[str, ...] = ()

    @property
    def is_controlplane(self) -> bool:
        return CONTROLPLANE_TAG in self.tags

    @property
    def is_management(self) -> bool:
        return bool(MANAGEMENT_TAGS & set(self.tags))

    @property
    def bootstrap_node(self) -> Node | None:
        if not self.nodes:
            return None
        if self.bootstrap:
            for n in self.nodes:
                if n.name == self.bootstrap:
                    return n
        return self.nodes[0]


@dataclass(frozen=True, eq=False)
class Deployment:
    """A whole cloud: roles in the order given, with the catalog that defines its services."""

    name: str
    roles: tuple[Role, ...]
    catalog: Catalog
    path: str = "<memory>"
    vars: Mapping[str, Any] = field(default_factory=lambda: MappingProxyType({}))
    reboot_packages: tuple[str, ...] = ("kernel", "kernel-core")
    #: the lab's rehearsal settings (`lab:`), e.g. {"openstack": "2025.1"}; plan and run ignore them
    lab: Mapping[str, Any] = field(default_factory=lambda: MappingProxyType({}))
    #: `drain_policy:` (the instances a compute's leave cannot live-migrate); `drain_policy_now`
    drain_policy: DrainPolicy = DrainPolicy.REFUSE
    #: the deployment's `style:` (each role's own is `Role.style`)
    style: DeployStyle = DeployStyle.PACKAGES
    #: `containers:`: where the container styles' images come from (None: no such role)
    containers: Containers | None = None

    @cached_property
    def nodes(self) -> tuple[Node, ...]:
        return tuple(n for r in self.roles for n in r.nodes)

    @cached_property
    def node_by_name(self) -> Mapping[str, Node]:
        return {n.name: n for n in self.nodes}

    @cached_property
    def role_by_name(self) -> Mapping[str, Role]:
        return {r.name: r for r in self.roles}

    def role_of(self, node: Node | str) -> Role:
        name = node if isinstance(node, str) else node.name
        return self.role_by_name[self.node_by_name[name].role]

    def services_on(self, node: Node | str) -> tuple[str, ...]:
        """Names of the services placed on a node (its role's services)."""
        return self.role_of(node).services

    @cached_property
    def _boxed_by_role(self) -> Mapping[str, tuple[str, ...]]:
        return {
            r.name: tuple(
                s for s in r.services if s in self.catalog and self.catalog[s].in_container(r.style)
            )
            for r in self.roles
        }

    def containerized(self, role: Role | str) -> tuple[str, ...]:
        """The services of a role that its style runs in containers (in the role's order):
        their image is what changes, not their packages. A host-level service of the style
        (TripleO's pacemaker) and every service of a packages role are not among them."""
        return self._boxed_by_role[role if isinstance(role, str) else role.name]

    @cached_property
    def forced_downtime(self) -> Mapping[str, str]:
        """Service -> why its availability rule cannot hold here (`forced_downtime`): its
        update is a planned downtime window."""
        return MappingProxyType(forced_downtime(self))

    @cached_property
    def instances(self) -> Mapping[str, tuple[Node, ...]]:
        """Service name -> the nodes it runs on, in deployment order."""
        out: dict[str, list[Node]] = {}
        for r in self.roles:
            for s in r.services:
                out.setdefault(s, []).extend(r.nodes)
        return MappingProxyType({k: tuple(v) for k, v in out.items()})

    def bootstrap_node(self, service: str) -> Node | None:
        """The node where once-only work of a service runs (its first role's bootstrap node)."""
        for r in self.roles:
            if service in r.services and r.nodes:
                return r.bootstrap_node
        return None

    def service(self, name: str) -> Service:
        return self.catalog[name]

    def service_on(self, name: str, node: Node | str) -> Service:
        """Service `name` as it runs on `node`: with the tasks, unit and health checks of the
        node's role's style (`Service.styled`); what the planner and the run layer ask."""
        return self.catalog[name].styled(self.role_of(node).style)

    def drain_policy_now(self) -> DrainPolicy:
        """The policy a compute's leave applies: the deployment's, except that with one
        compute there is nowhere to move an instance, so each is stopped in place (the plan
        announces the workloads' downtime instead of a drain)."""
        if len(self.instances.get(HYPERVISOR_SERVICE, ())) == 1:
            return DrainPolicy.STOP_IN_PLACE
        return self.drain_policy

    def workloads_stopped_in_place(self) -> tuple[Node, ...]:
        """The computes whose instances may be stopped in place while they are worked on:
        the plan shows a workload window for each."""
        if self.drain_policy_now() is not DrainPolicy.STOP_IN_PLACE:
            return ()
        return self.instances.get(HYPERVISOR_SERVICE, ())


def _expand_nodes(role_spec, start_index: int) -> list[Node]:
    nodes: list[Node] = []
    spec = role_spec.nodes
    if isinstance(spec, NodeCountSpec):
        # one read-only view shared by the counted nodes (10,000 copies of the same vars otherwise)
        shared = MappingProxyType(dict(spec.vars))
        for i in range(spec.count):
            idx = spec.start + i
            address = spec.address.format(index=idx) if spec.address else None
            nodes.append(
                Node(spec.name.format(index=idx), role_spec.name, address, start_index + i, shared)
            )
    else:
        for i, n in enumerate(spec):
            nodes.append(
                Node(
                    n.name,
                    role_spec.name,
                    n.address,
                    start_index + i,
                    MappingProxyType(dict(n.vars)),
                )
            )
    return nodes


def load_deployment(path: Path | str, catalog: Catalog | None = None) -> Deployment:
    """Load and fully validate a deployment file and its catalog.

    Raises InputError listing every problem (file, line, field, fix); nothing partial is returned.
    """
    path = Path(path)
    doc = load_yaml(path)
    fname = str(path)
    spec = validate(DeploymentSpec, to_plain(doc), doc, fname)
    if catalog is None:
        cat_dir = None
        if spec.catalog:
            cat_dir = Path(spec.catalog)
            if not cat_dir.is_absolute():
                cat_dir = path.parent / cat_dir
            try:
                cat_dir = checked_path(cat_dir)
            except InputError as exc:
                raise InputError(
                    Problem(
                        exc.problems[0].message,
                        file=fname,
                        line=line_of(doc, ["catalog"]),
                        field="catalog",
                    )
                ) from None
            if not is_directory(cat_dir):
                raise InputError(
                    Problem(
                        f"catalog directory '{spec.catalog}' not found (looked in {cat_dir})",
                        file=fname,
                        line=line_of(doc, ["catalog"]),
                        field="catalog",
                        hint="give a directory relative to the deployment file, "
                        "or remove 'catalog' to use the built-in catalog",
                    )
                )
        catalog = load_catalog(cat_dir)
    return build_deployment(spec, catalog, doc, fname)


def build_deployment(
    spec: DeploymentSpec, catalog: Catalog, doc: Any = None, fname: str = "<memory>"
) -> Deployment:
    """Turn a validated spec into a Deployment, checking references across the whole cloud."""
    problems: list[Problem] = []
    roles: list[Role] = []
    seen_roles: dict[str, int] = {}
    seen_nodes: dict[str, str] = {}
    next_index = 0
    for ri, rs in enumerate(spec.roles):
        if rs.name in seen_roles:
            problems.append(
                Problem(
                    f"role '{rs.name}' is defined twice (also roles[{seen_roles[rs.name]}])",
                    file=fname,
                    line=line_of(doc, ["roles", ri, "name"]),
                    field=f"roles[{ri}].name",
                    hint="give each role a unique name",
                )
            )
        seen_roles.setdefault(rs.name, ri)
        at = _RoleSource(ri, doc, fname)
        declared = _role_services(rs, at, catalog, problems)
        nodes = _expand_nodes(rs, next_index)
        next_index += len(nodes)
        _check_role_nodes(rs, nodes, at, seen_nodes, problems)
        running = tuple(s for s in declared if catalog[s].has_runtime)
        roles.append(
            Role(
                rs.name,
                tuple(rs.tags),
                rs.update_serial,
                running,
                tuple(nodes),
                rs.bootstrap,
                MappingProxyType(dict(rs.vars)),
                tuple(rs.tool_packages),
                tuple(declared),
                rs.style or spec.style,
                tuple(rs.unmanaged),
            )
        )
    problems.extend(_containers_problems(spec, doc, fname))
    if problems:
        raise InputError(problems)
    dep = Deployment(
        spec.name,
        tuple(roles),
        catalog,
        fname,
        MappingProxyType(dict(spec.vars)),
        tuple(spec.reboot_packages),
        MappingProxyType(spec.lab.model_dump(exclude_none=True)),
        spec.drain_policy,
        spec.style,
        Containers.from_spec(spec.containers) if spec.containers is not None else None,
    )
    return dep


def _containers_problems(spec: DeploymentSpec, doc: Any, fname: str) -> list[Problem]:
    """A containerized role needs the deployment's `containers:` (where its images come from);
    `containers.images` names services of the deployment."""
    if spec.containers is not None:
        running = {s for rs in spec.roles for s in rs.services}
        return [
            Problem(
                f"containers.images names '{service}', which no role runs",
                file=fname,
                line=line_of(doc, ["containers", "images", service]),
                field=f"containers.images.{service}",
                hint="name a service of a role's services (the image another "
                "ContainerImagePrepare entry prepares), or remove it",
            )
            for service in spec.containers.images
            if service not in running
        ]
    hint = (
        "add containers: {registry: HOST:PORT, namespace: NAME, tag: TAG} (TripleO's "
        "ContainerImagePrepare set:, or `stepwise import tripleo --containers-prepare FILE`)"
    )
    if spec.style is not DeployStyle.PACKAGES:
        return [
            Problem(
                f"style {spec.style} needs a 'containers:' block",
                file=fname,
                line=line_of(doc, ["style"]),
                field="style",
                hint=hint,
            )
        ]
    return [
        Problem(
            f"role {rs.name} has style {rs.style}, which needs a 'containers:' block",
            file=fname,
            line=line_of(doc, ["roles", ri, "style"]),
            field=f"roles[{ri}].style",
            hint=hint,
        )
        for ri, rs in enumerate(spec.roles)
        if rs.style is not None and rs.style is not DeployStyle.PACKAGES
    ]


@dataclass(frozen=True)
class _RoleSource:
    """Where a role is in the deployment file, for the problems found in it."""

    index: int
    doc: Any
    fname: str

    def problem(self, message: str, path: list, field: str, hint: str) -> Problem:
        return Problem(
            message,
            file=self.fname,
            line=line_of(self.doc, ["roles", self.index, *path]),
            field=f"roles[{self.index}].{field}",
            hint=hint,
        )


def _role_services(
    rs: RoleSpec, at: _RoleSource, catalog: Catalog, problems: list[Problem]
) -> list[str]:
    """The role's services by their canonical names (a service may be named by an alias,
    OS::TripleO::Services::Keystone: the canonical name is what the rest of stepwise sees);
    unknown and twice-listed services are problems."""
    declared: list[str] = []
    for si, s in enumerate(rs.services):
        canonical = catalog.resolve(s)
        if canonical is None:
            problems.append(
                at.problem(
                    f"unknown service '{s}'",
                    ["services", si],
                    f"services[{si}]",
                    f"{_did_you_mean(s, catalog.known_names())} (catalog: {catalog.path})",
                )
            )
        else:
            declared.append(canonical)
    for s in sorted({s for s in declared if declared.count(s) > 1}):
        problems.append(
            at.problem(
                f"service '{s}' is listed twice",
                ["services"],
                "services",
                "list each service once per role (by its name or one of its aliases)",
            )
        )
    return declared


def _check_role_nodes(
    rs: RoleSpec,
    nodes: list[Node],
    at: _RoleSource,
    seen_nodes: dict[str, str],
    problems: list[Problem],
) -> None:
    """Node names are unique across the deployment; the bootstrap node is one of the role's."""
    for ni, n in enumerate(nodes):
        if n.name in seen_nodes:
            path = ["nodes", ni] if isinstance(rs.nodes, list) else ["nodes"]
            problems.append(
                at.problem(
                    f"duplicate node '{n.name}' (also in role {seen_nodes[n.name]})",
                    path,
                    "nodes",
                    "node names must be unique across the deployment",
                )
            )
        else:
            seen_nodes[n.name] = rs.name
    if rs.bootstrap and rs.bootstrap not in {n.name for n in nodes}:
        problems.append(
            at.problem(
                f"bootstrap node '{rs.bootstrap}' is not a node of role {rs.name}",
                ["bootstrap"],
                "bootstrap",
                "name one of the role's nodes, or remove 'bootstrap' to use the first node",
            )
        )


def forced_downtime(dep: Deployment) -> dict[str, str]:
    """Services whose availability rule cannot hold with their instance count (one
    controller: `min_available: 1` of one instance, a majority quorum of one or two), each with
    why. Such a service cannot be updated without an outage: the plan takes it down (one
    instance at a time) and announces that outage as a downtime window, which a run needs
    `--accept-downtime` to accept.

    Instances on management roles do not count: the management-node upgrade stops all of its
    services by design (one node, downtime accepted), so rules apply to the cloud's roles only.
    """
    out: dict[str, str] = {}
    for name in dep.instances:
        count = sum(len(r.nodes) for r in dep.roles if name in r.services and not r.is_management)
        rule = dep.catalog[name].availability
        if rule is None or not count or rule.allowed_down(count) >= 1:
            continue
        out[name] = (
            f"its availability rule '{rule.describe()}' cannot hold with {count} instance(s)"
            + (" (a majority quorum needs at least 3)" if rule.rule == "quorum" else "")
        )
    return out
