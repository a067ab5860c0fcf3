"""The rollback of a minor update: the nodes an update run changed, back to the versions they
had before it, under the same availability rules as the update.

The plan is the minor update's own (`plan_update`), made from *rollback facts*: on each node
the run changed, a package it updated is "installed" at the version it runs now and
"available" at the version the run replaced (what the run recorded before it started; the
run layer's `rollback_facts` builds them from the store). Every other node has nothing to
change. So the nodes, the batches, the visits (leave, stop, packages, start, rejoin) and the
verifier's proof are the update's; only the packages step differs: a service's own
`dnf update` would go forward again, so each packages unit carries what it takes back
(`downgrade`: node -> package -> version) and stepwise downgrades them (`run/node_work.py`).
"""

from __future__ import annotations

import re
from dataclasses import replace
from types import MappingProxyType

from stepwise.errors import InputError, Problem
from stepwise.model.deployment import Deployment
from stepwise.model.facts import Facts
from stepwise.model.vocab import Step
from stepwise.plan.builder import PlanBuilder
from stepwise.plan.units import Unit
from stepwise.plan.update_upgrade import plan_update

#: the unit variable a rollback's packages unit carries: node -> {package: version to go to}
DOWNGRADE = "downgrade"
#: what an RPM version (epoch:version-release) is made of: a version becomes part of a dnf
#: argument, so anything else (a space, a brace, a leading dash) is refused, not passed on
VERSION = re.compile(r"^[0-9A-Za-z][0-9A-Za-z._+~^:-]{0,127}$")


def plan_rollback(
    builder: PlanBuilder,
    dep: Deployment,
    facts: Facts,
    nodes: list[str] | None,
    of_run: int | None,
) -> None:
    """The rollback of run `of_run` from its rollback facts: the update's plan, whose packages
    units go back to the recorded versions instead of forward."""
    if of_run is None or not facts.known:
        raise InputError(
            Problem(
                "a rollback needs the update run it takes back",
                field="--run",
                hint="name it: --run N (`stepwise history -d ...` lists the runs)",
            )
        )
    plan_update(builder, dep, facts, nodes)
    builder.units[:] = [_downgrading(u, dep, facts) for u in builder.units]
    builder.params["rollback_of"] = of_run


def _downgrading(unit: Unit, dep: Deployment, facts: Facts) -> Unit:
    """A packages unit with what it takes back on each of its nodes: the changing packages of
    its services there and the unowned ones it carries, each to its version before the run."""
    if unit.step is not Step.PACKAGES:
        return unit
    extra = unit.vars.get("extra_packages") or {}
    back: dict[str, dict[str, str]] = {}
    for node in unit.nodes:
        nf = facts.of(node)
        names = {p for s in unit.services_on(node) for p in dep.catalog[s].packages}
        names |= set(extra.get(node, ()))
        versions = {
            p: nf.packages[p].available
            for p in sorted(names)
            if p in nf.packages and nf.packages[p].changes
        }
        for p, v in versions.items():
            if not VERSION.match(str(v)):
                raise InputError(
                    Problem(
                        f"the version to take {p} back to on {node} is not a package version: "
                        f"{str(v)[:60]!r}",
                        file=facts.source,
                        field=f"nodes.{node}.packages.{p}",
                        hint="the store holds what the run recorded: it was changed outside "
                        "stepwise",
                    )
                )
        if versions:
            back[node] = versions  # type: ignore[assignment]  # `changes` means not None
    return replace(unit, vars=MappingProxyType({**unit.vars, DOWNGRADE: back}))
