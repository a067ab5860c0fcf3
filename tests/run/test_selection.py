"""--limit / --tags / --skip-tags and the seed's system_upgrade_* safety rules are planning:
the selected plan is what the verifier checks; all refused before anything runs."""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import write_cloud

from stepwise.errors import InputError, UnsafePlanError
from stepwise.model import load_deployment
from stepwise.model.vocab import Stage, Step, Workflow
from stepwise.plan import make_plan, selection_for
from stepwise.plan.select import select
from stepwise.plan.selection import Selection
from stepwise.plan.units import Plan, Unit


@pytest.fixture
def dep(tmp_path: Path):
    return load_deployment(write_cloud(tmp_path, computes=3, controllers=3))


def _sys_plan(dep) -> Plan:
    units = []
    for n in dep.nodes:
        units += [
            Unit(
                f"prep:{n.name}",
                Step.SYSTEM_UPGRADE_PREPARE,
                (n.name,),
                (),
                tags=("system_upgrade_prepare",),
            ),
            Unit(
                f"run:{n.name}",
                Step.SYSTEM_UPGRADE_RUN,
                (n.name,),
                (),
                after=(f"prep:{n.name}",),
                tags=("system_upgrade_run",),
            ),
            Unit(
                f"pk:{n.name}",
                Step.PACKAGES,
                (n.name,),
                dep.services_on(n),
                after=(f"run:{n.name}",),
                tags=("upgrade",),
            ),
        ]
    return Plan(Workflow.UPGRADE, dep.name, tuple(units))


def test_limit_restricts_nodes_and_drops_dependencies(dep):
    sel = make_plan("update", dep, limit="Compute,!cmp-2")
    nodes = {n for u in sel.units for n in u.nodes}
    assert nodes == {"cmp-0", "cmp-1"}
    ids = {u.id for u in sel.units}
    assert all(a in ids for u in sel.units for a in u.after)
    assert make_plan("update", dep, limit="cmp-*").units  # globs


def test_narrowing_a_unit_narrows_what_it_stops_and_starts(dep):
    u = Unit(
        "u1",
        Step.STOP,
        ("cmp-0", "cmp-1"),
        ("worker",),
        stops={"worker": ("cmp-0", "cmp-1")},
        starts={"worker": ("cmp-0", "cmp-1")},
        work={"cmp-0": ("worker",), "cmp-1": ("worker",)},
    )
    cut = select(Plan(Workflow.UPDATE, dep.name, (u,)), dep, Selection(limit="cmp-1"))
    (v,) = cut.units
    assert (
        v.nodes == ("cmp-1",)
        and dict(v.stops) == {"worker": ("cmp-1",)}
        and dict(v.starts) == {"worker": ("cmp-1",)}
    )
    assert dict(v.work) == {"cmp-1": ("worker",)} and cut.params["partial"]


@pytest.mark.parametrize("limit", ["cmp-9", "Computer", "", "cmp-0,nope"])
def test_bad_limit_is_refused(dep, limit):
    with pytest.raises(InputError, match="--limit|limit"):
        make_plan("update", dep, limit=limit)


def test_tags_and_skip_tags(dep):
    only = make_plan("update", dep, selection=selection_for(Workflow.UPDATE, tags=["packages"]))
    assert {u.step for u in only.units} == {Step.PACKAGES}
    skipped = make_plan(
        "update", dep, selection=selection_for(Workflow.UPDATE, skip_tags=["verify,validate"])
    )
    assert not {Step.VERIFY, Step.VALIDATE} & {u.step for u in skipped.units}
    with pytest.raises(InputError, match="did you mean packages"):
        make_plan("update", dep, selection=selection_for(Workflow.UPDATE, tags=["pakages"]))
    with pytest.raises(InputError, match="skip-tags"):
        make_plan("update", dep, selection=selection_for(Workflow.UPDATE, skip_tags=["nope"]))


def test_system_upgrade_units_run_only_when_named(dep):
    plan = _sys_plan(dep)
    sel = select(plan, dep, Selection(limit="cmp-0"))
    assert {u.step for u in sel.units} == {Step.PACKAGES}
    sel = select(plan, dep, Selection(limit="cmp-0", tags=("all",)))
    assert Step.SYSTEM_UPGRADE_RUN not in {u.step for u in sel.units}
    sel = select(plan, dep, Selection(limit="cmp-0", tags=("system_upgrade_run",)))
    assert [u.step for u in sel.units] == [Step.SYSTEM_UPGRADE_RUN]


def test_system_upgrade_needs_limit_and_never_a_whole_role(dep):
    plan = _sys_plan(dep)
    with pytest.raises(InputError, match="without --limit"):
        select(plan, dep, Selection(tags=("system_upgrade_prepare",)))
    with pytest.raises(UnsafePlanError, match="whole role Controller"):
        select(plan, dep, Selection(tags=("system_upgrade_run",), limit="ctl-0,ctl-1,ctl-2,cmp-0"))
    with pytest.raises(UnsafePlanError, match="whole role Compute"):
        select(plan, dep, Selection(tags=("system_upgrade_prepare",), limit="Compute"))
    ok = select(plan, dep, Selection(tags=("system_upgrade_run",), limit="ctl-0,cmp-0"))
    assert {n for u in ok.units for n in u.nodes} == {"ctl-0", "cmp-0"}


def test_stage_selection_is_recorded(dep):
    plan = make_plan(
        "upgrade",
        dep,
        selection=selection_for(Workflow.UPGRADE, stage="run", plane="data"),
        preview=True,  # the data plane before the control plane: a preview
    )
    assert {u.stage for u in plan.units} == {Stage.RUN}
    assert (
        plan.params["stage"] == "run" and plan.params["plane"] == "data" and plan.params["partial"]
    )
