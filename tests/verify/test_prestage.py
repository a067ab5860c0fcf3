"""The verifier and the availability views with a prestage stage: accepted, no outage counted
for it, and a prestage that would disrupt, or a node disrupted before its prestage, refused."""

from __future__ import annotations

from dataclasses import replace
from types import MappingProxyType

import pytest

from stepwise.errors import UnsafePlanError
from stepwise.model.step_kinds import StepKind
from stepwise.model.vocab import Stage, Step, Workflow
from stepwise.observe.report.model import BUCKETS, _fmt_s, _plan_events, plan_section
from stepwise.plan import make_plan, selection_for
from stepwise.plan.units import prestage_seconds
from stepwise.verify import verify_plan
from stepwise.verify.invariants import check
from tests.plan.cloud import classic, deployment


@pytest.fixture(scope="module")
def dep():
    return classic()


def _plan(dep, workflow, n):
    return make_plan(workflow, dep, selection=selection_for(workflow, prestage=n))


@pytest.mark.parametrize("workflow", [Workflow.UPDATE, Workflow.UPGRADE])
def test_prestage_plans_are_accepted_and_announce_the_same_outages(dep, workflow):
    off = verify_plan(_plan(dep, workflow, 0), dep)
    on = verify_plan(_plan(dep, workflow, 3), dep)
    shift = prestage_seconds(on)
    assert shift > 0
    # the windows are those without a prestage, later by the prestage's time: none is added
    assert [(w.service, w.start_s + shift, w.end_s + shift) for w in off.windows] == [
        (w.service, w.start_s, w.end_s) for w in on.windows
    ]


def test_a_single_controller_prestage_counts_no_downtime():
    """One controller: its services' windows are forced (announced) and start at its visit,
    never during the prestage."""
    one = deployment(
        classic().catalog,
        [
            {
                "name": "Controller",
                "tags": ["controlplane"],
                "services": ["galera", "rabbitmq", "keystone", "nova_api"],
                "nodes": {"count": 1, "name": "controller-{index}"},
            }
        ],
    )
    on = verify_plan(_plan(one, Workflow.UPDATE, 4), one)
    shift = prestage_seconds(on)
    assert on.windows and all(w.start_s >= shift for w in on.windows)


def test_the_availability_view_shows_every_instance_serving_during_the_prestage(dep):
    on = verify_plan(_plan(dep, Workflow.UPDATE, 2), dep)
    end = prestage_seconds(on)
    stops = [t for t, sign, _, _ in _plan_events(on) if sign < 0]
    assert stops and min(stops) >= end  # the view's events: the first stop after the prestage
    section = plan_section(on, dep)
    width = section.axis_s / BUCKETS  # the chart keeps each bucket's lowest value
    for s in section.series:
        during = [v for t, v in s.points if t + width <= end]
        assert during and min(during) == s.total, s.service
        assert min(v for _, v in s.points) < s.total  # the same view does count the visits


def _with(plan, uid, **changes):
    return plan.with_units(replace(u, **changes) if u.id == uid else u for u in plan.units)


def test_a_prestage_that_stops_a_service_is_refused(dep):
    plan = _plan(dep, Workflow.UPDATE, 2)
    pre = next(u for u in plan.units if u.step is Step.PRESTAGE)
    bad = _with(plan, pre.id, stops=MappingProxyType({"keystone": pre.nodes}))
    found, _ = check(bad, dep)
    assert found == [
        f"unit {pre.id} (prestage on {pre.nodes[0]}) is a prestage and takes services down: "
        "fetching must disrupt nothing"
    ]


def test_a_node_disrupted_before_its_prestage_is_refused(dep):
    plan = _plan(dep, Workflow.UPDATE, 2)
    gate = next(u for u in plan.units if u.is_barrier and u.stage is Stage.PRESTAGE)
    validate = next(u for u in plan.units if u.step is Step.VALIDATE)
    assert validate.after == (gate.id,)
    # the disruptive part no longer waits for the prestage: any node could be stopped first
    cut = _with(plan, validate.id, after=())
    with pytest.raises(UnsafePlanError) as info:
        verify_plan(cut, dep)
    texts = [p.message for p in info.value.problems]
    assert texts and all("without waiting for its prestage" in t for t in texts)
    assert any("disrupts controller-0" in t for t in texts)


def test_the_report_shows_the_prestage_as_its_own_kind_and_time(dep):
    on = verify_plan(_plan(dep, Workflow.UPDATE, 2), dep)
    section = plan_section(on, dep)
    kinds = {b.kind for b in section.planned if b.start < prestage_seconds(on)}
    assert kinds == {StepKind.PRESTAGE}
    summary = dict(section.summary)
    fetch = prestage_seconds(on)
    assert summary["prestage"].startswith(f"{_fmt_s(fetch)} before it (nothing stops)")
    assert f"lower bound {_fmt_s(on.prestage_bound_s)}" in summary["prestage"]
    # the estimate and its bound are the disruptive part's, without the prestage
    assert summary["estimate"] == f"{_fmt_s(on.duration_s - fetch)} (the disruptive part)"
    assert summary["lower bound"] == _fmt_s(on.lower_bound_s - on.prestage_bound_s)
    off = verify_plan(_plan(dep, Workflow.UPDATE, 0), dep)
    assert "prestage" not in dict(plan_section(off, dep).summary)
