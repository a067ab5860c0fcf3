"""The operator's commands, as the seeds spell them: their names, how each presents itself,
and the seed's whole OS-upgrade procedure as the commands an operator types (`seed_commands`).
Which workflow and part a command runs is `options.command_selection`: it reads the workflow
table, which names these commands.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum
from types import MappingProxyType
from typing import TYPE_CHECKING

from stepwise.model.vocab import Stage, Workflow

if TYPE_CHECKING:
    from stepwise.model.deployment import Deployment


class Command(StrEnum):
    """A command that changes the cloud: its family (`upgrade`) and verb (`run`)."""

    UPDATE_RUN = "update run"
    UPGRADE_PREPARE = "upgrade prepare"
    UPGRADE_RUN = "upgrade run"
    UPGRADE_CONVERGE = "upgrade converge"
    EXTERNAL_UPGRADE_RUN = "external-upgrade run"
    MANAGEMENT_UPGRADE_RUN = "management-upgrade run"
    ROLLBACK_RUN = "rollback run"

    @property
    def family(self) -> str:
        return self.value.split()[0]

    @property
    def verb(self) -> str:
        return self.value.split()[1]


@dataclass(frozen=True)
class CommandInfo:
    """How a command presents itself: what a run of it is called, whether it asks before it
    changes anything (unless --yes), its help, and whether it takes --plane."""

    title: str
    asks: bool
    help: str
    plane: bool = False
    #: takes --run N (the run a rollback takes back)
    of_run: bool = False
    #: plans a prestage stage first (`--prestage-parallel N`, `--no-prestage`)
    prestage: bool = False


#: the help of each command family (`stepwise upgrade --help`)
FAMILIES: Mapping[str, str] = MappingProxyType(
    {
        "update": "Minor update: rolling, with no API downtime.",
        "upgrade": "Major upgrade: prepare, run (control plane, then data plane), converge.",
        "external-upgrade": "Operations run by tag: system_upgrade_prepare/run/transfer_data/"
        "cleanup, online_upgrade, ...",
        "management-upgrade": "Upgrade the management node (undercloud).",
        "rollback": "Take a minor update run back: its nodes to the versions they had before.",
    }
)

COMMANDS: Mapping[Command, CommandInfo] = MappingProxyType(
    {
        Command.UPDATE_RUN: CommandInfo(
            "update",
            False,
            "Run the minor update (rolling; continues an unfinished update run).",
            prestage=True,
        ),
        Command.UPGRADE_PREPARE: CommandInfo(
            "upgrade prepare",
            True,
            "Validations, repositories of -e target_release, backup, pin RPC: the upgrade's "
            "first stage (the OS upgrade's step 1). The prestage stage comes first: it "
            "switches the repositories and fetches the new release on every node.",
            prestage=True,
        ),
        Command.UPGRADE_RUN: CommandInfo(
            "upgrade run",
            True,
            "Upgrade nodes (--plane control|data to split). With --tags system_upgrade_prepare|"
            "system_upgrade_run --limit NODES the OS upgrade's prepare or reboot of those nodes; "
            "while an OS upgrade is under way, --limit NODES upgrades nodes that run the new OS "
            "(its step 6).",
            plane=True,
        ),
        Command.UPGRADE_CONVERGE: CommandInfo(
            "upgrade converge",
            True,
            "Unpin RPC, online data migrations, re-assert state: the upgrade's last stage.",
        ),
        Command.EXTERNAL_UPGRADE_RUN: CommandInfo(
            "external-upgrade",
            True,
            "The OS upgrade's operations of external installers and of the whole cloud, by tag: "
            "system_upgrade_prepare / system_upgrade_run (ceph), system_upgrade_transfer_data "
            "(--limit roles), online_upgrade, system_upgrade_cleanup; -e system_upgrade_nodes=... "
            "works as --limit.",
        ),
        Command.MANAGEMENT_UPGRADE_RUN: CommandInfo(
            "management upgrade",
            True,
            "Upgrade the management node (undercloud): the tool first, dump the database while "
            "it runs, stop every service, all packages, restore, re-run install, every DB sync. "
            "With --tags system_upgrade_prepare|system_upgrade_run --limit NODE its own OS "
            "upgrade first.",
            prestage=True,
        ),
        Command.ROLLBACK_RUN: CommandInfo(
            "rollback",
            True,
            "Roll back the minor update run --run N: the nodes it changed go back to the "
            "package versions they had before it, rolling, under the update's availability "
            "rules (continues an unfinished rollback of that run).",
            of_run=True,
        ),
    }
)


def seed_commands(dep: Deployment, target_release: str) -> list[tuple[str, ...]]:
    """The seed's 12 steps for this deployment as the commands an operator types, in order
    (stepwise's arguments, without the deployment and connection options): the first node of
    each sensitive role, the one-time data transfer, the new release on them, every other node
    one by one, then online migrations, converge and cleanup."""
    from stepwise.plan.system_upgrade import is_sensitive

    roles = [r for r in dep.roles if not r.is_management and r.nodes]
    sensitive = [r for r in roles if is_sensitive(dep, r)]
    firsts = [r.bootstrap_node.name for r in sensitive]  # type: ignore[union-attr]
    first = ",".join(firsts)
    release = ("-e", f"target_release={target_release}")
    out: list[tuple[str, ...]] = [("upgrade", "prepare", *release)]
    out += _into_new_os(first)
    out.append(
        (
            "external-upgrade",
            "run",
            "--tags",
            Stage.SYSTEM_UPGRADE_TRANSFER_DATA,
            "--limit",
            ",".join(r.name for r in sensitive),
        )
    )
    out += _new_release(first, release)
    later = [n.name for r in sensitive for n in r.nodes if n.name not in firsts]
    later += [n.name for r in roles if r not in sensitive for n in r.nodes]
    for n in later:
        out += _into_new_os(n)
        out += _new_release(n, release)
    out += [
        ("external-upgrade", "run", "--tags", Stage.ONLINE_UPGRADE),
        ("upgrade", "converge"),
        ("external-upgrade", "run", "--tags", Stage.SYSTEM_UPGRADE_CLEANUP),
    ]
    return out


def seed_preview(command: tuple[str, ...]) -> tuple[str, ...]:
    """The `stepwise plan` arguments that preview one of `seed_commands`' commands on any
    cloud, a fresh one too (what earlier commands would do is assumed, and said): the
    workflow the command runs during the OS upgrade, with its own options; `upgrade run`
    without --tags is the seed's `upgrade` tag, `upgrade converge` step 11 alone."""
    verb, rest = " ".join(command[:2]), tuple(command[2:])
    if verb == Command.UPGRADE_PREPARE:
        return ("plan", str(Workflow.UPGRADE), "--stage", str(Stage.PREPARE), *rest)
    os_upgrade = ("plan", str(Workflow.SYSTEM_UPGRADE))
    if verb == Command.UPGRADE_CONVERGE:
        skip = ("--skip-tags", str(Stage.ONLINE_UPGRADE))
        return (*os_upgrade, "--tags", str(Stage.CONVERGE), *skip, *rest)
    if "--tags" not in rest:
        rest = ("--tags", str(Stage.UPGRADE), *rest)
    return (*os_upgrade, *rest)


def _into_new_os(nodes: str) -> list[tuple[str, ...]]:
    """Prepare the OS upgrade of `nodes` (theirs and the external services'), then run it."""
    return [
        ("upgrade", "run", "--tags", Stage.SYSTEM_UPGRADE_PREPARE, "--limit", nodes),
        (
            "external-upgrade",
            "run",
            "--tags",
            Stage.SYSTEM_UPGRADE_PREPARE,
            "-e",
            f"system_upgrade_nodes={nodes}",
        ),
        ("upgrade", "run", "--tags", Stage.SYSTEM_UPGRADE_RUN, "--limit", nodes),
    ]


def _new_release(nodes: str, release: tuple[str, str]) -> list[tuple[str, ...]]:
    """The new release on `nodes`, then their external services back."""
    return [
        ("upgrade", "run", "--limit", nodes, *release),
        (
            "external-upgrade",
            "run",
            "--tags",
            Stage.SYSTEM_UPGRADE_RUN,
            "-e",
            f"system_upgrade_nodes={nodes}",
        ),
    ]
