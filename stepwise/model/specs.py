"""Pydantic schemas of the input files: the contract in DESIGN.md, checked strictly.

These only validate shape; `catalog.py` and `deployment.py` turn them into the frozen
values the planner uses, and check what needs the whole picture (references, cycles).
"""

from __future__ import annotations

import re
from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Discriminator,
    Field,
    Tag,
    field_validator,
    model_validator,
)

from stepwise.model.choices import DeployStyle, DrainPolicy, RpcMixing
from stepwise.model.container_specs import (
    IMAGE_PART_RE,
    ContainersSpec,
)
from stepwise.model.limits import MAX_INDEX, MAX_NODES, MAX_STEP_SECONDS
from stepwise.model.values import (
    Address,
    PackageName,
    ShortText,
    check_address,
    check_index_template,
)
from stepwise.model.vocab import DEFAULT_STEP_SECONDS

NAME_RE = r"^[A-Za-z_][A-Za-z0-9_.\-]*$"
#: an alias may be a TripleO resource name such as OS::TripleO::Services::Keystone (':' allowed)
ALIAS_RE = r"^[A-Za-z_][A-Za-z0-9_.:\-]*$"
#: a systemd unit name (`openstack-nova-compute`, `ceph-mon.target`, `getty@tty1`)
UNIT_RE = r"^[A-Za-z0-9_][A-Za-z0-9_.:@\-]*$"
#: an HAProxy proxy name (letters, digits, '-', '_', '.', ':'): it reaches the load balancer's
#: runtime API as a word of a command line
FRONTEND_RE = r"^[A-Za-z0-9_][A-Za-z0-9_.:\-]*$"
#: a service's data directory on its node: absolute, no `..` (a segment never starts with a dot)
DATA_PATH_RE = r"^(/[A-Za-z0-9_][A-Za-z0-9_.\-]*)+/?$"
PERCENT_RE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*%\s*$")

Task = dict[str, Any]


class Strict(BaseModel):
    # allow_inf_nan: a duration or count of .inf/.nan is no number (and JSON cannot carry it)
    model_config = ConfigDict(
        extra="forbid", frozen=True, str_strip_whitespace=True, allow_inf_nan=False
    )


class AvailabilitySpec(Strict):
    max_unavailable: int | str | None = None
    min_available: int | None = None
    quorum: Literal["majority"] | None = None

    @field_validator("max_unavailable", "min_available", mode="before")
    @classmethod
    def _no_bool(cls, v: Any) -> Any:
        # YAML `true` would otherwise pass as the number 1
        if isinstance(v, bool):
            raise ValueError(
                f"'{str(v).lower()}' is not a number of instances "
                '(or, for max_unavailable, a percentage like "10%")'
            )
        return v

    @field_validator("max_unavailable")
    @classmethod
    def _check_max(cls, v: int | str | None) -> int | str | None:
        if v is None:
            return v
        if isinstance(v, bool):
            raise ValueError('must be a number of instances or a percentage like "10%"')
        if isinstance(v, int):
            if v < 0:
                raise ValueError("must not be negative")
            return v
        m = PERCENT_RE.fullmatch(v)
        if not m or not (0 < float(m.group(1)) <= 100):
            raise ValueError(
                f"'{v}' is not a number of instances or a percentage between 0% and 100% "
                '(e.g. "10%")'
            )
        return v

    @field_validator("min_available")
    @classmethod
    def _check_min(cls, v: int | None) -> int | None:
        if v is not None and v < 0:
            raise ValueError("must not be negative")
        return v

    @model_validator(mode="after")
    def _one_rule(self) -> AvailabilitySpec:
        given = [
            k
            for k in ("max_unavailable", "min_available", "quorum")
            if getattr(self, k) is not None
        ]
        if len(given) != 1:
            raise ValueError("give exactly one of max_unavailable, min_available, quorum")
        return self


class HealthSpec(Strict):
    http: str | None = None
    tcp: str | None = None
    command: str | None = None


class PreflightSpec(Strict):
    """A read-only check `stepwise preflight` runs on each node of the service
    (`keystone-status upgrade check`): exit 0 passes, 1 warns, anything else fails."""

    name: str = Field(pattern=NAME_RE, max_length=100)
    command: str = Field(min_length=1, max_length=1000)


class WorkflowTasksSpec(Strict):
    """Tasks of one workflow, keyed by step (see stepwise.model.vocab.Step)."""

    pre: list[Task] = Field(default_factory=list)
    post: list[Task] = Field(default_factory=list)
    validate_: list[Task] = Field(default_factory=list, alias="validate")
    leave: list[Task] = Field(default_factory=list)
    stop: list[Task] = Field(default_factory=list)
    packages: list[Task] = Field(default_factory=list)
    config: list[Task] = Field(default_factory=list)
    reboot: list[Task] = Field(default_factory=list)
    migrate: list[Task] = Field(default_factory=list)
    start: list[Task] = Field(default_factory=list)
    rejoin: list[Task] = Field(default_factory=list)
    verify: list[Task] = Field(default_factory=list)
    backup: list[Task] = Field(default_factory=list)
    restore: list[Task] = Field(default_factory=list)
    pin: list[Task] = Field(default_factory=list)
    unpin: list[Task] = Field(default_factory=list)

    model_config = ConfigDict(
        extra="forbid", frozen=True, populate_by_name=True, allow_inf_nan=False
    )


class SystemUpgradeSpec(Strict):
    prepare: list[Task] = Field(default_factory=list)
    run: list[Task] = Field(default_factory=list)
    transfer_data: list[Task] = Field(default_factory=list)
    #: a cluster that cannot span two OS majors: the first new-OS node forms the new one
    #: (`form_cluster`), the later ones join it (`join_cluster`), before their `start`
    form_cluster: list[Task] = Field(default_factory=list)
    join_cluster: list[Task] = Field(default_factory=list)
    cleanup: list[Task] = Field(default_factory=list)


class SchemaSpec(Strict):
    """How a service's database schema changes in a major upgrade.

    `expand_contract`: new code works on the expanded schema and so does old code, until the
    contract. `expand` runs once, on the bootstrap node, before any node runs new code; the
    nodes then roll one by one (no downtime window); `migrate` (online data migrations) and
    `contract` run once after the last old-code instance is gone (converge).
    `offline`: old and new code cannot share a schema: every instance stops for `migrate`
    (the seed's downtime window)."""

    strategy: Literal["expand_contract", "offline"]
    expand: list[Task] = Field(default_factory=list)
    migrate: list[Task] = Field(default_factory=list)
    contract: list[Task] = Field(default_factory=list)

    @model_validator(mode="after")
    def _tasks_fit(self) -> SchemaSpec:
        if self.strategy == "offline" and (self.expand or self.contract):
            raise ValueError(
                "an offline schema has no expand or contract tasks: put the sync in 'migrate'"
            )
        if self.strategy == "expand_contract" and not self.expand:
            raise ValueError(
                "expand_contract needs 'expand' tasks (the schema sync that old code survives)"
            )
        return self


class StyleTasksSpec(Strict):
    """A catalog entry's tasks for one container style, where they differ from the ones
    stepwise derives from the style (docs/catalog.md "Deployment styles")."""

    #: true: in this style the service runs on the host from its packages, as the entry is
    #: written (TripleO runs pacemaker and openvswitch on the host, the rest in containers)
    host: bool = False
    unit: str | None = Field(default=None, pattern=UNIT_RE, max_length=256)
    health: HealthSpec | None = None
    update: WorkflowTasksSpec | None = None
    upgrade: WorkflowTasksSpec | None = None

    @model_validator(mode="after")
    def _host_has_no_container_tasks(self) -> StyleTasksSpec:
        given = [k for k in ("unit", "health", "update", "upgrade") if getattr(self, k) is not None]
        if self.host and given:
            raise ValueError(
                "a service on the host ('host: true') runs as the entry is written; "
                f"remove: {', '.join(given)}"
            )
        return self


class ServiceSpec(Strict):
    name: str = Field(pattern=NAME_RE)
    description: str | None = None
    #: other names a deployment may use for this service (TripleO's OS::TripleO::Services::*)
    aliases: list[Annotated[str, Field(pattern=ALIAS_RE, max_length=200)]] = Field(
        default_factory=list
    )
    #: "none": configuration only (timezone, kernel settings): nothing runs that an update or
    #: upgrade stops or restarts, so the planner never visits it
    runtime: Literal["service", "none"] = "service"
    #: the systemd unit that runs the service on a node, as its package names it
    #: (`openstack-nova-compute`); the tasks' `systemctl` calls use it. Default: the name.
    unit: str | None = Field(default=None, pattern=UNIT_RE, max_length=256)
    plane: Literal["infra", "control", "data"]
    packages: list[PackageName] = Field(default_factory=list)
    depends_on: list[str] = Field(default_factory=list)
    availability: AvailabilitySpec | None = None
    rolling: bool = True
    cluster: str | None = None
    #: false: members of the service's cluster cannot run on two OS majors at once (corosync
    #: changed its transport; what pacemaker manages follows it)
    mixed_os: bool = True
    #: managed by an external installer (ceph): its OS-upgrade tasks run with external-upgrade
    external: bool = False
    rpc: str | None = None
    #: how old and new code of the RPC group keep talking while both run (RpcMixing)
    rpc_mixing: RpcMixing = RpcMixing.PINNED
    health: HealthSpec | None = None
    #: read-only checks before a run (`stepwise preflight`), each a node command
    preflight: list[PreflightSpec] = Field(default_factory=list)
    update: WorkflowTasksSpec | None = None
    upgrade: WorkflowTasksSpec | None = None
    converge: list[Task] = Field(default_factory=list)
    schema_: SchemaSpec | None = Field(default=None, alias="schema")
    system_upgrade: SystemUpgradeSpec | None = None
    durations: dict[str, float] = Field(default_factory=dict)
    #: the image's name in the container styles (default: from the service name and style)
    image: str | None = Field(default=None, pattern=IMAGE_PART_RE, min_length=1, max_length=200)
    #: per container style, the tasks that differ from the ones derived from the style
    styles: dict[Literal["tripleo", "kolla"], StyleTasksSpec] = Field(default_factory=dict)
    #: the load balancer's backend that sends the service's clients to its nodes (HAProxy's
    #: `listen`/`backend` name, TripleO's `keystone_public`): stepwise drains the node's server
    #: there before the service stops and puts it back once its health passes (`leave`/`rejoin`)
    frontend: str | None = Field(default=None, pattern=FRONTEND_RE, max_length=100)
    #: the directories that hold the service's data on its node (`/var/lib/mysql`): what a
    #: node that is the only one of its role keeps through a reprovision (no other member to
    #: copy it from), persisted before the wipe and restored after
    data: list[Annotated[str, Field(pattern=DATA_PATH_RE, max_length=200)]] = Field(
        default_factory=list, max_length=20
    )

    @model_validator(mode="after")
    def _nothing_to_run(self) -> ServiceSpec:
        # a runtime-none service has nothing to stop: any task, package or rule would be a
        # promise the planner does not keep (it never visits such a service)
        if self.runtime == "none":
            given = [
                k
                for k in (
                    "packages",
                    "depends_on",
                    "availability",
                    "cluster",
                    "rpc",
                    "health",
                    "preflight",
                    "update",
                    "upgrade",
                    "converge",
                    "schema_",
                    "system_upgrade",
                    "image",
                    "styles",
                    "frontend",
                )
                if getattr(self, k) not in (None, [], {})
            ]
            if given:
                names = ", ".join(g.rstrip("_") for g in given)
                raise ValueError(
                    f"a 'runtime: none' service has nothing to stop or change; remove: {names}"
                )
        return self

    @model_validator(mode="after")
    def _schema_and_rolling(self) -> ServiceSpec:
        if self.schema_ is not None:
            if self.schema_.strategy == "expand_contract" and not self.rolling:
                raise ValueError(
                    "schema: expand_contract rolls node by node; remove 'rolling: false'"
                )
            if self.upgrade is not None and self.upgrade.migrate:
                raise ValueError(
                    "with 'schema:', the migration tasks go in schema.expand/migrate, "
                    "not in upgrade.migrate"
                )
        return self

    @model_validator(mode="after")
    def _rpc_mixing(self) -> ServiceSpec:
        if self.rpc_mixing is not RpcMixing.PINNED:
            if self.rpc is None:
                raise ValueError(
                    f"'rpc_mixing: {self.rpc_mixing}' is for a service in an RPC group; "
                    "add 'rpc: GROUP' or remove it"
                )
            if self.upgrade is not None and self.upgrade.pin:
                raise ValueError(
                    f"an 'rpc_mixing: {self.rpc_mixing}' service has no pin to set; remove "
                    "upgrade.pin (or say 'rpc_mixing: pinned')"
                )
        return self

    @field_validator("durations")
    @classmethod
    def _known_steps(cls, v: dict[str, float]) -> dict[str, float]:
        for step, seconds in v.items():
            if step not in DEFAULT_STEP_SECONDS:
                raise ValueError(
                    f"unknown step '{step}'; steps are: {', '.join(DEFAULT_STEP_SECONDS)}"
                )
            if seconds < 0:
                raise ValueError(f"duration of '{step}' must not be negative")
            if seconds > MAX_STEP_SECONDS:
                raise ValueError(
                    f"duration of '{step}' is more than a week ({MAX_STEP_SECONDS:,} seconds)"
                )
        return v


class NodeSpec(Strict):
    name: str = Field(pattern=NAME_RE)
    address: Address | None = None
    vars: dict[str, Any] = Field(default_factory=dict)


class NodeCountSpec(Strict):
    count: int = Field(ge=0, le=MAX_NODES)
    name: str
    address: str | None = None
    start: int = Field(default=0, ge=0, le=MAX_INDEX)
    vars: dict[str, Any] = Field(default_factory=dict)

    @field_validator("name")
    @classmethod
    def _has_index(cls, v: str) -> str:
        if "{index}" not in v:
            raise ValueError("a counted node name needs '{index}', e.g. \"compute-{index}\"")
        check_index_template(v)
        example = _format_index(v)
        if not re.fullmatch(NAME_RE, example):
            raise ValueError(
                f"'{v}' gives node names like '{example}', which is not a valid name "
                "(letters, digits, '_', '.', '-'; not starting with a digit or '-')"
            )
        return v

    @field_validator("address")
    @classmethod
    def _address_template(cls, v: str | None) -> str | None:
        if v is not None:
            check_index_template(v)
            _format_index(v)
        return v

    @model_validator(mode="after")
    def _every_address(self) -> NodeCountSpec:
        # each node's address, not only the first: '10.0.0.2{index}' breaks at index 6
        # (the names cannot: '{index}' adds digits only, and the name was checked above)
        if self.address is not None:
            for i in range(self.start, self.start + self.count):
                check_address(_format_index(self.address, i))
        return self


def _format_index(template: str, index: int = 0) -> str:
    """Expand a counted-node template; only '{index}' may appear in braces."""
    try:
        return template.format(index=index)
    except (KeyError, IndexError, ValueError, AttributeError):
        raise ValueError(
            f"'{template}': only '{{index}}' may appear in braces (write '{{{{' for a literal '{{')"
        ) from None


def _nodes_form(v: Any) -> str | None:
    if isinstance(v, list):
        return "(list)"
    if isinstance(v, dict) or isinstance(v, NodeCountSpec):
        return "(count)"
    return None


#: A role's nodes: a list of nodes, or {count, name: "x-{index}"}. Discriminated by shape so an
#: error is reported once, for the form the author used (the tags are dropped from locations).
NodesField = Annotated[
    Annotated[list[NodeSpec], Tag("(list)")] | Annotated[NodeCountSpec, Tag("(count)")],
    Discriminator(
        _nodes_form,
        custom_error_type="nodes_form",
        custom_error_message='must be a list of nodes or {count: N, name: "node-{index}"}',
    ),
]
#: Union tags as they appear in error locations -> the model valid there.
UNION_TAGS: dict[str, type[BaseModel]] = {"(list)": NodeSpec, "(count)": NodeCountSpec}


class RoleSpec(Strict):
    name: str = Field(pattern=NAME_RE)
    description: str | None = None
    tags: list[str] = Field(default_factory=list)
    update_serial: int = Field(default=1, ge=1)
    services: list[str] = Field(default_factory=list)
    nodes: NodesField = Field(default_factory=list)
    bootstrap: str | None = None
    vars: dict[str, Any] = Field(default_factory=dict)
    tool_packages: list[PackageName] = Field(default_factory=list)
    #: how this role's services are deployed; the deployment's `style:` when not given
    style: DeployStyle | None = None
    #: services the role runs that no catalog entry describes (an import's unknown names):
    #: left running, never stopped or changed by a plan, and named in it
    unmanaged: list[ShortText] = Field(default_factory=list, max_length=1000)


class LabSpec(Strict):
    """How `stepwise lab` rehearses this cloud (ignored by plan and run)."""

    #: run real OpenStack code of this release series where the lab can (keystone, placement,
    #: glance); the other services stay the lab's stand-ins
    openstack: str | None = Field(default=None, pattern=r"^20[0-9]{2}\.[12]$")


class DeploymentSpec(Strict):
    #: the cloud's name is also its store's file name (`.stepwise/<name>.sqlite`): bounded
    #: well below the file-name limit of any file system
    name: str = Field(pattern=NAME_RE, max_length=128)
    description: str | None = None
    catalog: str | None = None
    vars: dict[str, Any] = Field(default_factory=dict)
    reboot_packages: list[PackageName] = Field(default_factory=lambda: ["kernel", "kernel-core"])
    #: what a compute's leave does with instances that cannot live-migrate (README "Drain policy")
    drain_policy: DrainPolicy = DrainPolicy.REFUSE
    #: how the services are deployed (packages, tripleo or kolla containers); a role may differ
    style: DeployStyle = DeployStyle.PACKAGES
    #: where the container styles' images come from (required when a role is containerized)
    containers: ContainersSpec | None = None
    roles: list[RoleSpec] = Field(min_length=1)
    lab: LabSpec = Field(default_factory=LabSpec)

    @model_validator(mode="after")
    def _bounded(self) -> DeploymentSpec:
        total = sum(
            r.nodes.count if isinstance(r.nodes, NodeCountSpec) else len(r.nodes)
            for r in self.roles
        )
        if total > MAX_NODES:
            raise ValueError(
                f"{total:,} nodes: stepwise plans at most {MAX_NODES:,} nodes per deployment"
            )
        return self
