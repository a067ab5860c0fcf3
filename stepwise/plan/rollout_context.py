"""What the parts of a rollout share: the cursor where the plan stands, and the context
(builder, deployment, workflow, stage, tags and availability rules) its units are made in."""

from __future__ import annotations

from dataclasses import dataclass

from stepwise.model.availability import service_allowances
from stepwise.model.catalog import effective_rule
from stepwise.model.deployment import Deployment
from stepwise.model.vocab import Phase, Section, Stage
from stepwise.plan.batching import schedule_rolling
from stepwise.plan.builder import PlanBuilder
from stepwise.plan.visits import Visit


@dataclass
class Cursor:
    """Where the plan is: the unit the next work waits for, and its estimated time."""

    after: str | None
    t: float = 0.0


@dataclass(frozen=True)
class RolloutContext:
    """What every part of a rollout shares: where its units go and the rules they keep."""

    builder: PlanBuilder
    dep: Deployment
    workflow: Section
    stage: Stage
    tags: tuple[str, ...]
    #: node -> its place in the deployment
    order: dict[str, int]
    role_serial: dict[str, int]
    allowance: dict[str, int]
    instances: dict[str, int]

    @classmethod
    def of(
        cls,
        builder: PlanBuilder,
        dep: Deployment,
        workflow: Section,
        stage: Stage,
        tags: tuple[str, ...],
    ) -> RolloutContext:
        """The context of a rollout of `workflow` on `dep`."""
        allowance, instances = service_allowances(dep)
        return cls(
            builder,
            dep,
            workflow,
            stage,
            tags,
            order={n.name: i for i, n in enumerate(dep.nodes)},
            role_serial={r.name: r.update_serial for r in dep.roles},
            allowance=allowance,
            instances=instances,
        )

    def schedule(
        self,
        visits: dict[str, list[Visit]],
        cur: Cursor,
        part: Phase,
        what: str,
        done: str = "done on every node before the next level starts",
        role_starts: dict[str, Cursor] | None = None,
    ) -> Cursor:
        """Roll `visits` (role -> visits) in batches, control-plane roles first, then a gate.
        `role_starts`: roles that start later than `cur`, each after its own cursor."""
        dep = self.dep
        rank = {r.name: (0 if r.is_controlplane else 1, i) for i, r in enumerate(dep.roles)}
        visits = dict(sorted(visits.items(), key=lambda kv: rank[kv[0]]))
        res = schedule_rolling(
            self.builder,
            visits,
            role_serial=self.role_serial,
            allowance=self.allowance,
            instances=self.instances,
            start_s=cur.t,
            after=cur.after,
            stage=self.stage,
            phase=part,
            describe=lambda s: describe_rule(dep, s),
            tags=self.tags,
            role_starts={r: (c.t, c.after) for r, c in (role_starts or {}).items()},
        )
        gate = self.builder.gate(res.last_units, f"{what}: {done}", self.stage, part)
        return Cursor(gate, res.end_s)


def describe_rule(dep: Deployment, service: str) -> str:
    rule = effective_rule(dep.catalog[service], len(dep.instances.get(service, ())))
    return rule.describe() if rule else "no rule"
