"""`--limit`, `--tags`, `--skip-tags` as an Ansible user expects, and the seed's safety rules
for `system_upgrade_*` operations. Everything here runs before anything touches a node.
"""

from __future__ import annotations

import difflib
from dataclasses import replace
from types import MappingProxyType
from typing import Iterable, Sequence

from stepwise.errors import InputError, Problem, UnsafePlanError
from stepwise.model import Deployment
from stepwise.plan.limits import resolve_limit
from stepwise.plan.units import Plan, Unit

SYSTEM_UPGRADE_PREFIX = "system_upgrade_"
#: these reboot or reprovision nodes: never on a whole role at once (the seed's step 4 caution)
NO_WHOLE_ROLE = ("system_upgrade_prepare", "system_upgrade_run")
#: Ansible's special tags
ALL_TAGS = ("all",)


def split_list(values: Iterable[str] | None) -> list[str]:
    """`--tags a,b --tags c` -> [a, b, c]."""
    out: list[str] = []
    for v in values or ():
        out.extend(p.strip() for p in str(v).split(",") if p.strip())
    return out


def unit_tags(unit: Unit) -> set[str]:
    """What `--tags` matches for a unit: its tags and its step name."""
    return {*unit.tags, unit.step}


def is_system_upgrade(unit: Unit) -> bool:
    return unit.step.startswith(SYSTEM_UPGRADE_PREFIX)


def select(plan: Plan, deployment: Deployment, *, limit: str | None = None, tags: Sequence[str] = (),
           skip_tags: Sequence[str] = ()) -> Plan:
    """The plan restricted to what the operator asked for; refuses bad or unsafe selections.

    Limit: units keep only the selected nodes and disappear when none is left (units without
    nodes, like barriers, stay). Tags: a unit runs when one of its tags or its step is asked
    for (`all` or no --tags: every unit except `system_upgrade_*`, which run only when their
    tag is named). Skip-tags win over tags. Dependencies on dropped units are dropped too.
    """
    tags, skip_tags = split_list(tags), split_list(skip_tags)
    _check_tags(plan, tags, "--tags")
    _check_tags(plan, skip_tags, "--skip-tags")
    nodes = resolve_limit(deployment, limit) if limit is not None else None
    keep = set(nodes) if nodes is not None else None
    asked = set(tags)
    out: list[Unit] = []
    for u in plan.units:
        ut = unit_tags(u)
        if is_system_upgrade(u):
            if u.step not in asked and not (asked & set(u.tags) - set(ALL_TAGS)):
                continue
        elif asked and not (asked & ut) and not (asked & set(ALL_TAGS)):
            continue
        if ut & set(skip_tags):
            continue
        if keep is not None and u.nodes:
            left = tuple(n for n in u.nodes if n in keep)
            if not left:
                continue
            if left != u.nodes:
                work = None
                if u.work is not None:
                    work = MappingProxyType({n: s for n, s in u.work.items() if n in keep})
                u = replace(u, nodes=left, work=work)
        out.append(u)
    ids = {u.id for u in out}
    out = [replace(u, after=tuple(a for a in u.after if a in ids)) if any(a not in ids for a in u.after) else u
           for u in out]
    if not [u for u in out if u.nodes or u.services]:
        what = []
        if limit:
            what.append(f"--limit {limit}")
        if tags:
            what.append(f"--tags {','.join(tags)}")
        if skip_tags:
            what.append(f"--skip-tags {','.join(skip_tags)}")
        raise InputError(Problem(f"nothing to run: {' '.join(what) or 'the plan'} selects no unit of the "
                                 f"{plan.workflow} plan", field="--tags" if tags else "--limit",
                                 hint="check the tags with `stepwise plan`; system_upgrade_* units run only "
                                      "when their tag is named"))
    check_safety(plan, out, deployment, limit=limit, nodes=nodes)
    params = dict(plan.params)
    params.update({"limit": limit, "tags": tags, "skip_tags": skip_tags})
    return plan.with_units(out, params=MappingProxyType(params))


def _check_tags(plan: Plan, tags: Sequence[str], flag: str) -> None:
    known = {t for u in plan.units for t in unit_tags(u)} | set(ALL_TAGS)
    bad = [t for t in tags if t not in known]
    if bad:
        problems = []
        for t in bad:
            close = difflib.get_close_matches(t, sorted(known), n=3)
            problems.append(Problem(f"tag '{t}' matches no unit of the {plan.workflow} plan", field=flag,
                                    hint=(f"did you mean {', '.join(close)}? " if close else "")
                                    + f"tags are: {', '.join(sorted(known))}"))
        raise InputError(problems)


def check_safety(plan: Plan, units: Sequence[Unit], deployment: Deployment, *, limit: str | None,
                 nodes: Sequence[str] | None) -> None:
    """The seed's rules: system_upgrade_* never without --limit, prepare/run never on a whole
    role (of more than one node)."""
    sys_units = [u for u in units if is_system_upgrade(u)]
    if not sys_units:
        return
    steps = sorted({u.step for u in sys_units})
    if limit is None or nodes is None:
        raise UnsafePlanError(Problem(f"{', '.join(steps)} refuses to run without --limit",
                                      field="--limit",
                                      hint="name the nodes explicitly, e.g. --limit controller-0,database-0 "
                                           "(one node of each cluster-/schema-sensitive role first)"))
    chosen = set(nodes)
    if any(u.step in NO_WHOLE_ROLE for u in sys_units):
        touched = {n for u in sys_units if u.step in NO_WHOLE_ROLE for n in u.nodes}
        problems = []
        for role in deployment.roles:
            names = {n.name for n in role.nodes}
            if len(names) > 1 and names <= chosen and names & touched:
                problems.append(Problem(
                    f"--limit '{limit}' covers the whole role {role.name} ({len(names)} nodes); "
                    f"{', '.join(s for s in steps if s in NO_WHOLE_ROLE)} refuses to run on a whole role at once",
                    field="--limit", hint=f"upgrade the nodes of {role.name} one by one, e.g. --limit {sorted(names)[0]}"))
        if problems:
            raise UnsafePlanError(problems)
