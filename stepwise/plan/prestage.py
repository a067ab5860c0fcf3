"""The prestage stage: before anything is disrupted, each node that changes fetches what it
will install (its changing packages into dnf's cache; a container style's images), while
every service keeps serving. Units after it only switch.

Concurrency is expressed as the rest of the plan expresses it, by edges: the prestage units
run in `parallel` lanes (the unit of the i-th node waits for the one of the (i-N)-th), so at
most N download at once whatever the engine's own bounds, and the engine's path cover turns
each lane into one ansible-playbook process. A gate after them makes every later unit wait
for every prestage: a failed prestage (a registry or repository down) fails the run before
anything is stopped anywhere, and the same command continues once the source is back.
"""

from __future__ import annotations

from collections.abc import Mapping

from stepwise.model.catalog import node_step_seconds
from stepwise.model.deployment import Deployment
from stepwise.model.vocab import Scope, Stage, Step
from stepwise.plan.builder import PlanBuilder
from stepwise.plan.changes import NodeChange
from stepwise.plan.rollout_context import Cursor
from stepwise.plan.units import Plan

#: the bound an operator gets without --prestage-parallel: the nodes fetching at once share the
#: repositories' (or registry's) bandwidth
DEFAULT_PARALLEL = 4


def fetches(change: NodeChange) -> bool:
    """The node has something to fetch: a service whose software changes, or packages no
    service owns (a service that only restarts for its configuration fetches nothing)."""
    return bool(change.services or change.extra_packages)


def add_prestage(
    builder: PlanBuilder,
    dep: Deployment,
    changes: Mapping[str, NodeChange],
    parallel: int,
    cur: Cursor,
) -> Cursor:
    """One prestage unit per node that fetches something, at most `parallel` at once, after
    `cur`, then a gate; returns where the plan goes on. `parallel` 0: no stage (`cur`)."""
    nodes = [n for n, c in changes.items() if fetches(c)]
    if parallel <= 0 or not nodes:
        return cur
    catalog = dep.catalog
    lanes: list[str | None] = [cur.after] * min(parallel, len(nodes))
    lane_t = [cur.t] * len(lanes)
    for i, node in enumerate(nodes):
        ch, lane = changes[node], i % len(lanes)
        seconds = node_step_seconds([catalog[s] for s in ch.services], Step.PRESTAGE)
        lanes[lane] = builder.add(
            Step.PRESTAGE,
            nodes=[node],
            services=ch.services,
            after=[lanes[lane]],
            why=f"fetch what {node} installs while its services keep serving"
            + (f" (lane {lane + 1} of {len(lanes)})" if len(lanes) > 1 else ""),
            stage=Stage.PRESTAGE,
            scope=Scope.NODE,
            duration_s=seconds,
            vars={"extra_packages": {node: list(ch.extra_packages)}} if ch.extra_packages else None,
        )
        lane_t[lane] += seconds
    gate = builder.gate(
        lanes,
        f"prestaged: {len(nodes)} node(s) hold what they install; the disruptive part starts",
        Stage.PRESTAGE,
    )
    return Cursor(gate, max(lane_t))


def prestage_seconds(plan: Plan) -> float:
    """How long the plan's prestage stage takes by its estimate (0 without one): the rest of
    the plan, the disruptive part, starts when it ends."""
    return max((u.end_s for u in plan.units if u.stage is Stage.PRESTAGE), default=0.0)
