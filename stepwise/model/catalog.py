"""Service definitions: one YAML file per service, turned into frozen values."""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Any

from stepwise.errors import InputError, Problem
from stepwise.model.catalog_checks import check_catalog, duplicate_preflights
from stepwise.model.checks import validate
from stepwise.model.choices import DeployStyle, RpcMixing
from stepwise.model.containers import StyleTasks
from stepwise.model.specs import PERCENT_RE, ServiceSpec, StyleTasksSpec, WorkflowTasksSpec
from stepwise.model.task_lint import lint_service_file
from stepwise.model.vocab import (
    DEFAULT_STEP_SECONDS,
    NODE_STEPS,
    SHARED_STEPS,
    STEP_ALIASES,
    CatalogKey,
    Section,
    Step,
    SystemUpgradeKey,
    TaskKey,
    catalog_key,
)
from stepwise.model.yamlsrc import line_of, load_yaml, to_plain
from stepwise.paths import checked_path, is_directory

BUILTIN_CATALOG = Path(__file__).resolve().parent.parent / "content" / "catalog"


@dataclass(frozen=True, slots=True)
class Availability:
    """How many instances of a service may be out of service at once."""

    rule: str  # max_unavailable | min_available | quorum
    value: int | float | str  # count, fraction (for "N%"), or "majority"

    def allowed_down(self, total: int) -> int:
        """Instances that may be down at the same time when `total` exist."""
        if self.rule == "max_unavailable":
            if isinstance(self.value, float):
                # A percentage rounds down but never below one instance: "10%" of 5 nodes
                # still lets a rolling update proceed one node at a time.
                return max(1, math.floor(total * self.value + 1e-9)) if total else 0
            return min(int(self.value), total)
        if self.rule == "min_available":
            return max(0, total - int(self.value))
        if self.rule == "quorum":
            return max(0, total - (total // 2 + 1))
        raise ValueError(self.rule)  # pragma: no cover

    def describe(self) -> str:
        if self.rule == "max_unavailable" and isinstance(self.value, float):
            return f"max_unavailable {self.value * 100:g}%"
        if self.rule == "quorum":
            return "quorum: majority"
        return f"{self.rule} {self.value}"


@dataclass(frozen=True, eq=False)
class Service:
    """One service as its author declared it."""

    name: str
    plane: str
    #: the systemd unit that runs it on a node (the catalog's `unit`, default the name)
    unit: str = ""
    packages: tuple[str, ...] = ()
    #: other names of the service (TripleO's OS::TripleO::Services::*), resolved on loading
    aliases: tuple[str, ...] = ()
    #: False for a configuration-only service (`runtime: none`): never stopped, never visited
    has_runtime: bool = True
    depends_on: tuple[str, ...] = ()
    availability: Availability | None = None
    rolling: bool = True
    cluster: str | None = None
    mixed_os: bool = True
    external: bool = False
    rpc: str | None = None
    rpc_mixing: RpcMixing = RpcMixing.PINNED
    health: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}))
    #: read-only checks `stepwise preflight` runs where the service runs: (name, command)
    preflight: tuple[tuple[str, str], ...] = ()
    #: section (update | upgrade) -> step -> tasks (aliases already resolved)
    tasks: Mapping[Section, Mapping[TaskKey, tuple[dict[str, Any], ...]]] = field(
        default_factory=lambda: MappingProxyType({})
    )
    converge: tuple[dict[str, Any], ...] = ()
    #: "expand_contract", "offline", or "" (not declared: `rolling` alone decides)
    schema: str = ""
    #: the contract of an expand_contract schema: once, after no old code runs
    contract: tuple[dict[str, Any], ...] = ()
    system_upgrade: Mapping[SystemUpgradeKey, tuple[dict[str, Any], ...]] = field(
        default_factory=lambda: MappingProxyType({})
    )
    durations: Mapping[CatalogKey, float] = field(default_factory=lambda: MappingProxyType({}))
    source: str = "<builtin>"
    line: int | None = None
    #: line of each top-level field in `source` (and "depends_on[i]" per entry), for errors
    lines: Mapping[str, int] = field(default_factory=lambda: MappingProxyType({}))
    #: the catalog's `image:` (container styles; "": named after the service)
    image: str = ""
    #: the entry's own tasks per container style (`styles:`), where they differ
    style_tasks: Mapping[DeployStyle, StyleTasks] = field(
        default_factory=lambda: MappingProxyType({})
    )
    #: the style these tasks are for (`styled`)
    style: DeployStyle = DeployStyle.PACKAGES
    #: what a node fetches before the disruptive part (container styles: pull and verify the
    #: target image); the prestage step's tasks
    prestage: tuple[dict[str, Any], ...] = ()
    #: the load-balancer backend that serves the service's clients ("": none): its `leave`
    #: drains the node's server there and its `rejoin` puts it back (tasks: `run/lb_tasks.py`)
    frontend: str = ""
    #: the directories of the service's data on its node (`data:`), relative to the root
    #: (`var/lib/mysql`): what a lone node of its role keeps through a reprovision
    data: tuple[str, ...] = ()

    def styled(self, style: DeployStyle) -> Service:
        """This service as it runs on a node of `style`: the one place that answers which
        tasks, unit and health checks it has there (docs/catalog.md "Deployment styles").
        The packages style is the entry as written, and so is a style that runs the service
        on the host (`styles: {tripleo: {host: true}}`)."""
        if style is self.style:
            return self
        if self.style is not DeployStyle.PACKAGES:
            # a styled service's tasks are no entry as written: style the entry itself
            raise ValueError(f"{self.name} is already styled {self.style}")
        if not self.in_container(style):
            return self
        from stepwise.model.styles import styled_service  # styles builds on this class

        return styled_service(self, style)

    def in_container(self, style: DeployStyle) -> bool:
        """Whether the service runs in a container on a node of `style` (not on a packages
        node, nor where the entry says it runs on the host)."""
        if style is DeployStyle.PACKAGES:
            return False
        own = self.style_tasks.get(style)
        return own is None or not own.host

    def steps(self, section: Section) -> Mapping[TaskKey, tuple[dict[str, Any], ...]]:
        """The tasks of one of the service file's step-keyed sections (`update:`, `upgrade:`)."""
        return self.tasks.get(section, MappingProxyType({}))

    def has_step(self, section: Section, step: TaskKey) -> bool:
        """Whether the service has tasks for `step` in `section` (a service behind a load
        balancer always leaves and rejoins it: stepwise brings those tasks)."""
        if self.frontend and step in (Step.LEAVE, Step.REJOIN):
            return True
        return bool(self.steps(section).get(step))

    def seconds(self, step: CatalogKey) -> float:
        """Estimated seconds of this service's share of `step` on one node."""
        return self.durations.get(step, DEFAULT_STEP_SECONDS.get(step, 0.0))


#: Clusters that lose service below a majority: with 3+ members and no explicit rule they get
#: `quorum: majority` (a service author forgetting the rule must not let a plan break quorum).
QUORUM_CLUSTERS = frozenset(
    {"pacemaker", "galera", "rabbitmq", "ceph-mon", "corosync", "etcd", "ovn-dbs"}
)


def effective_rule(service: Service, total: int) -> Availability | None:
    """The availability rule stepwise enforces for `service` with `total` instances."""
    if service.availability is not None:
        return service.availability
    if service.cluster in QUORUM_CLUSTERS and total >= 3:
        return Availability("quorum", "majority")
    return None


def allowance(service: Service, total: int) -> int | None:
    """Instances that may be down at once (None: no rule); never below 1, so work can proceed."""
    rule = effective_rule(service, total)
    return None if rule is None else max(1, rule.allowed_down(total))


def node_step_seconds(services: list[Service] | tuple[Service, ...], step: CatalogKey) -> float:
    """Estimated time of `step` on one node for these services (tasks run one after another,
    except one-transaction steps like `packages` and `reboot`)."""
    if not services:
        return DEFAULT_STEP_SECONDS.get(step, 0.0) if step in SHARED_STEPS else 0.0
    values = [s.seconds(step) for s in services]
    return max(values) if step in SHARED_STEPS else sum(values)


@dataclass(frozen=True, eq=False)
class Catalog:
    """All known services by name, with where each came from."""

    services: Mapping[str, Service]
    path: str
    #: alias -> canonical service name (a service's own name is not in here)
    aliases: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}))
    #: what `task_lint` found in the files' tasks (warnings; `catalog lint --strict` errors)
    lint: tuple[Problem, ...] = ()

    def resolve(self, name: str) -> str | None:
        """The canonical name of a service named by its name or one of its aliases, else None."""
        if name in self.services:
            return name
        return self.aliases.get(name)

    def known_names(self) -> list[str]:
        """Every name a deployment may use (names and aliases), for "did you mean"."""
        return [*self.services, *self.aliases]

    def needs(self, service: str) -> frozenset[str]:
        """What `service` depends on, transitively (the `depends_on` of its `depends_on`, ...;
        a name the catalog does not know is left out)."""
        out: set[str] = set()
        todo = list(self.services[service].depends_on) if service in self.services else []
        while todo:
            d = todo.pop()
            if d not in out and d in self.services:
                out.add(d)
                todo.extend(self.services[d].depends_on)
        return frozenset(out)

    def behind_balancer(self, work: Mapping[str, Iterable[str]]) -> dict[str, list[str]]:
        """service -> the nodes of `work` (node -> services) where it is behind a load
        balancer (`frontend:`): what a leave of that work takes out of service, since an
        API out of its balancer serves no more through its VIP."""
        out: dict[str, list[str]] = {}
        for node, services in work.items():
            for s in services:
                if self.services[s].frontend:
                    out.setdefault(s, []).append(node)
        return out

    def __contains__(self, name: object) -> bool:
        return name in self.services

    def __getitem__(self, name: str) -> Service:
        return self.services[name]

    def __iter__(self):
        return iter(self.services.values())

    def __len__(self) -> int:
        return len(self.services)


def _parse_availability(spec) -> Availability | None:
    if spec is None:
        return None
    if spec.quorum is not None:
        return Availability("quorum", "majority")
    if spec.min_available is not None:
        return Availability("min_available", spec.min_available)
    v = spec.max_unavailable
    if isinstance(v, str):
        m = PERCENT_RE.fullmatch(v)
        assert m is not None
        return Availability("max_unavailable", float(m.group(1)) / 100.0)
    return Availability("max_unavailable", int(v))


Tasks = tuple[dict[str, Any], ...]


def _sections(
    update: WorkflowTasksSpec | None, upgrade: WorkflowTasksSpec | None
) -> dict[Section, Mapping[TaskKey, Tasks]]:
    """The steps of an `update:` and `upgrade:` pair (an entry's or a style's), empty ones out.

    `upgrade:` writes only what differs (docs/catalog.md "What `upgrade:` does not write"): a
    node step it does not name, by its key or by `pre`/`post`, is `update:`'s; `stop: []`
    names the step and says it has no tasks. The tasks stay the validated ones of the file,
    so a problem in a shared step is reported once, where it is written."""
    first = update.model_dump(by_alias=True) if update is not None else {}
    second = upgrade.model_dump(by_alias=True) if upgrade is not None else {}
    written = upgrade.model_dump(by_alias=True, exclude_unset=True) if upgrade is not None else {}
    named = {STEP_ALIASES.get(k, k) for k in written}
    for key, tasks in first.items():
        step = STEP_ALIASES.get(key, key)
        if step in NODE_STEPS and step not in named:
            second[key] = tasks
    steps = ((Section.UPDATE, _workflow_tasks(first)), (Section.UPGRADE, _workflow_tasks(second)))
    return {section: tasks for section, tasks in steps if tasks}


def _workflow_tasks(raw: Mapping[str, list[dict[str, Any]]]) -> Mapping[TaskKey, Tasks]:
    out: dict[CatalogKey, list[dict[str, Any]]] = {}
    # `pre` lands at the start of `stop`, `post` at the end of `start`.
    for key, tasks in raw.items():
        if not tasks or key in STEP_ALIASES:
            continue
        out.setdefault(catalog_key(key), []).extend(tasks)
    if raw.get("pre"):
        out[Step.STOP] = list(raw["pre"]) + out.get(Step.STOP, [])
    if raw.get("post"):
        out[Step.START] = out.get(Step.START, []) + list(raw["post"])
    return MappingProxyType({k: tuple(v) for k, v in out.items()})


def service_from_spec(
    spec: ServiceSpec, source: str, line: int | None = None, lines: Mapping[str, int] | None = None
) -> Service:
    """Build the frozen Service value from a validated spec."""
    tasks = _sections(spec.update, spec.upgrade)
    su = spec.system_upgrade.model_dump() if spec.system_upgrade else {}
    schema = spec.schema_
    rolling, converge, contract = spec.rolling, tuple(spec.converge), ()
    if schema is not None:
        # The schema's tasks land in the steps the planner already places: the expand (or the
        # offline sync) in the visit's `migrate` step on the bootstrap node, the online data
        # migrations in `converge`, the contract in its own step after it.
        sync = schema.expand if schema.strategy == "expand_contract" else schema.migrate
        up = dict(tasks.get(Section.UPGRADE, {}))
        up.pop(Step.MIGRATE, None)  # the schema's sync, never a migrate `update:` gives it
        tasks[Section.UPGRADE] = MappingProxyType(
            up | ({Step.MIGRATE: tuple(sync)} if sync else {})
        )
        if schema.strategy == "expand_contract":
            converge = tuple(schema.migrate) + converge
            contract = tuple(schema.contract)
        rolling = schema.strategy == "expand_contract"
    return Service(
        name=spec.name,
        plane=spec.plane,
        unit=spec.unit or spec.name,
        packages=tuple(spec.packages),
        aliases=tuple(spec.aliases),
        has_runtime=spec.runtime != "none",
        depends_on=tuple(spec.depends_on),
        availability=_parse_availability(spec.availability),
        rolling=rolling,
        cluster=spec.cluster,
        mixed_os=spec.mixed_os,
        external=spec.external,
        rpc=spec.rpc,
        rpc_mixing=spec.rpc_mixing,
        health=MappingProxyType(
            {k: v for k, v in (spec.health.model_dump() if spec.health else {}).items() if v}
        ),
        preflight=tuple((p.name, p.command) for p in spec.preflight),
        tasks=MappingProxyType(tasks),
        converge=converge,
        schema=schema.strategy if schema is not None else "",
        contract=contract,
        system_upgrade=MappingProxyType(
            {SystemUpgradeKey(k): tuple(v) for k, v in su.items() if v}
        ),
        durations=MappingProxyType({catalog_key(k): v for k, v in spec.durations.items()}),
        source=source,
        line=line,
        lines=MappingProxyType(dict(lines or {})),
        image=spec.image or "",
        style_tasks=MappingProxyType(
            {DeployStyle(k): _style_tasks(v) for k, v in spec.styles.items()}
        ),
        frontend=spec.frontend or "",
        data=tuple(d.strip("/") for d in spec.data),
    )


def _style_tasks(spec: StyleTasksSpec) -> StyleTasks:
    """The frozen value of an entry's tasks for one container style."""
    tasks = _sections(spec.update, spec.upgrade)
    health = spec.health.model_dump(exclude_none=True) if spec.health else None
    shown = MappingProxyType(health) if health is not None else None
    return StyleTasks(spec.unit, shown, MappingProxyType(tasks), spec.host)


def load_catalog(path: Path | str | None = None) -> Catalog:
    """Load every `*.yaml`/`*.yml` file of a catalog directory (default: the built-in one).

    Collects all problems across files before raising, so one run shows every fault.
    """
    directory = checked_path(path, "--catalog") if path is not None else BUILTIN_CATALOG
    if not is_directory(directory):
        raise InputError(
            Problem(
                "catalog directory not found",
                file=str(directory),
                hint="set 'catalog:' in the deployment to a directory of service files, "
                "or leave it out for the built-in catalog",
            )
        )
    files = sorted(list(directory.glob("*.yaml")) + list(directory.glob("*.yml")))
    if not files:
        raise InputError(
            Problem("catalog directory has no service files (*.yaml)", file=str(directory))
        )
    services, problems, findings = _load_files(files)
    if problems:
        raise InputError(problems)
    aliases, alias_problems = _alias_table(services)
    if alias_problems:
        raise InputError(alias_problems)
    catalog = Catalog(
        MappingProxyType(dict(sorted(services.items()))),
        str(directory),
        MappingProxyType(aliases),
        tuple(findings),
    )
    problems.extend(check_catalog(catalog))
    if problems:
        raise InputError(problems)
    return catalog


def _load_files(files: list[Path]) -> tuple[dict[str, Service], list[Problem], list[Problem]]:
    """The services of a catalog's files, the problems that refuse it and what the task checks
    found (warnings)."""
    problems: list[Problem] = []
    findings: list[Problem] = []
    services: dict[str, Service] = {}
    for f in files:
        try:
            # never through a link: a catalog file linked to a root-only file would have
            # stepwise (run as root) quote that file in its error
            doc = load_yaml(f, follow=False)
            spec = validate(ServiceSpec, to_plain(doc), doc, str(f))
        except InputError as exc:
            problems.extend(exc.problems)
            continue
        twice = duplicate_preflights(spec, doc, str(f))
        if twice:
            problems.extend(twice)
            continue
        if spec.name in services:
            problems.append(
                Problem(
                    f"service '{spec.name}' is defined twice "
                    f"(also in {services[spec.name].source})",
                    file=str(f),
                    line=line_of(doc, ["name"]),
                    field="name",
                    hint="keep one file per service",
                )
            )
            continue
        services[spec.name] = service_from_spec(
            spec, str(f), line_of(doc, ["name"]), _field_lines(doc, spec)
        )
        findings.extend(lint_service_file(doc, str(f)))
    return services, problems, findings


def _alias_table(services: Mapping[str, Service]) -> tuple[dict[str, str], list[Problem]]:
    """alias -> service; an alias naming two services (or another service's name) is refused:
    a deployment naming it would otherwise get whichever file sorted first."""
    table: dict[str, str] = {}
    problems: list[Problem] = []
    for svc in services.values():
        for alias in svc.aliases:
            line = svc.lines.get("aliases", svc.line)
            if alias == svc.name:
                continue
            if alias in services:
                problems.append(
                    Problem(
                        f"alias '{alias}' is the name of another service",
                        file=svc.source,
                        line=line,
                        field="aliases",
                        hint=f"remove '{alias}' from the aliases",
                    )
                )
            elif table.get(alias, svc.name) != svc.name:
                problems.append(
                    Problem(
                        f"alias '{alias}' is also an alias of service '{table[alias]}'",
                        file=svc.source,
                        line=line,
                        field="aliases",
                        hint="an alias names one service; keep it in one file",
                    )
                )
            else:
                table[alias] = svc.name
    return dict(sorted(table.items())), problems


def _field_lines(doc: Any, spec: ServiceSpec) -> dict[str, int]:
    lines: dict[str, int] = {}
    for key in doc.keys() if hasattr(doc, "keys") else ():
        ln = line_of(doc, [key])
        if ln is not None:
            lines[str(key)] = ln
    for i in range(len(spec.depends_on)):
        ln = line_of(doc, ["depends_on", i])
        if ln is not None:
            lines[f"depends_on[{i}]"] = ln
    return lines
