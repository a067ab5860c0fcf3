"""What the report says about each batch beside the timeline: the kind of work of its steps,
the plan's critical path, the table row (node names, the command that runs that batch alone,
for a run how late or early it finished) and plain text for summary values."""

from __future__ import annotations

import shlex
from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from stepwise.model.deployment import Deployment
from stepwise.model.step_kinds import STEP_KINDS, StepKind
from stepwise.model.vocab import Scope, Stage, Step
from stepwise.plan.commands import Command
from stepwise.plan.progress import command_for
from stepwise.plan.table import entry
from stepwise.plan.units import Plan, Unit

#: the upgrade's stages that are whole commands of their own (no --limit)
_STAGE_COMMAND: Mapping[Stage, Command] = {
    Stage.PREPARE: Command.UPGRADE_PREPARE,
    Stage.CONVERGE: Command.UPGRADE_CONVERGE,
}
#: the commands a batch is selected in by --limit
_LIMITED = frozenset({Command.UPDATE_RUN, Command.UPGRADE_RUN})


def unit_kind(u: Unit) -> StepKind:
    """The kind of work a unit does: its step's, except that any operation on the whole
    deployment is deployment-wide."""
    if u.scope is Scope.DEPLOYMENT or not u.nodes:
        return StepKind.DEPLOYMENT
    return STEP_KINDS[u.step]


def critical_path(plan: Plan) -> set[str]:
    """The ids of the longest chain of units by estimated time, following `after` (units come
    in topological order): what to shorten to shorten the plan."""
    longest: dict[str, float] = {}
    prev: dict[str, str | None] = {}
    for u in plan.units:
        best = max((a for a in u.after if a in longest), key=longest.__getitem__, default=None)
        longest[u.id] = u.duration_s + (longest[best] if best is not None else 0.0)
        prev[u.id] = best
    if not longest:
        return set()
    cur: str | None = max(longest, key=longest.__getitem__)
    out: set[str] = set()
    while cur is not None:
        out.add(cur)
        cur = prev[cur]
    return out


def batch_command(plan: Plan, units: list[Unit], nodes: list[str], dep_path: str) -> str:
    """The operator's command that runs this batch alone (the OS upgrade's as the seed spells
    it, `plan.progress.command_for`)."""
    path = shlex.quote(dep_path)
    first = units[0]
    traits = entry(plan.workflow)
    if traits.replaces_os:
        return command_for(replace(first, nodes=tuple(nodes)), path)
    cmd = _STAGE_COMMAND.get(first.stage) if first.stage in traits.stages else None
    if cmd is None:
        cmd = next((c for c in traits.commands if c in _LIMITED), traits.commands[0])
    limit = f" --limit {shlex.quote(','.join(nodes))}" if nodes and cmd in _LIMITED else ""
    return f"stepwise {cmd} -d {path}{limit}"


def delta_text(delta_s: float) -> str:
    """How late (positive) or early a batch finished against its plan, in minutes."""
    m = round(delta_s / 60.0)
    if m == 0:
        return "on time"
    return f"{abs(m)} min {'late' if m > 0 else 'early'}"


def plain(value: Any) -> str:
    """A parameter's value as text for people: lists joined, mappings as `key value`, empty
    and false values left out (an empty string for nothing at all), never a Python repr."""
    if isinstance(value, Mapping):
        return "; ".join(f"{k} {t}" for k, v in value.items() if (t := plain(v)))
    if isinstance(value, (list, tuple, set, frozenset)):
        return ", ".join(t for v in value if (t := plain(v)))
    if value is None or value is False:
        return ""
    if value is True:
        return "yes"
    return str(value)


def batch_groups(plan: Plan) -> dict[str, list[Unit]]:
    """The units of each batch (or each unit outside batches) in plan order, gates left out;
    a role's prestage units are one group, as a role's nodes are a few batches (a 10,000-node
    cloud's prestage is hundreds of units, ~10 roles)."""
    from stepwise.plan.prestage import ROLE_VAR

    groups: dict[str, list[Unit]] = {}
    for u in plan.units:
        if u.step is Step.GATE:
            continue
        role = u.vars.get(ROLE_VAR) if u.step is Step.PRESTAGE else None
        groups.setdefault(f"prestage {role}" if role else u.batch or u.id, []).append(u)
    return groups


def batch_nodes(units: list[Unit]) -> list[str]:
    return list(dict.fromkeys(n for u in units for n in u.nodes))


def batch_roles(units: list[Unit], dep: Deployment) -> list[str]:
    return list(
        dict.fromkeys(dep.role_of(n).name for u in units for n in u.nodes if n in dep.node_by_name)
    )
