"""Selection is planning: `--stage`, `--plane`, `--limit`, `--tags`, `--skip-tags` cut the
plan down to what will run, here in the plan layer, so the selected plan is the one the
verifier checks and the engine runs.

What is cut is cut cleanly: a unit keeps only the selected nodes, and with them only their
share of `work`, `stops` and `starts`; waits on dropped units are dropped (they are assumed
done or left for another command); the estimated times are recomputed.
"""

from __future__ import annotations

import difflib
from collections.abc import Mapping, Sequence
from dataclasses import replace
from types import MappingProxyType

from stepwise.errors import InputError, Problem, UnsafePlanError
from stepwise.model.deployment import Deployment
from stepwise.model.vocab import UPGRADE_STAGES, Phase, Stage, Step, Workflow
from stepwise.plan.limits import resolve_limit
from stepwise.plan.schedule import asap
from stepwise.plan.selection import Selection
from stepwise.plan.table import entry
from stepwise.plan.units import Plan, Unit

#: Ansible's special tag: every unit but the by-name-only ones.
ALL = "all"


def unit_tags(unit: Unit) -> set[str]:
    """What `--tags` matches for a unit: its tags and its step."""
    return {*unit.tags, str(unit.step)}


def select(
    plan: Plan, deployment: Deployment, selection: Selection, nodes: Sequence[str] | None = None
) -> Plan:
    """The plan cut down to `selection`; refuses bad or unsafe selections before anything runs.

    `nodes`: the limit already resolved (the planner resolves it once). Stage and plane keep
    the units of that stage/part of the rollout. Tags: a unit is kept when one of its tags or
    its step is asked for (`all` or no --tags: every unit except the by-name-only
    `system_upgrade_*` ones, which run only when their own tag is named). Skip-tags win.
    """
    _check_tags(plan, selection.tags, "--tags")
    _check_tags(plan, selection.skip_tags, "--skip-tags")
    if nodes is None and selection.limit is not None:
        nodes = resolve_limit(deployment, selection.limit)
    keep_nodes = set(nodes) if nodes is not None else None
    asked = set(selection.tags)
    skip = set(selection.skip_tags)
    out: list[Unit] = []
    changed = False
    # Asked for by name: with no --tags, an OS-upgrade plan is the preview of the whole
    # procedure, and the management node's plan has its OS upgrade only when asked for
    # (-e system_upgrade_mode); any other workflow leaves its by-name-only operations out.
    by_name = bool(asked) or not entry(plan.workflow).shows_named_steps
    for u in plan.units:
        kept = _narrow(u, keep_nodes) if _wanted(u, selection, asked, skip, by_name) else None
        if kept is not u:
            changed = True
        if kept is not None:
            out.append(kept)
    ids = {u.id for u in out}
    gates = [u.id for u in out if u.is_barrier and u.stage is Stage.PRESTAGE]
    out = [
        replace(u, after=_kept_after(u, ids, gates)) if any(a not in ids for a in u.after) else u
        for u in out
    ]
    if not any(u.nodes or u.services for u in out):
        out = []  # only barriers: nothing to do (valid names that select nothing left)
    check_safety(plan.workflow, out, deployment, selection, nodes)
    units, makespan = asap(out)
    params = {
        **dict(plan.params),
        **selection.params(),
        "partial": bool(plan.params.get("partial")) or changed,
    }
    return plan.with_units(units, duration_s=makespan, params=MappingProxyType(params))


def _kept_after(u: Unit, ids: set[str], gates: Sequence[str]) -> tuple[str, ...]:
    """What a kept unit still waits for: its kept predecessors and, for a unit after the
    prestage stage (every one of them waits for its gate) that lost one, the stage's gate:
    `--plane` drops the rollout's barriers, and a node's disruption must still follow its
    prestage. Without a prestage stage, only the kept predecessors (the plan as before)."""
    kept = [a for a in u.after if a in ids]
    if u.stage is not Stage.PRESTAGE:
        kept += gates
    return tuple(dict.fromkeys(kept))


def _prestage_of(u: Unit, stage: Stage) -> bool:
    """The prestage stage runs with the first stage (`upgrade prepare`): it must come before
    anything the stages disrupt, and no command of its own is typed for it."""
    return u.stage is Stage.PRESTAGE and stage is UPGRADE_STAGES[0]


def _wanted(u: Unit, sel: Selection, asked: set[str], skip: set[str], by_name: bool) -> bool:
    if sel.stage is not None and u.stage != sel.stage and not _prestage_of(u, sel.stage):
        return False
    if sel.external is not None and u.external != sel.external:
        return False
    # every node of the plan fetches before either plane is disrupted (its gate included)
    if sel.plane is not None and u.stage is not Stage.PRESTAGE:
        if u.phase and u.phase != sel.plane.phase:
            return False
        if not u.phase and u.is_barrier and not u.marks:
            return False  # a stage's gate that marks (prepare done) stays: later parts need it
    tags = unit_tags(u)
    if u.step.info.by_name_only and by_name:
        if not (asked & (tags - {ALL})):
            return False
    elif asked and not (asked & tags) and ALL not in asked:
        return False
    return not (tags & skip)


def _narrow(u: Unit, keep: set[str] | None) -> Unit | None:
    """The unit on the kept nodes only (None when none is left; barriers stay)."""
    if keep is None or not u.nodes:
        return u
    left = tuple(n for n in u.nodes if n in keep)
    if not left:
        return None
    if left == u.nodes:
        return u
    dropped = {f"@{n}" for n in u.nodes if n not in keep}
    return replace(
        u,
        nodes=left,
        work=_only(u.work, keep),
        stops=_only(u.stops, keep, values=True),
        starts=_only(u.starts, keep, values=True),
        marks=tuple(m for m in u.marks if not any(m.endswith(d) for d in dropped)),
        requires=tuple(m for m in u.requires if not any(m.endswith(d) for d in dropped)),
    )


def _only(m: Mapping[str, tuple[str, ...]] | None, keep: set[str], values: bool = False):
    if m is None:
        return None
    if values:  # service -> nodes
        return MappingProxyType(
            {
                s: tuple(n for n in ns if n in keep)
                for s, ns in m.items()
                if any(n in keep for n in ns)
            }
        )
    return MappingProxyType({n: ss for n, ss in m.items() if n in keep})


#: every word a unit may be tagged with, whether or not a unit of this plan still carries it
VOCABULARY = frozenset(
    {
        ALL,
        *(str(s) for s in Step),
        *(str(s) for s in Stage),
        *(str(p) for p in Phase if p),
        "tool",
        "external",
    }
)


def _check_tags(plan: Plan, tags: Sequence[str], flag: str) -> None:
    known = {t for u in plan.units for t in unit_tags(u)} | VOCABULARY
    bad = [t for t in tags if t not in known]
    if bad:
        problems = []
        for t in bad:
            close = difflib.get_close_matches(t, sorted(known), n=3)
            problems.append(
                Problem(
                    f"tag '{t}' matches no unit of the {plan.workflow} plan",
                    field=flag,
                    hint=(f"did you mean {', '.join(close)}? " if close else "")
                    + f"tags are: {', '.join(sorted(known))}",
                )
            )
        raise InputError(problems)


def check_safety(
    workflow: Workflow,
    units: Sequence[Unit],
    deployment: Deployment,
    selection: Selection,
    nodes: Sequence[str] | None,
) -> None:
    """The seed's rules: `system_upgrade_*` operations never without --limit; reboots and
    reprovisioning never on every node of a role (of more than one node) at once."""
    named = [u for u in units if u.step.info.by_name_only]
    traits = entry(workflow)
    if traits.whole_outage:
        return  # one management node, its OS upgrade asked for explicitly (-e system_upgrade_mode)
    if not named or (traits.shows_named_steps and not selection.tags):
        return  # nothing named, or the preview of the whole OS-upgrade procedure (`stepwise plan`)
    steps = sorted({str(u.step) for u in named if u.step.info.needs_limit})
    if steps and (selection.limit is None or nodes is None):
        # a missing option is bad input (exit 2), not an unsafe plan: nothing was planned yet
        raise InputError(
            Problem(
                f"{', '.join(steps)} refuses to run without --limit",
                field="--limit",
                hint="name the nodes explicitly, e.g. --limit controller-0,database-0 "
                "(one node of each cluster-/schema-sensitive role first)",
            )
        )
    if nodes is None:
        return
    chosen = set(nodes)
    touched = {n for u in named if u.step.info.whole_role_refused for n in u.nodes}
    problems = []
    for role in deployment.roles:
        names = {n.name for n in role.nodes}
        if len(names) > 1 and names <= chosen and names & touched:
            refusing = sorted(
                {
                    str(u.step)
                    for u in named
                    if u.step.info.whole_role_refused and set(u.nodes) & names
                }
            )
            problems.append(
                Problem(
                    f"--limit '{selection.limit}' covers the whole role {role.name} "
                    f"({len(names)} nodes); {', '.join(refusing)} refuses to run on a whole role "
                    "at once",
                    field="--limit",
                    hint=f"upgrade the nodes of {role.name} one by one, "
                    f"e.g. --limit {sorted(names)[0]}",
                )
            )
    if problems:
        raise UnsafePlanError(problems)


def check_requires(
    plan: Plan,
    full: Plan,
    progress: frozenset[str] | set[str],
    deployment_path: str,
    preview: bool = False,
) -> Plan:
    """A selected part of a multi-command procedure may only need milestones that are
    reached already or that its own units reach. A barrier whose needs are not met is left
    for a later command; a unit of work is refused with the command to run first. With
    `preview` (`stepwise plan`: nothing runs) what is missing is assumed done instead, and the
    plan's `params["assumed"]` says what, each with the command that does it."""
    from stepwise.plan.progress import command_for, implicit_marks

    def marks_of(u: Unit) -> set[str]:
        return set(u.marks) | set(implicit_marks(u))

    producers: dict[str, Unit] = {}
    for u in full.units:
        for m in marks_of(u):
            producers.setdefault(m, u)
    kept: list[Unit] = []
    reached = set(progress)
    assumed: dict[str, str] = {}
    for u in plan.units:
        missing = [m for m in u.requires if m not in reached]
        if missing and u.is_barrier:
            continue
        if missing and preview:
            for m in missing:
                assumed[m] = _next_command(m, producers, reached, deployment_path, command_for)
            reached |= set(missing)
            missing = []
        if missing:
            raise InputError(
                Problem(
                    f"{u.step} on {', '.join(u.nodes) or 'the cloud'} "
                    f"needs {_needs(missing[0])}"
                    + (f" (and {len(missing) - 1} more)" if len(missing) > 1 else "")
                    + " first",
                    field=_field(plan.params),
                    hint="run first: "
                    + _next_command(missing[0], producers, reached, deployment_path, command_for),
                )
            )
        kept.append(u)
        reached |= marks_of(u)
    if assumed:
        said = [{"milestone": m, "needs": _needs(m), "command": cmd} for m, cmd in assumed.items()]
        plan = plan.with_units(
            plan.units, params=MappingProxyType({**plan.params, "assumed": said})
        )
    if len(kept) == len(plan.units):
        return plan
    ids = {u.id for u in kept}
    kept = [replace(u, after=tuple(a for a in u.after if a in ids)) for u in kept]
    units, makespan = asap(kept)
    return plan.with_units(units, duration_s=makespan)


def _field(params: Mapping[str, object]) -> str:
    """The option that selected a part out of order: its tags, its stage, else its nodes."""
    return "--tags" if params.get("tags") else "--stage" if params.get("stage") else "--limit"


def _needs(milestone: str) -> str:
    what, _, where = milestone.partition("@")
    what = what.removeprefix("os:").removeprefix("upgrade:").replace("_", " ")
    return f"'{what}'" + (f" of {where}" if where else "")


def _next_command(
    m: str, producers: Mapping[str, Unit], reached: set[str], path: str, command_for
) -> str:
    """The command of the earliest step still missing on the way to milestone `m`."""
    seen: set[str] = set()
    while m in producers and m not in seen:
        seen.add(m)
        u = producers[m]
        earlier = [r for r in u.requires if r not in reached and r in producers]
        if not earlier:
            return command_for(u, path)
        m = earlier[0]
    from stepwise.plan.progress import upgrade_command_for

    return upgrade_command_for(m, path) or (
        f"stepwise plan system-upgrade -d {path} (to see what is left)"
    )


__all__ = [
    "select",
    "unit_tags",
    "check_safety",
    "check_requires",
    "ALL",
]
