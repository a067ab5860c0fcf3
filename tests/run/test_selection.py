"""--limit / --tags / --skip-tags and the seed's system_upgrade_* safety rules: all refused
before anything runs (no Ansible here)."""

from __future__ import annotations

from pathlib import Path

import pytest

from stepwise.errors import InputError, UnsafePlanError
from stepwise.model import load_deployment
from stepwise.plan import make_plan
from stepwise.plan.units import Plan, Unit
from stepwise.run.selection import select

from conftest import write_cloud


@pytest.fixture
def dep(tmp_path: Path):
    return load_deployment(write_cloud(tmp_path, computes=3, controllers=3))


def _sys_plan(dep) -> Plan:
    units = []
    for n in dep.nodes:
        units += [Unit(f"prep:{n.name}", "system_upgrade_prepare", (n.name,), (), tags=("system_upgrade_prepare",)),
                  Unit(f"run:{n.name}", "system_upgrade_run", (n.name,), (), after=(f"prep:{n.name}",),
                       tags=("system_upgrade_run",)),
                  Unit(f"pk:{n.name}", "packages", (n.name,), dep.services_on(n), after=(f"run:{n.name}",),
                       tags=("upgrade",))]
    return Plan("system-upgrade", dep.name, tuple(units))


def test_limit_restricts_nodes_and_drops_dependencies(dep):
    plan = make_plan("update", dep)
    sel = select(plan, dep, limit="Compute,!cmp-2")
    nodes = {n for u in sel.units for n in u.nodes}
    assert nodes == {"cmp-0", "cmp-1"}
    ids = {u.id for u in sel.units}
    assert all(a in ids for u in sel.units for a in u.after)
    assert select(plan, dep, limit="cmp-*").units  # globs


@pytest.mark.parametrize("limit", ["cmp-9", "Computer", "", "cmp-0,nope"])
def test_bad_limit_is_refused(dep, limit):
    with pytest.raises(InputError, match="--limit|limit"):
        select(make_plan("update", dep), dep, limit=limit)


def test_tags_and_skip_tags(dep):
    plan = make_plan("update", dep)
    only = select(plan, dep, tags=["packages"])
    assert {u.step for u in only.units} == {"packages"}
    skipped = select(plan, dep, skip_tags=["verify,validate"])
    assert not {"verify", "validate"} & {u.step for u in skipped.units}
    with pytest.raises(InputError, match="did you mean packages"):
        select(plan, dep, tags=["pakages"])
    with pytest.raises(InputError, match="skip-tags"):
        select(plan, dep, skip_tags=["nope"])


def test_system_upgrade_units_run_only_when_named(dep):
    plan = _sys_plan(dep)
    sel = select(plan, dep, limit="cmp-0")
    assert {u.step for u in sel.units} == {"packages"}
    sel = select(plan, dep, limit="cmp-0", tags=["all"])
    assert "system_upgrade_run" not in {u.step for u in sel.units}
    sel = select(plan, dep, limit="cmp-0", tags=["system_upgrade_run"])
    assert [u.step for u in sel.units] == ["system_upgrade_run"]


def test_system_upgrade_needs_limit_and_never_a_whole_role(dep):
    plan = _sys_plan(dep)
    with pytest.raises(UnsafePlanError, match="without --limit"):
        select(plan, dep, tags=["system_upgrade_prepare"])
    with pytest.raises(UnsafePlanError, match="whole role Controller"):
        select(plan, dep, tags=["system_upgrade_run"], limit="ctl-0,ctl-1,ctl-2,cmp-0")
    with pytest.raises(UnsafePlanError, match="whole role Compute"):
        select(plan, dep, tags=["system_upgrade_prepare"], limit="Compute")
    ok = select(plan, dep, tags=["system_upgrade_run"], limit="ctl-0,cmp-0")
    assert {n for u in ok.units for n in u.nodes} == {"ctl-0", "cmp-0"}
