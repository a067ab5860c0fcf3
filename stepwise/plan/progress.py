"""Progress of a procedure that spans many commands (the OS upgrade, the seed's 12 steps):
milestones that units record when they are done, and what the cloud looks like because of
them. A command plans what is left of the procedure from its milestones and the facts, then
runs its selected part; a part that needs a milestone no selected unit gives and that is
not reached yet is refused, with the command that reaches it.

Milestones are strings, kept in the store (as markers) and recorded with each run's facts:
`repos@NODE`, `pinned`, and for the OS upgrade `os:prepared@NODE`, `os:external_prepared@NODE`,
`os:new_os@NODE`, `os:stopped_old@ROLE`, `os:transferred@ROLE`, `os:started@NODE`,
`os:external_started@NODE`, `os:online_upgraded`, `os:converged`; for the major upgrade
`upgrade:prepared@NODE` (its `upgrade prepare` done there), `upgrade:control_plane_done@NODE`
(the node's control-plane part of `upgrade run` done) and `upgrade:new_code@NODE` (all of its
`upgrade run` done), which a repository switch (the next upgrade's start) forgets.
"""

from __future__ import annotations

from collections.abc import Iterable

from stepwise.errors import Problem, UnsafePlanError
from stepwise.model.facts import Facts
from stepwise.model.vocab import Phase, Stage, Step
from stepwise.plan.units import Plan, Unit

OS = "os:"


def repos(node: str) -> str:
    return f"repos@{node}"


PINNED = "pinned"


def prepared(node: str) -> str:
    return f"{OS}prepared@{node}"


def external_prepared(node: str) -> str:
    return f"{OS}external_prepared@{node}"


def new_os(node: str) -> str:
    return f"{OS}new_os@{node}"


def stopped_old(role: str) -> str:
    return f"{OS}stopped_old@{role}"


def transferred(role: str) -> str:
    return f"{OS}transferred@{role}"


def started(node: str) -> str:
    return f"{OS}started@{node}"


def external_started(node: str) -> str:
    return f"{OS}external_started@{node}"


#: the major upgrade's milestones (`plan/upgrade_milestones.py`)
UPGRADE = "upgrade:"


def upgrade_prepared(node: str) -> str:
    return f"{UPGRADE}prepared@{node}"


def control_plane_done(node: str) -> str:
    return f"{UPGRADE}control_plane_done@{node}"


def new_code(node: str) -> str:
    return f"{UPGRADE}new_code@{node}"


ONLINE_UPGRADED = f"{OS}online_upgraded"
CONVERGED = f"{OS}converged"

#: what a finished procedure forgets (the cleanup ends the OS upgrade; a later one starts anew)
CLEARED_BY_CLEANUP = (OS, PINNED)


def in_os_upgrade(progress: Iterable[str]) -> bool:
    """True while an OS upgrade has begun and not been cleaned up."""
    return any(m.startswith(OS) for m in progress)


def implicit_marks(unit: Unit) -> tuple[str, ...]:
    """Milestones a unit reaches by its kind, besides the ones the planner gave it: a
    repository switch and an RPC pin are prerequisites of the OS upgrade whichever workflow
    ran them (`upgrade prepare` does)."""
    if unit.step is Step.REPOS:
        return tuple(repos(n) for n in unit.nodes)
    if unit.step is Step.PIN_RPC:
        return (PINNED,)
    return ()


def implicit_clears(unit: Unit) -> tuple[str, ...]:
    """Milestone prefixes a unit ends: lifting the RPC pins ends `pinned`; the OS upgrade's
    cleanup ends the procedure (a later OS upgrade starts anew); a repository switch starts a
    major upgrade, so what the last one reached no longer says anything."""
    if unit.step is Step.REPOS:
        return (UPGRADE,)
    if unit.step is Step.UNPIN_RPC:
        return (PINNED,)
    if unit.step is Step.SYSTEM_UPGRADE_CLEANUP:
        return CLEARED_BY_CLEANUP
    return ()


def command_for(unit: Unit, deployment_path: str) -> str:
    """The operator's command that runs `unit` (the seed's spelling), for refusals' hints."""
    d = f"-d {deployment_path}"
    nodes = ",".join(unit.nodes) or "NODE"
    if unit.stage is Stage.PREPARE:
        return f"stepwise upgrade prepare {d}"
    if unit.step is Step.SYSTEM_UPGRADE_PREPARE or (
        unit.stage is Stage.SYSTEM_UPGRADE_PREPARE and not unit.external
    ):
        return f"stepwise upgrade run {d} --tags system_upgrade_prepare --limit {nodes}"
    if unit.step is Step.EXTERNAL_SYSTEM_UPGRADE_PREPARE:
        return (
            f"stepwise external-upgrade run {d} --tags system_upgrade_prepare "
            f"-e system_upgrade_nodes={nodes}"
        )
    if unit.step is Step.SYSTEM_UPGRADE_RUN:
        return f"stepwise upgrade run {d} --tags system_upgrade_run --limit {nodes}"
    if unit.stage is Stage.SYSTEM_UPGRADE_TRANSFER_DATA:
        roles = unit.vars.get("stepwise_roles") or [nodes]
        return (
            f"stepwise external-upgrade run {d} --tags system_upgrade_transfer_data "
            f"--limit {','.join(roles)}"
        )
    if unit.step is Step.EXTERNAL_SYSTEM_UPGRADE_RUN:
        return (
            f"stepwise external-upgrade run {d} --tags system_upgrade_run "
            f"-e system_upgrade_nodes={nodes}"
        )
    if unit.stage is Stage.ONLINE_UPGRADE:
        return f"stepwise external-upgrade run {d} --tags online_upgrade"
    if unit.stage is Stage.CONVERGE:
        return f"stepwise upgrade converge {d}"
    if unit.stage is Stage.SYSTEM_UPGRADE_CLEANUP:
        return f"stepwise external-upgrade run {d} --tags system_upgrade_cleanup"
    if unit.stage is Stage.UPGRADE:
        return f"stepwise upgrade run {d} --limit {nodes}"
    if unit.stage is Stage.RUN:  # the major upgrade's run, its control plane first
        plane = " --plane control" if unit.phase is Phase.CONTROLPLANE else ""
        return f"stepwise upgrade run {d}{plane}"
    return f"stepwise plan system-upgrade {d}"


def upgrade_command_for(milestone: str, deployment_path: str) -> str | None:
    """The major upgrade's command that reaches `milestone` when no unit of the plan at hand
    does (a node outside --limit), or None for another procedure's milestone."""
    what, _, node = milestone.removeprefix(UPGRADE).partition("@")
    d = f"-d {deployment_path}"
    if not milestone.startswith(UPGRADE):
        return None
    if what == "prepared":
        return f"stepwise upgrade prepare {d}"
    if what == "control_plane_done":
        return f"stepwise upgrade run {d} --plane control"
    return f"stepwise upgrade run {d} --limit {node}"


def prepared_not_upgraded(facts: Facts) -> list[str]:
    """Nodes whose OS upgrade is prepared (leapp has staged it: any reboot now runs it) and
    not yet done: only the OS upgrade's next step may touch them."""
    out = []
    for m in facts.progress:
        if not m.startswith(prepared("")):
            continue
        node = m[len(prepared("")) :]
        on_new = new_os(node) in facts.progress or (
            facts.os_known
            and node in facts.nodes
            and facts.of(node).os_major >= facts.of(node).os_target
        )
        if not on_new:
            out.append(node)
    return sorted(out)


def refuse_prepared_nodes(plan: Plan, facts: Facts, deployment_path: str) -> None:
    """A plan other than the OS upgrade's that would touch a node prepared for the OS upgrade
    is refused (the seed's warning: a reboot there starts an unplanned leapp upgrade; a package
    update there mixes releases under the staged upgrade)."""
    fenced = set(prepared_not_upgraded(facts))
    touched = sorted({n for u in plan.units for n in u.nodes if n in fenced})
    if not touched:
        return
    shown = ", ".join(touched[:8]) + (f" and {len(touched) - 8} more" if len(touched) > 8 else "")
    raise UnsafePlanError(
        Problem(
            f"{shown} {'is' if len(touched) == 1 else 'are'} prepared for the OS upgrade and not "
            f"yet upgraded: the {plan.workflow} would touch "
            f"{'it' if len(touched) == 1 else 'them'}, and a reboot there starts "
            "the staged OS upgrade unplanned",
            file=deployment_path,
            field="--limit",
            hint="finish their OS upgrade first (stepwise upgrade run "
            f"-d {deployment_path or 'DEPLOYMENT'} --tags system_upgrade_run "
            f"--limit {','.join(touched)}), or leave them out: "
            f"--limit '{','.join('!' + n for n in touched)}'",
        )
    )
