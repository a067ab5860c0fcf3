"""Accumulates units in creation order (which is a topological order) with stable ids."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from types import MappingProxyType
from typing import Any, TypedDict, TypeVar, Unpack

from stepwise.model.vocab import Phase, Scope, Stage, Step
from stepwise.plan.units import Unit

_E = TypeVar("_E", Step, Stage, Phase, Scope)


def _as(kind: type[_E], value: Any) -> _E:
    """`value` as a member of `kind` (an enum's call costs ~3 us even for a member, and a
    10,000-node plan adds its units by the thousand, four enums each)."""
    return value if type(value) is kind else kind(value)


def _freeze(m: Mapping[str, Iterable[str]] | None) -> Mapping[str, tuple[str, ...]]:
    if not m:
        return MappingProxyType({})
    return MappingProxyType({k: tuple(v) for k, v in m.items()})


class UnitOptions(TypedDict, total=False):
    """What a unit may say besides its step, why and stage (all optional): where it works
    (nodes, services, work per node), what it waits for (after, requires), what it takes
    down and brings back (stops, starts), how it is scheduled and shown (phase, scope, batch,
    duration_s, tags, marks) and what its tasks read (idempotent, vars)."""

    nodes: Iterable[str]
    services: Iterable[str]
    after: Iterable[str | None]
    stops: Mapping[str, Iterable[str]] | None
    starts: Mapping[str, Iterable[str]] | None
    phase: Phase
    scope: Scope
    batch: str | None
    duration_s: float
    tags: Iterable[str]
    idempotent: bool | None
    work: Mapping[str, Iterable[str]] | None
    vars: Mapping[str, Any] | None
    marks: Iterable[str]
    requires: Iterable[str]


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

    def add(self, step: Step, *, why: str, stage: Stage, **opts: Unpack[UnitOptions]) -> str:
        """Add a unit of `step` (see UnitOptions for the rest) and return its id."""
        uid = f"u{len(self.units) + 1}"
        step = _as(Step, step)
        idempotent = opts.get("idempotent")
        if idempotent is None:
            idempotent = not step.info.once_only
        deps = tuple(dict.fromkeys(a for a in opts.get("after", ()) if a))
        for a in deps:
            if a not in self._ids:  # pragma: no cover - planner bug guard
                raise ValueError(f"unit {uid} depends on unknown unit {a}")
        phase = opts.get("phase", Phase.NONE)
        tags = opts.get("tags", ())
        tag_list = (
            [str(stage), str(step)] + ([str(phase)] if phase else []) + [str(t) for t in tags]
        )
        work = opts.get("work")
        self.units.append(
            Unit(
                id=uid,
                step=step,
                nodes=tuple(opts.get("nodes", ())),
                services=tuple(opts.get("services", ())),
                after=deps,
                stops=_freeze(opts.get("stops")),
                starts=_freeze(opts.get("starts")),
                why=why,
                stage=_as(Stage, stage),
                phase=_as(Phase, phase),
                scope=_as(Scope, opts.get("scope", Scope.NODE)),
                batch=opts.get("batch"),
                duration_s=float(opts.get("duration_s", 0.0)),
                tags=tuple(dict.fromkeys(tag_list)),
                idempotent=idempotent,
                work=_freeze(work) if work is not None else None,
                vars=MappingProxyType(dict(opts.get("vars") or {})),
                marks=tuple(opts.get("marks", ())),
                requires=tuple(opts.get("requires", ())),
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
