"""The prestage at scale (issue 38 item 1): sized by what limits the fetch (the mirror's
nodes at once and the connection's forks x processes), a role's nodes fetched in units of up
to `forks` nodes, bounded by the work and not by the planner's lanes, shown apart from the
disruptive part, and folded per role in the tree and the report."""

from __future__ import annotations

import io
import json
from dataclasses import fields, replace

import pytest
from rich.console import Console

from benchmarks.clouds import big_cloud
from stepwise.cli.options import prestage_bound as selected_bound
from stepwise.cli.render import render_plan
from stepwise.model.vocab import Step, Workflow
from stepwise.observe.report.batches import batch_groups
from stepwise.plan import make_plan, selection_for
from stepwise.plan.prestage import DEFAULT_PARALLEL, ROLE_VAR, nodes_at_once
from stepwise.plan.units import Plan, prestage_seconds
from stepwise.verify import verify_plan
from stepwise.verify.bounds import prestage_bound

NODES = 10_000


@pytest.fixture(scope="module")
def big():
    dep = big_cloud(NODES, 60)
    parallel = selected_bound(DEFAULT_PARALLEL, False)  # as `stepwise plan` selects it
    sel = selection_for(Workflow.UPDATE, prestage=parallel)
    return dep, verify_plan(make_plan(Workflow.UPDATE, dep, selection=sel), dep)


def _prestages(plan):
    return [u for u in plan.units if u.step is Step.PRESTAGE]


def _tree(plan, **kw) -> str:
    out = io.StringIO()
    render_plan(plan, Console(file=out, width=120, color_system=None), **kw)
    return out.getvalue()


def test_the_fetch_is_bounded_by_the_mirror_and_the_connection():
    # the connection: --forks hosts in each of --max-parallel-units playbooks
    assert nodes_at_once(2000, forks=50, processes=8) == 400
    assert selected_bound(2000, False, 10, 2) == 20
    # the mirror, when it serves fewer
    assert nodes_at_once(100, forks=50, processes=8) == 100
    assert selected_bound(3, False) == 3
    assert selected_bound(2000, True) == 0 and nodes_at_once(0) == 0
    # a large cloud's default: thousands from the mirror, the connection's default bounds it
    assert DEFAULT_PARALLEL >= 1000 and selected_bound(DEFAULT_PARALLEL, False) == 400


def test_a_large_cloud_fetches_a_role_at_a_time_in_units_of_forks_nodes(big):
    dep, plan = big
    pre = _prestages(plan)
    assert plan.params["prestage"] == 400
    fetched = [n for u in pre for n in u.nodes]
    assert len(fetched) == len(set(fetched)) == NODES  # every node once
    assert len(pre) < NODES / 40  # units of many nodes, not one per node
    for u in pre:
        assert len(u.nodes) <= 50 and not u.stops and not u.starts
        assert {dep.role_of(n).name for n in u.nodes} == {u.vars[ROLE_VAR]}
        assert all(u.services_on(n) for n in u.nodes)
    # at most 400 nodes fetch at once on the estimate's schedule (8 lanes of 50)
    times = sorted({u.start_s for u in pre})
    for t in times:
        assert sum(len(u.nodes) for u in pre if u.start_s <= t < u.end_s) <= 400
    # 10,000 nodes x 30 s, 400 at once: 12.5 min, not the 20 h 50 min of 4 at once
    assert plan.prestage_bound_s == pytest.approx(NODES * 30 / 400)
    assert plan.prestage_bound_s <= prestage_seconds(plan) <= 1.1 * plan.prestage_bound_s


def test_the_prestage_bound_is_of_the_work_not_of_the_planners_lanes(big):
    dep, plan = big
    pre = _prestages(plan)
    # the same units in one lane: the estimate grows, the bound does not move
    prev = {u.id: v.id for v, u in zip(pre, pre[1:], strict=False)}
    chained = _plain(plan).with_units(
        replace(u, after=(prev[u.id],)) if u.id in prev else u for u in plan.units
    )
    assert prestage_bound(chained, dep) == pytest.approx(plan.prestage_bound_s)
    # fewer nodes at once (a slower mirror): the bound grows with it, nodes x 30 s / parallel
    slow = replace(_plain(plan), params={**plan.params, "prestage": 100})
    assert prestage_bound(slow, dep) == pytest.approx(NODES * 30 / 100)


def _plain(plan) -> Plan:
    """A verified plan's fields as a plan that may be changed."""
    return Plan(**{f.name: getattr(plan, f.name) for f in fields(Plan)})


def test_the_estimate_and_the_bound_are_the_disruptive_parts_the_prestage_apart(big):
    _, plan = big
    fetch = prestage_seconds(plan)
    doc = json.loads(plan.to_json_bytes())
    est = doc["estimate"]
    assert est["prestage_s"] == pytest.approx(fetch)
    assert est["prestage_bound_s"] == pytest.approx(plan.prestage_bound_s)
    # the totals still hold both parts (a run takes the whole); a reader gets the split
    assert est["duration_s"] == pytest.approx(plan.duration_s)
    assert est["lower_bound_s"] >= est["prestage_bound_s"] > 0
    assert Plan.from_json(doc).prestage_bound_s == pytest.approx(plan.prestage_bound_s)
    title = " ".join(_tree(plan).split("\n├")[0].split())
    rest, rest_bound = plan.duration_s - fetch, plan.lower_bound_s - plan.prestage_bound_s
    from stepwise.cli.render import hms

    assert (
        f"estimated {hms(rest)} for the disruptive part, "
        f"{rest / rest_bound:.2f}x the lower bound {hms(rest_bound)}, "
        f"after a prestage of ~{hms(fetch)} (nothing stops; "
        f"{fetch / plan.prestage_bound_s:.2f}x its bound {hms(plan.prestage_bound_s)})"
    ) in title


def test_the_tree_of_10000_nodes_folds_the_prestage_per_role(big):
    dep, plan = big
    text = _tree(plan)
    assert len(text.splitlines()) < 200
    pre = _prestages(plan)
    leaf0 = [u for u in pre if u.vars[ROLE_VAR] == "ComputeLeaf0"]
    n = sum(len(u.nodes) for u in leaf0)
    assert f"ComputeLeaf0: {n} node(s), {len(leaf0)} unit(s)," in text
    assert not any(f" {u.id}\n" in text for u in leaf0)
    # the report's batch table folds them the same way: one row per role
    keys = [k for k in batch_groups(plan) if k.startswith("prestage ")]
    assert sorted(keys) == sorted(f"prestage {r.name}" for r in dep.roles)


def test_expand_shows_every_prestage_unit():
    dep = big_cloud(3_000, 60)
    sel = selection_for(Workflow.UPDATE, prestage=selected_bound(DEFAULT_PARALLEL, False))
    plan = verify_plan(make_plan(Workflow.UPDATE, dep, selection=sel), dep)
    pre = _prestages(plan)
    assert len(pre) >= 40  # enough to fold
    assert " unit(s), " in _tree(plan)
    text = _tree(plan, expand=True)
    assert " unit(s), " not in text
    assert all(f" {u.id}\n" in text for u in pre)
