"""Accumulates units in creation order (which is a topological order) with stable ids."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from types import MappingProxyType
from typing import Any

from stepwise.model.vocab import Phase, Scope, Stage, Step
from stepwise.plan.units import Unit


def _freeze(m: Mapping[str, Iterable[str]] | None) -> Mapping[str, tuple[str, ...]]:
    if not m:
        return MappingProxyType({})
    return MappingProxyType({k: tuple(v) for k, v in m.items()})


class PlanBuilder:
    """Creates units u1, u2, ... Every `after` must name an existing unit, so the order in
    which units are added is a valid execution order and ids are deterministic."""

    def __init__(self) -> None:
        self.units: list[Unit] = []
        self._ids: set[str] = set()
        self._batches: dict[str, int] = {}
        #: what the plan starts from, when it is not "everything up on the old release"
        #: (e.g. OS-upgrade nodes already done by an earlier run); goes into Plan.params
        self.params: dict = {}

    def batch_label(self, role: str) -> str:
        """A plan-wide unique batch name: Compute#1, Compute#2, ... across all levels."""
        self._batches[role] = self._batches.get(role, 0) + 1
        return f"{role}#{self._batches[role]}"

    def add(
        self,
        step: Step,
        *,
        nodes: Iterable[str] = (),
        services: Iterable[str] = (),
        after: Iterable[str | None] = (),
        stops: Mapping[str, Iterable[str]] | None = None,
        starts: Mapping[str, Iterable[str]] | None = None,
        why: str,
        stage: Stage,
        phase: Phase = Phase.NONE,
        scope: Scope = Scope.NODE,
        batch: str | None = None,
        duration_s: float = 0.0,
        tags: Iterable[str] = (),
        idempotent: bool | None = None,
        work: Mapping[str, Iterable[str]] | None = None,
        vars: Mapping[str, Any] | None = None,
        marks: Iterable[str] = (),
        requires: Iterable[str] = (),
    ) -> str:
        uid = f"u{len(self.units) + 1}"
        step = Step(step)
        if idempotent is None:
            idempotent = not step.info.once_only
        deps = tuple(dict.fromkeys(a for a in after if a))
        for a in deps:
            if a not in self._ids:  # pragma: no cover - planner bug guard
                raise ValueError(f"unit {uid} depends on unknown unit {a}")
        tag_list = (
            [str(stage), str(step)] + ([str(phase)] if phase else []) + [str(t) for t in tags]
        )
        self.units.append(
            Unit(
                id=uid,
                step=step,
                nodes=tuple(nodes),
                services=tuple(services),
                after=deps,
                stops=_freeze(stops),
                starts=_freeze(starts),
                why=why,
                stage=Stage(stage),
                phase=Phase(phase),
                scope=Scope(scope),
                batch=batch,
                duration_s=float(duration_s),
                tags=tuple(dict.fromkeys(tag_list)),
                idempotent=idempotent,
                work=_freeze(work) if work is not None else None,
                vars=MappingProxyType(dict(vars or {})),
                marks=tuple(marks),
                requires=tuple(requires),
            )
        )
        self._ids.add(uid)
        return uid

    def gate(
        self,
        after: Iterable[str | None],
        why: str,
        stage: Stage,
        phase: Phase = Phase.NONE,
        marks: Iterable[str] = (),
    ) -> str:
        """A no-op barrier: everything after it waits for everything before it."""
        return self.add(
            Step.GATE,
            after=after,
            why=why,
            stage=stage,
            phase=phase,
            scope=Scope.DEPLOYMENT,
            marks=marks,
        )
