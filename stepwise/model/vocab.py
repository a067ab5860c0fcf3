"""The words of an upgrade, defined once: workflows, stages, phases, steps, scopes, and what
each step means (where its tasks come from, what state a service is in after it, which
safety rules apply). Plan, verify, render, engine and selection dispatch through these
types instead of repeating strings.

Every type is a `StrEnum`, so a value is also its own name in JSON, in `--tags` and in the
store: `Step.PACKAGES == "packages"`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum
from types import MappingProxyType


class Workflow(StrEnum):
    """The workflows of stepwise (their planners, commands and traits: `plan.table`)."""

    UPDATE = "update"
    UPGRADE = "upgrade"
    SYSTEM_UPGRADE = "system-upgrade"
    UNDERCLOUD_UPGRADE = "undercloud-upgrade"
    ROLLBACK = "rollback"  # a minor update run taken back to the versions it replaced

    @property
    def task_section(self) -> Section:
        """Which section of a service file its node steps take their tasks from (a rollback
        cycles services as a minor update does)."""
        return Section.UPDATE if self in (Workflow.UPDATE, Workflow.ROLLBACK) else Section.UPGRADE


class Section(StrEnum):
    """Sections of a service file that hold tasks."""

    UPDATE = "update"
    UPGRADE = "upgrade"
    CONVERGE = "converge"
    CONTRACT = "contract"  # schema.contract of an expand_contract service
    SYSTEM_UPGRADE = "system_upgrade"


class Stage(StrEnum):
    """A stage of a workflow; also a tag `--tags` matches (the seed's tag names for the OS
    upgrade, in the order of its procedure)."""

    PRESTAGE = "prestage"  # each node fetches what it installs; every service keeps serving
    RUN = "run"
    PREPARE = "prepare"
    CONVERGE = "converge"
    UPGRADE = "upgrade"
    SYSTEM_UPGRADE_PREPARE = "system_upgrade_prepare"
    SYSTEM_UPGRADE_RUN = "system_upgrade_run"
    SYSTEM_UPGRADE_TRANSFER_DATA = "system_upgrade_transfer_data"
    ONLINE_UPGRADE = "online_upgrade"
    SYSTEM_UPGRADE_CLEANUP = "system_upgrade_cleanup"


#: Stages whose operations the seed runs with `external-upgrade run`.
EXTERNAL_STAGES: frozenset[Stage] = frozenset(
    {Stage.SYSTEM_UPGRADE_TRANSFER_DATA, Stage.ONLINE_UPGRADE, Stage.SYSTEM_UPGRADE_CLEANUP}
)

#: The stages of the major upgrade, in order (`upgrade prepare|run|converge`).
UPGRADE_STAGES: tuple[Stage, ...] = (Stage.PREPARE, Stage.RUN, Stage.CONVERGE)


class Phase(StrEnum):
    """Where in a rollout a unit sits."""

    NONE = ""
    CONTROLPLANE = "controlplane"
    DATAPLANE = "dataplane"
    OS_FIRST = "os-first"
    OS_REST = "os-rest"
    MANAGEMENT = "management"


class Plane(StrEnum):
    """`--plane`: the control plane (infra + control services) or the data plane."""

    CONTROL = "control"
    DATA = "data"

    @property
    def phase(self) -> Phase:
        return Phase.CONTROLPLANE if self is Plane.CONTROL else Phase.DATAPLANE


class Scope(StrEnum):
    """A unit is one step on some nodes, or one deployment-wide operation."""

    NODE = "node"
    DEPLOYMENT = "deployment"


class ServiceState(StrEnum):
    """What a service instance is doing, as `status` reports it."""

    RUNNING = "running"
    STOPPED = "stopped"
    OUT = "out"  # serving nothing: left its clusters and load balancers
    UNKNOWN = "unknown"


class UnitState(StrEnum):
    """Where a unit of a run is."""

    PENDING = "pending"
    RUNNING = "running"
    DONE = "done"
    FAILED = "failed"
    INTERRUPTED = (
        "interrupted"  # running when the operator stopped the run: runs again from its start
    )
    SKIPPED = "skipped"

    @property
    def finished(self) -> bool:
        return self in (UnitState.DONE, UnitState.SKIPPED)


class RunState(StrEnum):
    """Where a run is (the store's `runs.status`), and how a run ended (`RunResult.status`)."""

    RUNNING = "running"
    DONE = "done"
    FAILED = "failed"
    INTERRUPTED = "interrupted"  # its process stopped (a signal, a crash): it can be resumed
    #: `stepwise abort` (or a first Ctrl-C) asked it to stop at the next safe point; it still runs
    ABORTING = "aborting"
    ABORTED = "aborted"  # stopped at a safe point on request: every service serves; resumable
    NOTHING = "nothing"  # the plan had nothing left to do: reported, never recorded

    @property
    def ok(self) -> bool:
        """The run did what it was asked (or there was nothing to do)."""
        return self in (RunState.DONE, RunState.NOTHING)

    @property
    def live(self) -> bool:
        """Recorded while its process runs (a run still aborting runs until its safe point)."""
        return self in (RunState.RUNNING, RunState.ABORTING)


#: The states a run is recorded in (`NOTHING` is never stored: such a run records nothing).
RECORDED_RUN_STATES: frozenset[RunState] = frozenset(RunState) - {RunState.NOTHING}


class TaskStatus(StrEnum):
    """How one Ansible task ended on one host (the store's `task_results.status`)."""

    OK = "ok"
    CHANGED = "changed"
    FAILED = "failed"
    UNREACHABLE = "unreachable"
    SKIPPED = "skipped"
    IGNORED = "ignored"  # failed with `ignore_errors`: the play went on

    @property
    def failed(self) -> bool:
        """The task failed the host (an ignored failure does not)."""
        return self in (TaskStatus.FAILED, TaskStatus.UNREACHABLE)

    @property
    def succeeded(self) -> bool:
        return self in (TaskStatus.OK, TaskStatus.CHANGED)


class MarkerState(StrEnum):
    """A once-only operation's marker in the store: begun, or done."""

    STARTED = "started"
    DONE = "done"


class Step(StrEnum):
    """Every kind of unit. The first ten are the fixed steps of a node visit, in order: where
    a service author's task lands.

    A node is visited in this order; a service contributes tasks to the steps it names in its
    `update:` / `upgrade:` sections. `pre` is shorthand for the start of `stop` and `post` for
    the end of `start` (the DESIGN contract's names).

      prestage  (before any visit, its own stage) fetch what the node installs; stops nothing
      validate  checks that change nothing (disk space, repos reachable, cluster healthy)
      leave     take the node out of its clusters and load balancers (pcs standby, drain
                haproxy backend, ceph osd noout, live-migrate workloads away)
      stop      stop the services whose packages change (pre tasks run here first)
      packages  update the packages of the services that change
      config    re-apply the configuration for the new version (before any start)
      reboot    only when a kernel/system package changed: reboot the node
      migrate   schema migration (DB sync); run once per service, on its bootstrap node
      start     start the services again (post tasks run here last)
      rejoin    rejoin clusters and load balancers (unstandby, unset noout, enable)
      verify    health checks; they gate the next batch
    """

    PRESTAGE = "prestage"
    VALIDATE = "validate"
    LEAVE = "leave"
    STOP = "stop"
    PACKAGES = "packages"
    CONFIG = "config"
    REBOOT = "reboot"
    MIGRATE = "migrate"
    START = "start"
    REJOIN = "rejoin"
    VERIFY = "verify"
    # deployment-wide operations
    REPOS = "repos"
    BACKUP = "backup"
    RESTORE = "restore"
    PIN_RPC = "pin_rpc"
    UNPIN_RPC = "unpin_rpc"
    CONVERGE = "converge"
    CONTRACT = "contract"
    GATE = "gate"
    # the operating-system upgrade (the seed's system_upgrade_* operations)
    SYSTEM_UPGRADE_PREPARE = "system_upgrade_prepare"
    EXTERNAL_SYSTEM_UPGRADE_PREPARE = "external_system_upgrade_prepare"
    SYSTEM_UPGRADE_RUN = "system_upgrade_run"
    SYSTEM_UPGRADE_TRANSFER_DATA = "system_upgrade_transfer_data"
    #: the first new-OS node forms the new cluster of a cluster that cannot span two OS
    #: majors; the later new-OS nodes join it (before their services start)
    FORM_CLUSTER = "form_cluster"
    JOIN_CLUSTER = "join_cluster"
    EXTERNAL_SYSTEM_UPGRADE_RUN = "external_system_upgrade_run"
    SYSTEM_UPGRADE_CLEANUP = "system_upgrade_cleanup"

    @property
    def info(self) -> StepInfo:
        return STEPS[self]


#: A node visit's steps, in their fixed order (validate runs once up front for all nodes).
NODE_STEPS: tuple[Step, ...] = (
    Step.VALIDATE,
    Step.LEAVE,
    Step.STOP,
    Step.PACKAGES,
    Step.CONFIG,
    Step.REBOOT,
    Step.MIGRATE,
    Step.START,
    Step.REJOIN,
    Step.VERIFY,
)
VISIT_STEPS: tuple[Step, ...] = NODE_STEPS[1:]


class UpgradeKey(StrEnum):
    """Keys of a service file's `upgrade:` section that name no step: the tasks of the
    `pin_rpc` and `unpin_rpc` steps."""

    PIN = "pin"
    UNPIN = "unpin"


class SystemUpgradeKey(StrEnum):
    """Keys of a service file's `system_upgrade:` section, in the order of the OS upgrade."""

    PREPARE = "prepare"
    RUN = "run"
    TRANSFER_DATA = "transfer_data"
    FORM_CLUSTER = "form_cluster"
    JOIN_CLUSTER = "join_cluster"
    CLEANUP = "cleanup"


#: A key of a service file's `update:` / `upgrade:` section (aliases resolved): a node step,
#: `backup`, `restore`, `pin` or `unpin`.
TaskKey = Step | UpgradeKey
#: A key of the catalog: of a task section, of `system_upgrade:`, of `durations:`.
CatalogKey = Step | UpgradeKey | SystemUpgradeKey


def catalog_key(key: str) -> CatalogKey:
    """The vocabulary member a catalog file's key spells (the loader's conversion: the files
    keep their spelling). A node step or deployment-wide step first, then the `upgrade:` and
    `system_upgrade:` keys; ValueError for a key of none."""
    for kind in (Step, UpgradeKey, SystemUpgradeKey):
        try:
            return kind(key)
        except ValueError:
            continue
    raise ValueError(f"'{key}' is not a catalog key")


class NodeWork(StrEnum):
    """Built-in work stepwise does once per node in a step, besides the services' tasks."""

    ANSWERS = "answers"  # the node is reachable and runs Python: nothing is touched
    DOWNLOAD = "download"  # fetch the node's changing packages into its cache, install nothing
    SWITCH_REPOS = "switch_repos"
    PREPARE_OS = "prepare_os"  # leapp upgrade (in place) or persist node data (reprovision)
    REBOOT = "reboot"  # reboot (a new kernel)
    UPGRADE_OS = "upgrade_os"  # reboot into the new OS, or reprovision and restore
    UNOWNED_PACKAGES = "unowned_packages"  # packages no service owns (kernel, openvswitch, tools)
    CLEANUP_OS = "cleanup_os"  # remove what prepare persisted


@dataclass(frozen=True, slots=True)
class StepInfo:
    """What a step means for every layer.

    `tasks`: where services' tasks for this step come from: (section, key) of a service
    file (key None: the whole section), or None when services contribute nothing.
    `node_work`: stepwise's own per-node work.
    `state_after`: the state of the unit's services on its nodes once it is done.
    `by_name_only`: runs only when its tag is named (`--tags`), like the seed's
    `never`-tagged tasks. `whole_role_refused`: never on every node of a role at once.
    `once_only`: must never run twice on a node (a flag file guards it). `external`: run by
    `external-upgrade run`, not `upgrade run`.
    """

    tasks: tuple[Section, CatalogKey | None] | None = None
    node_work: NodeWork | None = None
    state_after: ServiceState | None = None
    by_name_only: bool = False
    whole_role_refused: bool = False
    once_only: bool = False
    #: the seed's `external-upgrade run` operations (external installers such as ceph, data
    #: transfer, cleanup), as opposed to the per-node `upgrade run` ones
    external: bool = False
    #: refuses to run without --limit naming its nodes (the seed's rule for the operations
    #: that take nodes away or move their data)
    needs_limit: bool = False


def _visit(step: Step, state: ServiceState | None = None) -> StepInfo:
    # node steps take tasks from the workflow's own section: resolved by `task_source`
    return StepInfo(tasks=(Section.UPDATE, step), state_after=state)


STEPS: Mapping[Step, StepInfo] = MappingProxyType(
    {
        # services bring no prestage tasks of their own (a container style derives its pull)
        Step.PRESTAGE: StepInfo(node_work=NodeWork.DOWNLOAD),
        Step.VALIDATE: StepInfo(tasks=(Section.UPDATE, Step.VALIDATE), node_work=NodeWork.ANSWERS),
        Step.LEAVE: _visit(Step.LEAVE, ServiceState.OUT),
        Step.STOP: _visit(Step.STOP, ServiceState.STOPPED),
        Step.PACKAGES: StepInfo(
            tasks=(Section.UPDATE, Step.PACKAGES), node_work=NodeWork.UNOWNED_PACKAGES
        ),
        Step.CONFIG: _visit(Step.CONFIG),
        Step.REBOOT: StepInfo(tasks=(Section.UPDATE, Step.REBOOT), node_work=NodeWork.REBOOT),
        Step.MIGRATE: _visit(Step.MIGRATE),
        Step.START: _visit(Step.START, ServiceState.RUNNING),
        Step.REJOIN: _visit(Step.REJOIN, ServiceState.RUNNING),
        Step.VERIFY: StepInfo(tasks=(Section.UPDATE, Step.VERIFY), node_work=NodeWork.ANSWERS),
        Step.REPOS: StepInfo(node_work=NodeWork.SWITCH_REPOS),
        Step.BACKUP: StepInfo(tasks=(Section.UPGRADE, Step.BACKUP)),
        Step.RESTORE: StepInfo(tasks=(Section.UPGRADE, Step.RESTORE)),
        Step.PIN_RPC: StepInfo(tasks=(Section.UPGRADE, UpgradeKey.PIN)),
        Step.UNPIN_RPC: StepInfo(tasks=(Section.UPGRADE, UpgradeKey.UNPIN)),
        Step.CONVERGE: StepInfo(tasks=(Section.CONVERGE, None)),
        Step.CONTRACT: StepInfo(tasks=(Section.CONTRACT, None)),
        Step.GATE: StepInfo(),
        Step.SYSTEM_UPGRADE_PREPARE: StepInfo(
            needs_limit=True,
            tasks=(Section.SYSTEM_UPGRADE, SystemUpgradeKey.PREPARE),
            node_work=NodeWork.PREPARE_OS,
            state_after=ServiceState.STOPPED,
            by_name_only=True,
            whole_role_refused=True,
        ),
        Step.SYSTEM_UPGRADE_RUN: StepInfo(
            needs_limit=True,
            node_work=NodeWork.UPGRADE_OS,
            state_after=ServiceState.STOPPED,
            by_name_only=True,
            whole_role_refused=True,
        ),
        Step.SYSTEM_UPGRADE_TRANSFER_DATA: StepInfo(
            needs_limit=True,
            tasks=(Section.SYSTEM_UPGRADE, SystemUpgradeKey.TRANSFER_DATA),
            state_after=ServiceState.STOPPED,
            by_name_only=True,
            once_only=True,
            external=True,
        ),
        Step.FORM_CLUSTER: StepInfo(
            tasks=(Section.SYSTEM_UPGRADE, SystemUpgradeKey.FORM_CLUSTER),
            state_after=ServiceState.RUNNING,
        ),
        Step.JOIN_CLUSTER: StepInfo(
            tasks=(Section.SYSTEM_UPGRADE, SystemUpgradeKey.JOIN_CLUSTER),
            state_after=ServiceState.RUNNING,
        ),
        Step.EXTERNAL_SYSTEM_UPGRADE_PREPARE: StepInfo(
            needs_limit=True,
            tasks=(Section.SYSTEM_UPGRADE, SystemUpgradeKey.PREPARE),
            state_after=ServiceState.STOPPED,
            by_name_only=True,
            external=True,
        ),
        Step.EXTERNAL_SYSTEM_UPGRADE_RUN: StepInfo(
            needs_limit=True,
            tasks=(Section.SYSTEM_UPGRADE, SystemUpgradeKey.RUN),
            state_after=ServiceState.RUNNING,
            by_name_only=True,
            external=True,
        ),
        Step.SYSTEM_UPGRADE_CLEANUP: StepInfo(
            tasks=(Section.SYSTEM_UPGRADE, SystemUpgradeKey.CLEANUP),
            node_work=NodeWork.CLEANUP_OS,
            by_name_only=True,
            external=True,
        ),
    }
)


def task_source(step: Step, workflow: Workflow) -> tuple[Section, CatalogKey | None] | None:
    """(section, key) of the services' tasks for `step` in `workflow`: node steps read the
    workflow's own section (`update:` or `upgrade:`), the others a fixed one."""
    src = STEPS[step].tasks
    if src is None:
        return None
    if src[0] is Section.UPDATE:
        return workflow.task_section, src[1]
    return src


#: Keys a service file may use inside `update:` / `upgrade:`.
#: `pre` is shorthand for the start of `stop` and `post` for the end of `start`.
STEP_ALIASES: Mapping[str, Step] = MappingProxyType({"pre": Step.STOP, "post": Step.START})
#: Deployment-wide operations a service may add tasks to in the `upgrade:` section.
UPGRADE_EXTRA_KEYS: tuple[TaskKey, ...] = (
    Step.BACKUP,
    Step.RESTORE,
    UpgradeKey.PIN,
    UpgradeKey.UNPIN,
)
#: The sections of a service file keyed by node step (`update:` and `upgrade:`).
WORKFLOW_SECTIONS: tuple[Section, ...] = (Section.UPDATE, Section.UPGRADE)

#: Default estimate (seconds) of one service's share of a step on one node. Overridable per
#: service with `durations:`. `packages` and `reboot` are one transaction per node, so a
#: node's time for them is the maximum over its services, not the sum.
DEFAULT_STEP_SECONDS: Mapping[CatalogKey, float] = MappingProxyType(
    {
        Step.PRESTAGE: 30.0,
        Step.VALIDATE: 5.0,
        Step.LEAVE: 10.0,
        Step.STOP: 5.0,
        Step.PACKAGES: 60.0,
        Step.CONFIG: 10.0,
        Step.REBOOT: 180.0,
        Step.MIGRATE: 60.0,
        Step.START: 10.0,
        Step.REJOIN: 10.0,
        Step.VERIFY: 5.0,
        Step.BACKUP: 60.0,
        UpgradeKey.PIN: 5.0,
        UpgradeKey.UNPIN: 10.0,
        Step.CONVERGE: 30.0,
        SystemUpgradeKey.PREPARE: 120.0,
        SystemUpgradeKey.RUN: 600.0,
        SystemUpgradeKey.TRANSFER_DATA: 300.0,
        SystemUpgradeKey.FORM_CLUSTER: 30.0,
        SystemUpgradeKey.JOIN_CLUSTER: 20.0,
        SystemUpgradeKey.CLEANUP: 20.0,
    }
)

#: Steps whose node time is one shared transaction (max over services), not a sum.
SHARED_STEPS: frozenset[CatalogKey] = frozenset(
    {Step.PRESTAGE, Step.PACKAGES, Step.REBOOT, SystemUpgradeKey.RUN, SystemUpgradeKey.PREPARE}
)


class Verdict(StrEnum):
    """What one preflight check found on one node (`stepwise preflight`, the first step of a
    run): only `fail` refuses a run; `warn` is shown and lets it start."""

    PASS = "pass"
    WARN = "warn"
    FAIL = "fail"
    #: the check does not apply there (the tool is absent, the member is stopped on purpose)
    SKIP = "skip"
