"""The report's view of one stored run: actual bars beside the planned ones on the run's own
clock, availability as it ran, probe samples, failures and the run's summary. Built from the
same pieces as the plan's view (`model`)."""

from __future__ import annotations

import shlex
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from stepwise.model.deployment import Deployment
from stepwise.model.vocab import RunState, Step, UnitState
from stepwise.observe.report.batches import batch_groups, delta_text
from stepwise.observe.report.model import (
    SEVERITY,
    Bar,
    Section,
    Series,
    _aggregate,
    _availability,
    _batches,
    _boundaries,
    _fmt_s,
    _group_key,
    _lanes_of,
    _stopped_services,
    _unit_lanes,
    planned_bars,
)
from stepwise.plan.units import Plan, Unit
from stepwise.run.store.base import epoch

#: (lane, bar key, start, end, kind, unit): one unit's share of a bar, before aggregation
BarItem = tuple[str, str, float, float, str, Unit]
#: (t, +1 start / -1 stop, service, nodes)
Event = tuple[float, int, str, tuple[str, ...]]
#: (t, requests, failed, max latency ms)
ProbePoint = tuple[float, int, int, float]


@dataclass(frozen=True)
class RunClock:
    """The run's time axis: its start (epoch) and how long it ran; the axis drawn is the longer
    of the run and its plan's estimate, both on the same clock (never rescaled: a bar's length
    is minutes)."""

    t0: float
    actual_s: float
    axis: float


def _actual_kind(row: Any, planned_s: float) -> str:
    if row.state is UnitState.DONE:
        took = (
            (row.ended_at - row.started_at).total_seconds()
            if row.started_at and row.ended_at
            else 0.0
        )
        if took > max(1.5 * planned_s, planned_s + 10.0):
            return "late"
        return "resumed" if (row.attempts or 0) > 1 else UnitState.DONE
    return row.state if row.state in SEVERITY else UnitState.PENDING


def _mask(command: str) -> str:
    """The command as stored (secrets were masked when it was recorded), masked once more in
    case it came from an older stepwise."""
    from stepwise.secrets import mask_argv

    try:
        argv = shlex.split(command)
    except ValueError:
        return command
    masked = mask_argv(argv)
    return command if masked == argv else " ".join(shlex.quote(a) for a in masked)


def _run_clock(plan: Plan, run: Any, units: Sequence[Any]) -> RunClock:
    """The run's clock: planned bars keep their estimated times on it."""
    t0 = epoch(run.started_at)
    # the run's end, or its last unit's if later (a run still going, or one read mid-write)
    ends = [epoch(u.ended_at or u.started_at) for u in units if u.started_at]
    actual_s = max(
        max(ends, default=t0) - t0, (epoch(run.ended_at) - t0) if run.ended_at else 0.0, 1.0
    )
    return RunClock(t0, actual_s, max(actual_s, plan.duration_s, 1.0))


def _ends(rows: Mapping[str, Any], starts: Mapping[str, float], t0: float) -> dict[str, float]:
    """When each unit that is done ended, on the run's clock."""
    return {
        u: epoch(r.ended_at) - t0
        for u, r in rows.items()
        if r.state is UnitState.DONE and r.ended_at and u in starts
    }


def _batch_spans(plan: Plan, starts: Mapping[str, float], ends: Mapping[str, float]):
    """batch -> (start, end) as it ran, for the batches whose units all ran."""
    out: dict[str, tuple[float, float]] = {}
    for key, group in batch_groups(plan).items():
        if all(u.id in ends for u in group):
            out[key] = (min(starts[u.id] for u in group), max(ends[u.id] for u in group))
    return out


def _with_deltas(bars: list[Bar], plan: Plan, spans: Mapping[str, tuple[float, float]]) -> None:
    """Each actual bar of a batch says how late or early its batch ended against the plan."""
    planned_end = {k: max(u.end_s for u in g) for k, g in batch_groups(plan).items()}
    for b in bars:
        key = b.key
        if key in spans and key in planned_end:
            d = spans[key][1] - planned_end[key]
            b.short = delta_text(d)
            b.detail = f"{delta_text(d)} against the plan" + (f"; {b.detail}" if b.detail else "")


def _unit_actuals(
    plan: Plan, dep: Deployment, per_node: bool, rows: Mapping[str, Any], clock: RunClock
) -> tuple[list[BarItem], list[Event], dict[str, float]]:
    """Each started unit as it ran: its bar items, the stops and starts of services it made
    (a unit that did not finish never started its services again), and when it started."""
    items: list[BarItem] = []
    events: list[Event] = []
    starts: dict[str, float] = {}
    for u in plan.units:
        r = rows.get(u.id)
        if r is None or r.started_at is None:
            continue
        a = epoch(r.started_at) - clock.t0
        b = (epoch(r.ended_at) - clock.t0) if r.ended_at else clock.actual_s
        starts[u.id] = a
        events += [(a, -1, s, tuple(n)) for s, n in u.stops.items()]
        if r.state is UnitState.DONE:
            events += [(b, +1, s, tuple(n)) for s, n in u.starts.items()]
        if u.step is Step.GATE:
            continue
        kind = _actual_kind(r, u.duration_s)
        items += [
            (lane, _group_key(u, per_node), a, b, kind, u) for lane in _unit_lanes(u, dep, per_node)
        ]
    return items, events, starts


def _skipped_items(
    plan: Plan, dep: Deployment, per_node: bool, rows: Mapping[str, Any]
) -> list[BarItem]:
    """Skipped units never started: shown at their planned place."""
    items: list[BarItem] = []
    for u in plan.units:
        r = rows.get(u.id)
        if r is not None and r.state is UnitState.SKIPPED and u.step is not Step.GATE:
            items += [
                (
                    lane,
                    _group_key(u, per_node),
                    u.start_s,
                    u.end_s,
                    UnitState.SKIPPED,
                    u,
                )
                for lane in _unit_lanes(u, dep, per_node)
            ]
    return items


def _probe_by_target(
    samples: Sequence[Mapping[str, Any]], t0: float
) -> dict[str, list[ProbePoint]]:
    by_target: dict[str, list[ProbePoint]] = {}
    for s in samples:
        by_target.setdefault(s["target"], []).append(
            (
                float(s["t"]) - t0,
                int(s["requests"]),
                int(s["failed"]),
                float(s.get("max_ms") or 0.0),
            )
        )
    return by_target


def _attach_windows_and_probes(
    series: list[Series],
    windows: Sequence[tuple[str, float, float, str]],
    by_target: dict[str, list[ProbePoint]],
) -> None:
    """Give each service's series its windows and probe points; probed targets the plan never
    stopped get a series of their own."""
    for s in series:
        s.windows = [(a, b, why) for svc, a, b, why in windows if svc == s.service]
        s.probe = sorted(by_target.pop(f"vip:{s.service}", []))
    for target, pts in sorted(by_target.items()):
        series.append(
            Series(target, 0, None, "probe only: not stopped by this plan", [], [], sorted(pts))
        )


def _probe_targets(samples: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """One row per probed target: requests, failed, the slowest answer."""
    probe_targets = []
    for target in sorted({s["target"] for s in samples}):
        ts = [s for s in samples if s["target"] == target]
        probe_targets.append(
            {
                "target": target,
                "requests": sum(int(s["requests"]) for s in ts),
                "failed": sum(int(s["failed"]) for s in ts),
                "max_ms": round(max(float(s.get("max_ms") or 0) for s in ts), 1),
            }
        )
    return probe_targets


def _failed_outside_windows(
    samples: Sequence[Mapping[str, Any]], spans: Mapping[str, list[tuple[float, float]]], t0: float
) -> int:
    # failed API requests outside the windows the plan announced (give or take the probe's
    # period and detection, as observe.windows counts them)
    return sum(
        int(x["failed"])
        for x in samples
        if int(x["failed"])
        and str(x["target"]).startswith("vip:")
        and not any(
            a - 3.0 <= float(x["t"]) - t0 <= b + 4.0 for a, b in spans.get(str(x["target"])[4:], [])
        )
    )


def _run_summary(
    plan: Plan, run: Any, units: Sequence[Any], actual_s: float
) -> list[tuple[str, str]]:
    counts: dict[str, int] = {}
    for r in units:
        counts[r.state] = counts.get(r.state, 0) + 1
    return [
        ("run", str(run.id)),
        ("workflow", run.workflow),
        ("status", run.status + (f": {run.message}" if run.message else "")),
        ("who", f"{run.user or '?'} on {run.host or '?'}"),
        ("command", _mask(run.command or "")),
        ("started", run.started_at.isoformat(timespec="seconds") + "Z"),
        (
            "duration",
            f"{_fmt_s(actual_s)} (estimate {_fmt_s(plan.duration_s)}, "
            f"lower bound {_fmt_s(plan.lower_bound_s)})",
        ),
        ("units", ", ".join(f"{v} {k}" for k, v in sorted(counts.items())) + f" of {len(units)}"),
        ("attempts", str(run.attempts)),
    ]


def _probe_summary(probe_targets: Sequence[Mapping[str, Any]], outside: int) -> tuple[str, str]:
    return (
        "probe",
        f"{sum(p['requests'] for p in probe_targets)} requests, "
        f"{sum(p['failed'] for p in probe_targets)} failed, {outside} failed API "
        "requests outside the announced windows",
    )


def run_section(
    plan: Plan,
    dep: Deployment,
    run: Any,
    units: Sequence[Any],
    failures: Sequence[Mapping[str, Any]],
    samples: Sequence[Mapping[str, Any]] = (),
    window_spans: Mapping[str, list[tuple[float, float]]] | None = None,
) -> Section:
    """The view of one stored run: actual bars beside the planned ones on one clock (the
    plan's estimate as it is: in the lab the run is much shorter), with each batch's delta."""
    clock = _run_clock(plan, run, units)
    t0, axis = clock.t0, clock.axis
    per_node, lanes = _lanes_of(plan, dep)
    rows = {r.unit_id: r for r in units}
    planned = planned_bars(plan, dep, per_node)
    items, events, starts = _unit_actuals(plan, dep, per_node, rows, clock)
    items += _skipped_items(plan, dep, per_node, rows)
    spans_of_batches = _batch_spans(plan, starts, _ends(rows, starts, t0))
    actual = _aggregate(items)
    _with_deltas(actual, plan, spans_of_batches)
    events.sort(key=lambda e: (e[0], -e[1]))
    series = _availability(dep, events, axis, _stopped_services(plan))
    spans = {svc: [(a - t0, b - t0) for a, b in v] for svc, v in (window_spans or {}).items()}
    windows = [
        (svc, a, min(b, axis), "planned window, as it ran")
        for svc, v in spans.items()
        for a, b in v
    ]
    _attach_windows_and_probes(series, windows, _probe_by_target(samples, t0))
    probe_targets = _probe_targets(samples)
    summary = _run_summary(plan, run, units, clock.actual_s)
    if samples:
        summary.append(_probe_summary(probe_targets, _failed_outside_windows(samples, spans, t0)))
    cont = "" if run.status is RunState.DONE else _mask(run.command or "").replace(" --fresh", "")
    return Section(
        f"run {run.id}: {run.workflow} ({run.status})",
        "run",
        axis,
        lanes,
        planned,
        actual,
        _boundaries(plan, starts),
        windows,
        series,
        summary,
        failures=[
            {k: str(f.get(k) or "") for k in ("host", "unit", "task", "status", "message")}
            for f in failures
        ][:200],
        batches=_batches(plan, dep, t0, spans_of_batches),
        probe_targets=probe_targets,
        continue_command=cont,
        t0=t0,
    )


def run_section_from_store(store: Any, run_id: int, dep: Deployment) -> Section:
    """Read one run (its plan, units, failures, probe samples) from the store and build its view."""
    from stepwise.observe.windows import window_intervals

    run = store.run(run_id)
    if not run.plan or "workflow" not in run.plan:
        from stepwise.errors import InputError, Problem

        raise InputError(Problem(f"run {run_id} has no recorded plan to draw", field="--run"))
    plan = Plan.from_json(run.plan)
    failures = [
        {
            "unit": t.unit_id,
            "host": t.host,
            "task": t.task,
            "status": t.status,
            "message": t.message,
        }
        for t in store.task_results(run_id)
        if t.status.failed
    ]
    return run_section(
        plan,
        dep,
        run,
        store.units(run_id),
        failures,
        store.probe_samples(run_id),
        window_intervals(plan, store, run_id),
    )
