"""The table of workflows: one entry per workflow holds everything the layers ask of it.

The planner composes its units; the commands are the operator's commands that run it (the
CLI registers one command per entry of `commands`, `plan.commands` maps them to selections);
the traits are what the selection rules, the verifier and the lower bound need to know of it.
Nothing above this module tests `plan.workflow is Workflow.X`: it reads the entry's traits.

Adding a workflow: a value in `model.vocab.Workflow`, a planner module in `plan/`, its entry
here (and its commands in `plan.commands.Command` when it has commands of its own); the
verifier, the bound, the store, the report and the CLI follow from the entry.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from enum import Enum
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

from stepwise.model.vocab import UPGRADE_STAGES, Stage, Workflow
from stepwise.plan.commands import Command
from stepwise.plan.rollback import plan_rollback
from stepwise.plan.system_upgrade import plan_system_upgrade
from stepwise.plan.undercloud import plan_undercloud_upgrade
from stepwise.plan.update_upgrade import plan_update, plan_upgrade

if TYPE_CHECKING:
    from stepwise.model.deployment import Deployment
    from stepwise.model.facts import Facts
    from stepwise.plan.builder import PlanBuilder
    from stepwise.plan.selection import Selection


class StoredFacts(Enum):
    """What a workflow plans from when no --facts file is given and a store holds facts."""

    PACKAGES = "packages"  # the packages `discover` saw (the update changes only those)
    NODES = "nodes"  # the nodes' OS and milestones, not their packages
    NONE = "none"  # a major upgrade changes every package: the release's repos are not seen yet
    #: the versions the run named by --run replaced, against what the nodes run now
    #: (`run.rollback.rollback_facts`); a --facts file does not apply
    ROLLBACK = "rollback"


class Bound(Enum):
    """Which lower bound the verifier measures the plan's makespan against."""

    WORK = "work"  # rolling visits: the work under the availability rules, no more
    SEGMENT = "segment"  # fixed procedures: the sum of their segments' critical paths


#: a planner: (builder, deployment, facts, nodes in --limit or None for all, selection, -e)
Planner = Callable[
    ["PlanBuilder", "Deployment", "Facts", "list[str] | None", "Selection", Mapping[str, Any]],
    None,
]


@dataclass(frozen=True)
class WorkflowEntry:
    """One workflow: its planner, its commands, its stages and its traits."""

    workflow: Workflow
    summary: str
    planner: Planner
    commands: tuple[Command, ...]
    #: the name an operator types when it differs from the stored value
    label: str = ""
    stages: tuple[Stage, ...] = ()
    #: nodes are visited in rolling batches: each batch's packages step (a container's image
    #: switch, its config step, in a container style) changes the code of what it works on,
    #: a node an OS upgrade prepared is refused, the bound is the work bound
    rolling: bool = False
    #: RPC pins are checked, and services that cannot roll are down for the announced window
    pins_rpc: bool = False
    #: a migration's expand precedes any new code (expand/contract services)
    expand_contract: bool = False
    #: every node gets a new operating system and release: starts bring up new code
    replaces_os: bool = False
    #: every service's outage is the announced window (one node holds them all)
    whole_outage: bool = False
    #: with no --tags the plan shows its by-name-only operations (the whole procedure)
    shows_named_steps: bool = False
    #: `depends_on` orders services across nodes (else only inside a node's visit)
    dependency_order: bool = False
    #: the workflow's rule: no node is stopped, drained or rebooted more than once (one merged
    #: visit per node), so every changed instance on a node is down for that node's whole visit
    visits_once: bool = False
    stored_facts: StoredFacts = StoredFacts.PACKAGES
    #: the packages step goes back to recorded versions: the services' own packages tasks
    #: (which update) are left out and stepwise downgrades each package (`run/node_work.py`)
    downgrades: bool = False
    #: its runs can be rolled back (`rollback run --run N`): it changes packages only, within
    #: the repositories the nodes have, so the versions it replaced are still there to go to
    reversible: bool = False
    #: a prestage stage comes first (`--prestage-parallel`, `--no-prestage`): each node fetches
    #: what it installs while everything serves
    prestages: bool = False
    #: the -e variables its plans read (`plan.variables` says what each must be): recorded in
    #: the plan's params, so a resumed run plans with them again
    variables: tuple[str, ...] = ()

    @property
    def name(self) -> str:
        """What the operator types for this workflow."""
        return self.label or str(self.workflow)

    @property
    def bound(self) -> Bound:
        return Bound.WORK if self.rolling else Bound.SEGMENT


def _update(builder, dep, facts, nodes, selection, variables) -> None:
    plan_update(builder, dep, facts, nodes, selection.prestage)


def _upgrade(builder, dep, facts, nodes, selection, variables) -> None:
    plan_upgrade(builder, dep, facts, nodes, selection.prestage)


def _system_upgrade(builder, dep, facts, nodes, selection, variables) -> None:
    plan_system_upgrade(builder, dep, facts, nodes)


def _management_upgrade(builder, dep, facts, nodes, selection, variables) -> None:
    plan_undercloud_upgrade(
        builder,
        dep,
        facts,
        nodes,
        os_mode=variables.get("system_upgrade_mode"),
        target_release=variables.get("target_release"),
        prestage=selection.prestage,
    )


def _rollback(builder, dep, facts, nodes, selection, variables) -> None:
    plan_rollback(builder, dep, facts, nodes, selection.of_run)


_ENTRIES: Sequence[WorkflowEntry] = (
    WorkflowEntry(
        Workflow.UPDATE,
        "minor update: same schema and RPC, one rolling visit per node, no API downtime",
        _update,
        (Command.UPDATE_RUN,),
        rolling=True,
        reversible=True,
        visits_once=True,
        prestages=True,
    ),
    WorkflowEntry(
        Workflow.UPGRADE,
        "major upgrade: prepare, run (control plane, then data plane), converge",
        _upgrade,
        (Command.UPGRADE_PREPARE, Command.UPGRADE_RUN, Command.UPGRADE_CONVERGE),
        stages=UPGRADE_STAGES,
        rolling=True,
        pins_rpc=True,
        expand_contract=True,
        dependency_order=True,
        stored_facts=StoredFacts.NONE,
        prestages=True,
        # target_namespace: the next release's images (default containers.upgrade_namespace)
        variables=("target_release", "target_namespace"),
    ),
    WorkflowEntry(
        Workflow.SYSTEM_UPGRADE,
        "operating-system upgrade: the seed's 12 steps, one controller at a time",
        _system_upgrade,
        (Command.EXTERNAL_UPGRADE_RUN,),
        pins_rpc=True,
        replaces_os=True,
        shows_named_steps=True,
        stored_facts=StoredFacts.NODES,
        variables=("target_release",),
    ),
    WorkflowEntry(
        Workflow.UNDERCLOUD_UPGRADE,
        "management-node upgrade (and its OS upgrade with -e system_upgrade_mode)",
        _management_upgrade,
        (Command.MANAGEMENT_UPGRADE_RUN,),
        label="management-upgrade",
        whole_outage=True,
        shows_named_steps=True,
        prestages=True,
        variables=("target_release", "system_upgrade_mode"),
    ),
    WorkflowEntry(
        Workflow.ROLLBACK,
        "rollback of a minor update run: the nodes it changed back to their versions before it",
        _rollback,
        (Command.ROLLBACK_RUN,),
        rolling=True,
        visits_once=True,
        stored_facts=StoredFacts.ROLLBACK,
        downgrades=True,
    ),
)

#: every workflow's entry
WORKFLOW_TABLE: Mapping[Workflow, WorkflowEntry] = MappingProxyType(
    {e.workflow: e for e in _ENTRIES}
)


def entry(workflow: Workflow) -> WorkflowEntry:
    """The table's entry for `workflow`."""
    return WORKFLOW_TABLE[workflow]


def workflow_label(workflow: Workflow) -> str:
    """The name an operator types for `workflow` (`management-upgrade`, not the stored value)."""
    return entry(workflow).name
