"""The verifier's replay: shared preparation and skipped units change no finding."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from stepwise.model import load_deployment
from stepwise.model.vocab import Step
from stepwise.plan import make_plan
from stepwise.plan.units import Unit
from stepwise.verify.invariants import check, prepare
from stepwise.verify.replay import events, perturbed_times

ROOT = Path(__file__).resolve().parents[2]


def _schedules(plan):
    """The estimate, perturbed ones and broken ones (everything at once, reversed)."""
    end = max((u.end_s for u in plan.units), default=0.0)
    yield None
    yield perturbed_times(plan.units, 0)
    yield {u.id: (0.0, u.duration_s) for u in plan.units}
    yield {u.id: (end - u.end_s, end - u.start_s) for u in plan.units}


@pytest.mark.parametrize("workflow", ["update", "upgrade"])
@pytest.mark.parametrize("example", ["classic", "composed", "hci"])
def test_a_prepared_replay_finds_what_a_fresh_one_finds(example: str, workflow: str):
    dep = load_deployment(ROOT / "examples" / f"{example}.yaml")
    plan = make_plan(workflow, dep)
    prepared = prepare(plan, dep)
    found_any = False
    for times in _schedules(plan):
        fresh = check(plan, dep, times)
        assert check(plan, dep, times, prepared=prepared) == fresh
        found_any |= bool(fresh[0])
    assert (
        found_any
    )  # the broken schedules are refused: the comparison covers findings, not only silence


def test_units_out_of_order_are_reported_before_any_replay():
    dep = load_deployment(ROOT / "examples" / "classic.yaml")
    plan = make_plan("update", dep)
    units = list(plan.units)
    units[1], units[-1] = units[-1], units[1]
    problems, windows = check(plan.with_units(units), dep)
    assert windows == [] and any("not an earlier unit" in p for p in problems)


def test_leaving_units_out_keeps_the_order_of_the_other_events():
    rng = random.Random(7)
    for _ in range(200):
        units = [Unit(f"u{i}", Step.STOP, (), ()) for i in range(12)]
        # coarse times so that ties (equal starts, ends at a start, zero lengths) are common
        times = {}
        for u in units:
            start = float(rng.randint(0, 6))
            times[u.id] = (start, start + rng.choice((0.0, 1.0, 2.0, 3.0)))
        full = [(e.kind, e.unit.id) for e in events(units, times)]
        kept = [u for u in units if rng.random() < 0.5]
        ids = {u.id for u in kept}
        assert [(e.kind, e.unit.id) for e in events(kept, times)] == [
            x for x in full if x[1] in ids
        ]
