"""The report's view model: lanes and bars of the timeline, per-service availability series,
summaries and tables, built from a Plan (and, for a run, its stored units, failures and probe
samples). Plain data: the renderer never sees a Plan or a database row.

Size is bounded by aggregation, not by the cloud: below `NODE_LANES_MAX` nodes every node has
its lane; above, a lane is a role and a bar is a batch (or one step of a stage) of that role,
and availability series are cut into at most `BUCKETS` points. The view of a run that ran is
built in `run_view` from these same pieces."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence, Set
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from stepwise.model.catalog import allowance, effective_rule
from stepwise.model.deployment import Deployment
from stepwise.model.step_kinds import KIND_ORDER, StepKind
from stepwise.model.vocab import Scope, Step, UnitState
from stepwise.observe.report.batches import (
    batch_command,
    batch_groups,
    batch_nodes,
    batch_roles,
    critical_path,
    delta_text,
    plain,
    unit_kind,
)
from stepwise.plan.units import Plan, Unit, parts, prestage_seconds, unit_count
from stepwise.run.store.base import epoch

NODE_LANES_MAX = 60
BUCKETS = 600
DEPLOYMENT_LANE = "(deployment-wide)"
#: how bad an actual state is, when a bar stands for several units: the worst one shows
SEVERITY: dict[str, int] = {
    UnitState.DONE: 0,
    "resumed": 1,
    "late": 2,
    UnitState.SKIPPED: 3,
    UnitState.PENDING: 4,
    UnitState.RUNNING: 5,
    UnitState.INTERRUPTED: 6,
    UnitState.FAILED: 7,
}


@dataclass
class Bar:
    """A batch (or a unit outside batches) on one lane: planned, coloured by the kind of its
    work (`segments`: each step's span and kind), or as it ran, coloured by its state."""

    lane: str
    start: float
    end: float
    kind: str  # planned: a StepKind; actual: a state (done | late | resumed | ... | failed)
    label: str
    detail: str = ""
    units: int = 1
    segments: list[tuple[float, float, str]] = field(default_factory=list)
    nodes: tuple[str, ...] = ()
    critical: bool = False
    #: the text drawn on the bar when it is wide enough (its batch, or its step)
    short: str = ""
    #: the batch (or unit, or stage:step) the bar stands for
    key: str = ""


@dataclass
class Series:
    """Instances of one service serving over time, against its rule."""

    service: str
    total: int
    min_serving: int | None
    rule: str
    points: list[tuple[float, int]]
    windows: list[tuple[float, float, str]] = field(default_factory=list)
    #: probe: (t, requests, failed, max latency ms) per second, relative to the section's start
    probe: list[tuple[float, int, int, float]] = field(default_factory=list)


@dataclass
class Section:
    """One plan, or one run: its own time axis, timeline, availability and summary."""

    title: str
    kind: str  # plan | run
    axis_s: float
    lanes: list[tuple[str, str]]  # (lane, group: its role)
    planned: list[Bar]
    actual: list[Bar]
    boundaries: list[tuple[float, str, bool]]
    windows: list[tuple[str, float, float, str]]
    series: list[Series]
    summary: list[tuple[str, str]]
    failures: list[dict[str, str]] = field(default_factory=list)
    batches: list[dict[str, str]] = field(default_factory=list)
    probe_targets: list[dict[str, Any]] = field(default_factory=list)
    continue_command: str = ""
    #: the wall-clock time (epoch, UTC) of the axis' 0, when known (a run, or `--start`)
    t0: float | None = None

    @property
    def is_run(self) -> bool:
        return self.kind != "plan"


@dataclass
class Report:
    title: str
    sections: list[Section]
    generated_at: str = ""


def _fmt_s(s: float) -> str:
    s = max(0.0, s)
    if s >= 3600:
        return f"{int(s // 3600)}h{int(s % 3600 // 60):02d}m"
    if s >= 60:
        return f"{int(s // 60)}m" if int(s) % 60 == 0 else f"{int(s // 60)}m{int(s % 60):02d}s"
    return f"{s:.0f}s" if s >= 10 else f"{s:.1f}s"


def _lanes_of(plan: Plan, dep: Deployment) -> tuple[bool, list[tuple[str, str]]]:
    """Per-node lanes for a small cloud, per-role lanes for a big one (deployment order)."""
    touched = {n for u in plan.units for n in u.nodes}
    per_node = len(touched) <= NODE_LANES_MAX
    lanes: list[tuple[str, str]] = []
    if any(
        not u.nodes or u.scope is Scope.DEPLOYMENT for u in plan.units if u.step is not Step.GATE
    ):
        lanes.append((DEPLOYMENT_LANE, ""))
    for r in dep.roles:
        names = [n.name for n in r.nodes if n.name in touched]
        if not names:
            continue
        lanes.extend(((n, r.name) for n in names) if per_node else [(r.name, r.name)])
    return per_node, lanes


def _unit_lanes(u: Unit, dep: Deployment, per_node: bool) -> list[str]:
    if not u.nodes or u.scope is Scope.DEPLOYMENT:
        return [DEPLOYMENT_LANE]
    if per_node:
        return list(u.nodes)
    seen: dict[str, None] = {}
    for n in u.nodes:
        seen[dep.role_of(n).name if n in dep.node_by_name else DEPLOYMENT_LANE] = None
    return list(seen)


def _group_key(u: Unit, per_node: bool) -> str:
    # a bar is a batch; units outside batches are their own bar per node, or one bar per
    # stage and step per role lane (a thousand identical prepare units are one bar)
    if u.batch:
        return u.batch
    return u.id if per_node else f"{u.stage}:{u.step}"


def _rank(kind: str) -> int:
    """How much a kind must be noticed: a state's severity, or a kind of work's place."""
    if kind in SEVERITY:
        return SEVERITY[kind]
    return len(KIND_ORDER) - KIND_ORDER.index(StepKind(kind))


def _segments(spans: list[tuple[float, float, str]]) -> list[tuple[float, float, str]]:
    """Each step's span and kind in time order, runs of one kind merged."""
    out: list[tuple[float, float, str]] = []
    for a, b, k in sorted(spans):
        if out and out[-1][2] == k and a <= out[-1][1] + 1e-9:
            out[-1] = (out[-1][0], max(out[-1][1], b), k)
        else:
            out.append((a, b, k))
    return out


def _aggregate(
    items: Iterable[tuple[str, str, float, float, str, Unit]], critical: Set[str] = frozenset()
) -> list[Bar]:
    """(lane, key, start, end, kind, unit) -> one bar per (lane, key): its span, its worst kind,
    its steps' segments, its nodes; on the critical path when one of its units is."""
    acc: dict[tuple[str, str], dict[str, Any]] = {}
    for lane, key, a, b, kind, u in items:
        cur = acc.setdefault(
            (lane, key),
            {
                "a": a,
                "b": b,
                "kind": kind,
                "steps": {},
                "n": 0,
                "why": u.why,
                "spans": [],
                "batch": u.batch,
            },
        )
        cur["a"], cur["b"] = min(cur["a"], a), max(cur["b"], b)
        if _rank(kind) > _rank(cur["kind"]):
            cur["kind"] = kind
        cur["steps"][str(u.step)] = None
        cur["n"] += 1
        cur["spans"].append((a, b, kind))
        cur.setdefault("nodes", {}).update(dict.fromkeys(u.nodes))
        cur["critical"] = cur.get("critical", False) or u.id in critical
    out = []
    for (lane, key), c in acc.items():
        steps, n = list(c["steps"]), c["n"]
        label = (
            f"{key}: {', '.join(steps[:6])}{' ...' if len(steps) > 6 else ''} "
            f"({n} unit{'s' * (n > 1)})"
        )
        out.append(
            Bar(
                lane,
                c["a"],
                c["b"],
                c["kind"],
                label,
                c["why"],
                n,
                _segments(c["spans"]) if c["kind"] not in SEVERITY else [],
                tuple(c["nodes"]),
                c["critical"],
                c["batch"] or ", ".join(steps[:2]),
                key,
            )
        )
    return out


def _availability(
    dep: Deployment,
    events: Sequence[tuple[float, int, str, tuple[str, ...]]],
    axis_s: float,
    services: Sequence[str],
) -> list[Series]:
    """Step functions of serving instances from (t, +1 start / -1 stop, service, nodes) events,
    cut into BUCKETS points keeping each bucket's lowest value (a dip is never averaged away)."""
    out = []
    for svc in services:
        total = len(dep.instances.get(svc, ()))
        if not total:
            continue
        rule = effective_rule(dep.catalog[svc], total) if svc in dep.catalog else None
        allowed = allowance(dep.catalog[svc], total) if svc in dep.catalog else None
        down: set[str] = set()
        raw: list[tuple[float, int]] = [(0.0, total)]
        for t, sign, s, nodes in events:
            if s != svc:
                continue
            if sign < 0:
                down.update(nodes)
            else:
                down.difference_update(nodes)
            raw.append((t, total - len(down)))
        width = max(axis_s, 1e-9) / BUCKETS
        buckets: dict[int, list[int]] = {}  # bucket -> [lowest, last]
        for t, v in raw:
            i = min(BUCKETS - 1, max(0, int(t / width)))
            b = buckets.setdefault(i, [v, v])
            b[0], b[1] = min(b[0], v), v
        pts: list[tuple[float, int]] = []
        for i, (low, last) in sorted(buckets.items()):
            pts.append((i * width, low))
            if last != low:
                pts.append(((i + 1) * width, last))
        out.append(
            Series(
                svc,
                total,
                None if allowed is None else total - allowed,
                rule.describe() if rule else "no rule",
                pts,
            )
        )
    return out


def _plan_events(plan: Plan) -> list[tuple[float, int, str, tuple[str, ...]]]:
    ev = []
    for u in plan.units:
        ev += [(u.start_s, -1, s, tuple(n)) for s, n in u.stops.items()]
        ev += [(u.end_s, +1, s, tuple(n)) for s, n in u.starts.items()]
    # at the same moment an instance starting serves before another stops (as the verifier
    # replays it): no false dip
    ev.sort(key=lambda e: (e[0], -e[1]))
    return ev


def _stopped_services(plan: Plan) -> list[str]:
    seen: dict[str, None] = {}
    for u in plan.units:
        for s in u.stops:
            seen[s] = None
    return list(seen)


def _boundaries(plan: Plan, at: Mapping[str, float] | None = None) -> list[tuple[float, str, bool]]:
    """Where each part of the plan begins (named as the CLI tree names it: a stage, or the OS
    upgrade's seed steps) and where a level gate lets the next level start: (time, label, is
    the start of a part)."""
    out: list[tuple[float, str, bool]] = []
    name = None
    for part in parts(plan):
        t = at.get(part.units[0].id) if at is not None else part.units[0].start_s
        if t is not None and part.name != name:
            out.append((t, part.name, True))
            name = part.name
    for u in plan.units:
        t = at.get(u.id) if at is not None else u.start_s
        if u.step is Step.GATE and t is not None:
            out.append((t, u.why or u.id, False))
    return sorted(out)


def when(t: float, t0: float | None) -> str:
    """A time of the axis: from the start (`1h05m`), and its wall-clock time (UTC) when the
    start is known."""
    if t0 is None:
        return _fmt_s(t)
    return f"{_fmt_s(t)} ({datetime.fromtimestamp(t0 + t, UTC).strftime('%H:%M')})"


def _batches(
    plan: Plan,
    dep: Deployment,
    t0: float | None = None,
    actual: Mapping[str, tuple[float, float]] | None = None,
) -> list[dict[str, str]]:
    """One row per batch (or per unit outside batches, deployment-wide ones included): its
    nodes, steps, planned span, the command that runs it alone and, for a run, when it ended
    and how late or early (`actual`: batch -> (start, end) on the run's clock)."""
    rows = []
    for key, units in batch_groups(plan).items():
        nodes = batch_nodes(units)
        start, end = min(u.start_s for u in units), max(u.end_s for u in units)
        row = {
            "batch": key,
            "roles": ", ".join(batch_roles(units, dep)),
            "nodes": ", ".join(nodes),
            "steps": ", ".join(dict.fromkeys(str(u.step) for u in units)),
            "start": when(start, t0),
            "end": when(end, t0),
        }
        if actual is not None:
            ran = actual.get(key)
            row["ended"] = when(ran[1], t0) if ran else "not run"
            row["delta"] = delta_text(ran[1] - end) if ran else ""
        row["command"] = batch_command(plan, units, nodes, dep.path)
        row["why"] = " / ".join(list(dict.fromkeys(u.why for u in units if u.why))[:3])
        rows.append(row)
    return rows


def _plan_summary(plan: Plan, dep: Deployment) -> list[tuple[str, str]]:
    nodes = {n for u in plan.units for n in u.nodes}
    params = {k: v for k, v in plan.params.items() if v not in (None, [], "", {}, False)}
    return [
        ("workflow", str(plan.workflow)),
        ("deployment", plan.deployment or dep.name),
        ("selection", plain(params) or "all"),
        ("units", unit_count(plan)),
        ("nodes", str(len(nodes))),
        *_estimate_rows(plan),
        (
            "planned downtime windows",
            "none"
            if not plan.windows
            else "; ".join(
                f"{w.service} "
                f"{_fmt_s(w.end_s - w.start_s) if w.end_s != float('inf') else 'open at the end'}"
                for w in plan.windows
            ),
        ),
    ]


def _estimate_rows(plan: Plan) -> list[tuple[str, str]]:
    """The estimate and its bound; with a prestage, the disruptive part's without it and the
    prestage apart, as the work before it (nothing stops then)."""
    fetch = prestage_seconds(plan)
    if not fetch:
        return [("estimate", _fmt_s(plan.duration_s)), ("lower bound", _fmt_s(plan.lower_bound_s))]
    bound = plan.prestage_bound_s
    return [
        ("estimate", f"{_fmt_s(plan.duration_s - fetch)} (the disruptive part)"),
        ("lower bound", _fmt_s(plan.lower_bound_s - bound)),
        (
            "prestage",
            f"{_fmt_s(fetch)} before it (nothing stops)"
            + (f", lower bound {_fmt_s(bound)}" if bound else ""),
        ),
    ]


def plan_section(
    plan: Plan, dep: Deployment, title: str | None = None, start: datetime | None = None
) -> Section:
    """The view of a plan that has not run: planned bars coloured by kind of work, the critical
    path, planned availability, the why of batches; wall-clock times from `start` if given."""
    per_node, lanes = _lanes_of(plan, dep)
    axis = max(plan.duration_s, max((u.end_s for u in plan.units), default=0.0), 1.0)
    planned = planned_bars(plan, dep, per_node)
    windows = [(w.service, w.start_s, min(w.end_s, axis), w.why) for w in plan.windows]
    series = _availability(dep, _plan_events(plan), axis, _stopped_services(plan))
    for s in series:
        s.windows = [(a, b, why) for svc, a, b, why in windows if svc == s.service]
    t0 = None if start is None else epoch(start.astimezone(UTC))
    summary = _plan_summary(plan, dep)
    if start is not None:
        summary.insert(5, ("starts", f"{start.astimezone(UTC):%Y-%m-%d %H:%M} UTC"))
        summary.insert(6, ("ends", f"{datetime.fromtimestamp(t0 + axis, UTC):%Y-%m-%d %H:%M} UTC"))
    return Section(
        title or f"plan: {plan.workflow} of {plan.deployment or dep.name}",
        "plan",
        axis,
        lanes,
        planned,
        [],
        _boundaries(plan),
        windows,
        series,
        summary,
        batches=_batches(plan, dep, t0),
        t0=t0,
    )


def planned_bars(plan: Plan, dep: Deployment, per_node: bool) -> list[Bar]:
    """The plan's bars at their estimated times, coloured by kind, the critical path marked."""
    return _aggregate(
        (
            (lane, _group_key(u, per_node), u.start_s, u.end_s, unit_kind(u), u)
            for u in plan.units
            if u.step is not Step.GATE
            for lane in _unit_lanes(u, dep, per_node)
        ),
        critical_path(plan),
    )
