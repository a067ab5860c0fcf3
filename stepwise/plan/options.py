"""The operator's options made a `Selection`: `selection_for` checks the options of `stepwise
plan` and of a workflow's run command against the workflow table; `command_selection` says
which workflow and part a command runs as the seeds spell it. `upgrade run --tags
system_upgrade_prepare --limit N` is the OS upgrade's prepare of N; `external-upgrade run
--tags system_upgrade_run -e system_upgrade_nodes=N` its external run; while an OS upgrade is
under way, `upgrade run --limit N` is its step 6 on N and `upgrade converge` its step 11.
`stepwise plan` previews the same part with the same arguments.

They read the table, which names the commands (`commands.py`): they live apart from both.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from types import MappingProxyType

from stepwise.errors import InputError, Problem
from stepwise.model.vocab import EXTERNAL_STAGES, Plane, Stage, Workflow
from stepwise.plan.commands import Command
from stepwise.plan.progress import in_os_upgrade
from stepwise.plan.selection import Selection, split_list
from stepwise.plan.table import WORKFLOW_TABLE, StoredFacts, entry, workflow_label

STAGES = {wf: e.stages for wf, e in WORKFLOW_TABLE.items() if e.stages}
PLANES = tuple(Plane)


def selection_for(
    workflow: Workflow,
    limit: str | None = None,
    *,
    stage: str | Stage | None = None,
    plane: str | Plane | None = None,
    tags: Iterable[str] | str | None = (),
    skip_tags: Iterable[str] | str | None = (),
    of_run: int | None = None,
    prestage: int = 0,
) -> Selection:
    """Check the operator's options against the workflow and return them as a Selection
    (`of_run`: the run a rollback takes back, which only a rollback takes; `prestage`: at most
    this many nodes fetch at once in a prestage stage, for the workflows that have one)."""
    st: Stage | None = None
    if stage is not None:
        valid = STAGES.get(workflow, ())
        if stage not in valid:
            raise InputError(
                Problem(
                    f"--stage '{stage}' is not a stage of {workflow}",
                    field="--stage",
                    hint=f"stages are: {', '.join(valid)}"
                    if valid
                    else f"{workflow} has no stages",
                )
            )
        st = Stage(stage)
    pl: Plane | None = None
    if plane is not None:
        if plane not in PLANES:
            raise InputError(
                Problem(
                    f"--plane '{plane}' is not a plane", field="--plane", hint="use control or data"
                )
            )
        pl = Plane(plane)
    return Selection(
        limit=limit,
        tags=split_list(tags),
        skip_tags=split_list(skip_tags),
        stage=st,
        plane=pl,
        of_run=_of_run(workflow, of_run),
        prestage=_prestage(workflow, prestage),
    )


def _prestage(workflow: Workflow, parallel: int) -> int:
    """--prestage-parallel N: the bound of a workflow that prestages (0 for the others)."""
    if parallel < 0:
        raise InputError(
            Problem(
                f"--prestage-parallel {parallel} is negative",
                field="--prestage-parallel",
                hint="give how many nodes may fetch at once (1 or more), or --no-prestage",
            )
        )
    return parallel if entry(workflow).prestages else 0


def _of_run(workflow: Workflow, of_run: int | None) -> int | None:
    """--run N: what a rollback needs, and what no other workflow takes."""
    takes = entry(workflow).stored_facts is StoredFacts.ROLLBACK
    if takes and of_run is None:
        raise InputError(
            Problem(
                f"{workflow_label(workflow)} needs the update run it takes back",
                field="--run",
                hint="add --run N (`stepwise history -d ...` lists the runs)",
            )
        )
    if not takes and of_run is not None:
        raise InputError(
            Problem(
                f"--run applies to a rollback, not to {workflow_label(workflow)}", field="--run"
            )
        )
    return of_run


SYSTEM_UPGRADE_TAG = "system_upgrade_"
#: the tags `external-upgrade run` takes, in the OS upgrade's order (a hint shows them): the
#: external installers' prepare and run, and the stages only that command runs
EXTERNAL_TAGS: tuple[Stage, ...] = tuple(
    s for s in Stage if s.startswith(SYSTEM_UPGRADE_TAG) or s in EXTERNAL_STAGES
)


#: the commands that run one workflow whatever is under way
_ONE_WORKFLOW: Mapping[Command, Workflow] = MappingProxyType(
    {
        Command.UPDATE_RUN: Workflow.UPDATE,
        Command.ROLLBACK_RUN: Workflow.ROLLBACK,
        Command.MANAGEMENT_UPGRADE_RUN: Workflow.UNDERCLOUD_UPGRADE,
    }
)


def command_selection(
    command: Command | str,
    *,
    progress: Iterable[str] = (),
    limit: str | None = None,
    tags: Iterable[str] | str | None = (),
    skip_tags: Iterable[str] | str | None = (),
    plane: str | None = None,
    of_run: int | None = None,
    prestage: int = 0,
) -> tuple[Workflow, Selection]:
    """The workflow and selection a command runs (`of_run`: the run a rollback takes back;
    `prestage`: the prestage's bound, 0 for none); InputError when it names nothing to run."""
    cmd = Command(command)
    tag_list, skip = split_list(tags), split_list(skip_tags)
    os_tags = any(t.startswith(SYSTEM_UPGRADE_TAG) for t in tag_list)
    in_os = in_os_upgrade(progress)
    if cmd in _ONE_WORKFLOW:
        wf = _ONE_WORKFLOW[cmd]
        return wf, selection_for(
            wf,
            limit,
            plane=plane if cmd is Command.UPDATE_RUN else None,
            tags=tag_list,
            skip_tags=skip,
            of_run=of_run,
            prestage=prestage,
        )
    if cmd is Command.EXTERNAL_UPGRADE_RUN:
        if not tag_list:
            raise InputError(
                Problem(
                    "external-upgrade run needs --tags naming the operation",
                    field="--tags",
                    hint=f"one of: {', '.join(EXTERNAL_TAGS)}",
                )
            )
        return Workflow.SYSTEM_UPGRADE, Selection(
            limit=limit, tags=tag_list, skip_tags=skip, external=True
        )
    if cmd is Command.UPGRADE_RUN and (os_tags or in_os):
        if plane is not None:
            raise InputError(
                Problem("--plane does not apply to the OS upgrade's steps", field="--plane")
            )
        return Workflow.SYSTEM_UPGRADE, Selection(
            limit=limit, tags=tag_list or (str(Stage.UPGRADE),), skip_tags=skip, external=False
        )
    if cmd is Command.UPGRADE_CONVERGE and in_os:
        return Workflow.SYSTEM_UPGRADE, Selection(
            limit=limit, tags=tag_list, skip_tags=skip, stage=Stage.CONVERGE, external=False
        )
    stage = _UPGRADE_STAGE[cmd]  # the prestage runs with prepare: run and converge as always
    return Workflow.UPGRADE, selection_for(
        Workflow.UPGRADE, limit, stage=stage, plane=plane, tags=tag_list, skip_tags=skip,
        prestage=prestage if stage is Stage.PREPARE else 0,
    )  # fmt: skip


#: the stage each of the upgrade's commands runs
_UPGRADE_STAGE: Mapping[Command, Stage] = MappingProxyType(
    {
        Command.UPGRADE_PREPARE: Stage.PREPARE,
        Command.UPGRADE_RUN: Stage.RUN,
        Command.UPGRADE_CONVERGE: Stage.CONVERGE,
    }
)
