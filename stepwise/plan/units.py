"""The plan: a DAG of units. A unit is one step of some services on some nodes, or one
deployment-wide operation. Its JSON form is a contract scripts rely on (extend, don't rename).

The plan's parts (`parts`: the runs of units between level gates, as the operator reads them)
are defined here too: the CLI tree, `plan --json` and the HTML report all name them the same,
and the plan's own JSON carries them, so they belong with the plan rather than above it.
"""

from __future__ import annotations

import io
import json
import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from types import MappingProxyType
from typing import Any, BinaryIO

from stepwise.model.vocab import EXTERNAL_STAGES, Phase, Scope, Stage, Step, Workflow

WORKFLOWS: tuple[Workflow, ...] = tuple(Workflow)


@dataclass(frozen=True, slots=True)
class Unit:
    """One unit of work.

    `stops`: instances (service -> nodes) that stop serving when the unit begins.
    `starts`: instances serving again (new code) when it ends.
    `scope`: "node" (a step on these nodes) or "deployment" (a deployment-wide operation).
    `stage`: the workflow stage it belongs to (update: "run"; upgrade: prepare/run/converge;
    system-upgrade: the seed's step names). `tags` are what `--tags` matches.
    `idempotent`: False for units that must never run twice (data transfer).
    `batch`: the rolling batch the unit belongs to ("Compute#3"), or None.
    """

    id: str
    step: Step
    nodes: tuple[str, ...]
    services: tuple[str, ...]
    after: tuple[str, ...] = ()
    stops: Mapping[str, tuple[str, ...]] = field(default_factory=lambda: MappingProxyType({}))
    starts: Mapping[str, tuple[str, ...]] = field(default_factory=lambda: MappingProxyType({}))
    why: str = ""
    stage: Stage = Stage.RUN
    phase: Phase = Phase.NONE
    scope: Scope = Scope.NODE
    batch: str | None = None
    duration_s: float = 0.0
    tags: tuple[str, ...] = ()
    idempotent: bool = True
    #: node -> services whose tasks of `step` run there (defaults to all `services` on all `nodes`)
    work: Mapping[str, tuple[str, ...]] | None = None
    #: extra variables for the rendered play (e.g. transfer source/target)
    vars: Mapping[str, Any] = field(default_factory=lambda: MappingProxyType({}))
    start_s: float = 0.0
    end_s: float = 0.0
    #: progress milestones recorded when the unit is done (a multi-command procedure such as
    #: the OS upgrade plans what is left from them), and those it needs done before it starts
    marks: tuple[str, ...] = ()
    requires: tuple[str, ...] = ()
    #: the seed's step (1-12) the unit belongs to, in a procedure that has them (the OS
    #: upgrade): what the tree, the report and `plan --json` name its part by
    seed_step: int | None = None

    @property
    def external(self) -> bool:
        """An operation the seed runs with `external-upgrade run` rather than `upgrade run`."""
        return self.step.info.external or self.stage in EXTERNAL_STAGES

    def services_on(self, node: str) -> tuple[str, ...]:
        if self.work is not None:
            return self.work.get(node, ())
        return self.services

    @property
    def is_barrier(self) -> bool:
        """A unit with no work of its own: everything after it waits for everything before."""
        return self.step is Step.GATE

    def to_json(self) -> dict[str, Any]:
        d: dict[str, Any] = {
            "id": self.id,
            "after": list(self.after),
            "step": str(self.step),
            "nodes": list(self.nodes),
            "services": list(self.services),
            "stops": {k: list(v) for k, v in self.stops.items()},
            "starts": {k: list(v) for k, v in self.starts.items()},
            "start_s": round(self.start_s, 3),
            "end_s": round(self.end_s, 3),
            "why": self.why,
            "stage": str(self.stage),
            "phase": str(self.phase),
            "scope": str(self.scope),
            "batch": self.batch,
            "duration_s": round(self.duration_s, 3),
            "tags": list(self.tags),
            "idempotent": self.idempotent,
        }
        if self.work is not None:
            d["work"] = {k: list(v) for k, v in self.work.items()}
        if self.vars:
            d["vars"] = dict(self.vars)
        if self.marks:
            d["marks"] = list(self.marks)
        if self.requires:
            d["requires"] = list(self.requires)
        if self.seed_step is not None:
            d["seed_step"] = self.seed_step
        return d

    @staticmethod
    def from_json(d: Mapping[str, Any]) -> Unit:
        return Unit(
            id=d["id"],
            step=Step(d["step"]),
            nodes=tuple(d.get("nodes", ())),
            services=tuple(d.get("services", ())),
            after=tuple(d.get("after", ())),
            stops=MappingProxyType({k: tuple(v) for k, v in d.get("stops", {}).items()}),
            starts=MappingProxyType({k: tuple(v) for k, v in d.get("starts", {}).items()}),
            why=d.get("why", ""),
            stage=Stage(d.get("stage", Stage.RUN)),
            phase=Phase(d.get("phase", "")),
            scope=Scope(d.get("scope", Scope.NODE)),
            batch=d.get("batch"),
            duration_s=float(d.get("duration_s", 0.0)),
            tags=tuple(d.get("tags", ())),
            idempotent=bool(d.get("idempotent", True)),
            work=MappingProxyType({k: tuple(v) for k, v in d["work"].items()})
            if d.get("work") is not None
            else None,
            vars=MappingProxyType(dict(d.get("vars", {}))),
            start_s=float(d.get("start_s", 0.0)),
            end_s=float(d.get("end_s", 0.0)),
            marks=tuple(d.get("marks", ())),
            requires=tuple(d.get("requires", ())),
            seed_step=_seed_step(d.get("seed_step")),
        )


def _seed_step(value: Any) -> int | None:
    """A stored unit's seed step: a whole number, else none (a stored plan is data)."""
    return value if isinstance(value, int) and not isinstance(value, bool) else None


@dataclass(frozen=True, slots=True)
class Window:
    """A planned downtime window of one service (all its instances down)."""

    service: str
    start_s: float
    end_s: float
    why: str

    def to_json(self) -> dict[str, Any]:
        # an open window (it lasts past this plan: a later command ends it) has no end: null,
        # since JSON has no infinity
        end = None if math.isinf(self.end_s) else round(self.end_s, 3)
        return {
            "service": self.service,
            "start_s": round(self.start_s, 3),
            "end_s": end,
            "why": self.why,
        }


@dataclass(frozen=True, eq=False)
class Plan:
    """A workflow's units in a deterministic topological order, with its estimate."""

    workflow: Workflow
    deployment: str
    units: tuple[Unit, ...]
    duration_s: float = 0.0
    lower_bound_s: float = 0.0
    windows: tuple[Window, ...] = ()
    #: the prestage stage's own lower bound (0: none), part of `lower_bound_s`: the disruptive
    #: part's bound is the rest (`verify/bounds.py`)
    prestage_bound_s: float = 0.0
    #: what the plan was made from: limit, facts source, options (for the record and resume)
    params: Mapping[str, Any] = field(default_factory=lambda: MappingProxyType({}))

    def unit(self, uid: str) -> Unit:
        return self._by_id[uid]

    @property
    def _by_id(self) -> Mapping[str, Unit]:
        cached = getattr(self, "_cache", None)
        if cached is None:
            cached = {u.id: u for u in self.units}
            object.__setattr__(self, "_cache", cached)
        return cached

    def with_units(self, units: Iterable[Unit], **changes: Any) -> Plan:
        return replace(self, units=tuple(units), **changes)

    def to_json(self) -> dict[str, Any]:
        return {
            "workflow": str(self.workflow),
            "deployment": self.deployment,
            "units": [u.to_json() for u in self.units],
            "estimate": self._estimate_json(),
            "windows": [w.to_json() for w in self.windows],
            "params": dict(self.params),
            # the parts the CLI tree and the report show (named the same there)
            "parts": parts_json(self),
        }

    def _estimate_json(self) -> dict[str, float]:
        """The whole plan's estimate and bound; with a prestage stage, the stage's apart
        (`prestage_s`, `prestage_bound_s`: the work before the disruptive part, both part of
        the totals). A plan without one keeps the two keys it always had."""
        out = {
            "duration_s": round(self.duration_s, 3),
            "lower_bound_s": round(self.lower_bound_s, 3),
        }
        if self.prestage_bound_s:
            out["prestage_s"] = round(prestage_seconds(self), 3)
            out["prestage_bound_s"] = round(self.prestage_bound_s, 3)
        return out

    def write_json(self, out: BinaryIO) -> None:
        """Write `to_json()` to a binary stream as UTF-8 JSON indented by 2: the same document
        as `json.dumps(indent=2)` (`json.loads` of both is equal), ~10x faster.

        orjson writes the keys up to the units, the bulk (~30 MB for 10,000 nodes); the stdlib
        writes the small rest (estimate, windows, params) and refuses a non-finite number
        (not JSON). Written in pieces: no copy of the whole document is made."""
        import orjson

        doc = self.to_json()
        keys = list(doc)
        cut = keys.index("units") + 1
        head = orjson.dumps({k: doc[k] for k in keys[:cut]}, option=orjson.OPT_INDENT_2)
        rest = {k: doc[k] for k in keys[cut:]}
        if not rest:
            out.write(head + b"\n")
            return
        # head ends with "\n}"; the rest continues the same object:
        # '{\n  "estimate": ...' without its "{"
        out.write(memoryview(head)[:-2])
        out.write(b",")
        out.write(json.dumps(rest, indent=2, allow_nan=False)[1:].encode())
        out.write(b"\n")

    def to_json_bytes(self) -> bytes:
        """`write_json` into bytes."""
        buf = io.BytesIO()
        self.write_json(buf)
        return buf.getvalue()

    def dumps(self) -> str:
        return json.dumps(self.to_json(), indent=None, separators=(",", ":"), sort_keys=False)

    @staticmethod
    def from_json(d: Mapping[str, Any], source: str = "the recorded plan") -> Plan:
        """A plan from its JSON (as a run recorded it): validated first (`plan/stored.py`),
        since a stored plan is input like a file."""
        from stepwise.plan.stored import check_plan_doc

        d = check_plan_doc(d, source)
        est = d.get("estimate", {})
        return Plan(
            workflow=Workflow(d["workflow"]),
            deployment=d.get("deployment", ""),
            units=tuple(Unit.from_json(u) for u in d["units"]),
            duration_s=float(est.get("duration_s", 0.0)),
            lower_bound_s=float(est.get("lower_bound_s", 0.0)),
            prestage_bound_s=float(est.get("prestage_bound_s", 0.0)),
            windows=tuple(
                Window(
                    w["service"],
                    w["start_s"],
                    math.inf if w["end_s"] is None else w["end_s"],
                    w.get("why", ""),
                )
                for w in d.get("windows", [])
            ),
            params=MappingProxyType(dict(d.get("params", {}))),
        )


def prestage_seconds(plan: Plan) -> float:
    """How long the plan's prestage stage takes by its estimate (0 without one): the rest of
    the plan, the disruptive part, starts when it ends."""
    return max((u.end_s for u in plan.units if u.stage is Stage.PRESTAGE), default=0.0)


# The parts of a plan. A part is a run of units between level gates. It is named by its
# stage; a procedure whose units carry the seed's step they belong to (`Unit.seed_step`: the
# OS upgrade) names its parts by the steps they cover instead, since the units of one of its
# parts alternate between the seed's tags (`system_upgrade_prepare`, `system_upgrade_run`,
# `upgrade`) node by node: "steps 1-8" holds the first node of each sensitive role (steps 1-7)
# and then the others one by one (step 8), and its heading says so.


@dataclass(frozen=True)
class Part:
    """Units between two level gates: `name` (the stage, or the seed steps), `heading` (why
    the gate that closes it waits, else why its first unit runs) and the units."""

    name: str
    heading: str
    units: tuple[Unit, ...]


def _span(steps: set[int]) -> str:
    lo, hi = min(steps), max(steps)
    return f"step {lo}" if lo == hi else f"steps {lo}-{hi}"


def _part(units: list[Unit], closing: Unit | None) -> Part:
    """The part of `units`, closed by the level gate `closing` (None: the plan's last part):
    named by its stage, or by the seed steps of its units and its gate; its heading is the
    gate's reason (else its first unit's), after the steps of the units before the gate's
    step when there are any ("steps 1-7, then step 8: the other nodes ...")."""
    heading = closing.why if closing is not None else units[0].why
    steps = {u.seed_step for u in units if u.seed_step is not None}
    if closing is not None and closing.seed_step is not None:
        earlier = {n for n in steps if n < closing.seed_step}
        if earlier:
            heading = f"{_span(earlier)}, then {heading}"
        steps.add(closing.seed_step)
    name = _span(steps) if steps else str(units[0].stage)
    return Part(name, heading, tuple(units))


def parts(plan: Plan) -> list[Part]:
    """The plan's parts in order; the level gates themselves belong to none (they run nothing)."""
    out: list[Part] = []
    cur: list[Unit] = []
    for u in plan.units:
        if u.step is Step.GATE:
            if cur:
                out.append(_part(cur, u))
            cur = []
        else:
            cur.append(u)
    if cur:
        out.append(_part(cur, None))
    return out


def unit_count(plan: Plan) -> str:
    """How many units the plan has, said the same everywhere: the units that run, and the
    level gates (they run nothing) apart."""
    gates = sum(1 for u in plan.units if u.step is Step.GATE)
    work = len(plan.units) - gates
    return f"{work} unit{'s' if work != 1 else ''}" + (
        f" (+{gates} level gate{'s' if gates != 1 else ''})" if gates else ""
    )


def parts_json(plan: Plan) -> list[dict[str, object]]:
    """The parts for `plan --json`: name, heading and unit ids."""
    return [
        {"name": p.name, "heading": p.heading, "units": [u.id for u in p.units]}
        for p in parts(plan)
    ]
