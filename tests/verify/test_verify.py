"""The verifier on a small classic cloud: it refuses plans that break a safety rule, and its
lower bound stays below the plan."""

from __future__ import annotations

from dataclasses import replace
from types import MappingProxyType

import pytest

from stepwise.errors import UnsafePlanError
from stepwise.plan import make_plan
from stepwise.plan.schedule import asap
from stepwise.verify import verify_plan
from tests.plan.cloud import classic, expand_contract_cloud


@pytest.fixture(scope="module")
def dep():
    return classic()


def first(plan, pred):
    return next(u for u in plan.units if pred(u))


def test_verifier_refuses_a_plan_that_breaks_quorum(dep):
    plan = make_plan("update", dep)
    galera_units = [u for u in plan.units if "galera" in u.stops]
    bad_id = galera_units[1].id
    # make the second galera batch start with the first: two of three down at once
    units = [
        replace(
            u,
            after=tuple(a for a in u.after if a in {x.id for x in plan.units[:2]}),
            start_s=galera_units[0].start_s,
            end_s=galera_units[0].start_s + u.duration_s,
        )
        if u.id == bad_id
        else u
        for u in plan.units
    ]
    with pytest.raises(UnsafePlanError, match="galera down on 2 of 3"):
        verify_plan(plan.with_units(units), dep)


def test_verifier_refuses_migration_while_old_readers_serve(dep):
    plan = make_plan("upgrade", dep)
    stop = first(plan, lambda u: u.step == "stop" and "nova_api" in u.stops)
    units = [
        replace(u, stops=MappingProxyType({"nova_api": ("controller-0",)}))
        if u.id == stop.id
        else u
        for u in plan.units
    ]
    with pytest.raises(
        UnsafePlanError, match="migrates the schema of nova_api while old code still serves"
    ):
        verify_plan(plan.with_units(units), dep)


def test_verifier_refuses_unpinned_rpc(dep):
    plan = make_plan("upgrade", dep)
    units = [replace(u, step="validate") if u.step == "pin_rpc" else u for u in plan.units]
    with pytest.raises(UnsafePlanError, match="not pinned"):
        verify_plan(plan.with_units(units), dep)


def test_lower_bound_is_below_the_plan(dep):
    for wf in ("update", "upgrade"):
        plan = verify_plan(make_plan(wf, dep), dep)
        assert 0 < plan.lower_bound_s <= plan.duration_s + 1e-6


def test_verifier_refuses_a_contract_before_the_last_old_instance_and_new_code_before_expand():
    dep = expand_contract_cloud()
    plan = make_plan("upgrade", dep)
    units = list(plan.units)
    # the contract moved to right after the expand: two glances still run old code
    ci = next(i for i, u in enumerate(units) if u.step == "contract")
    ei = next(i for i, u in enumerate(units) if u.step == "migrate" and "glance" in u.services)
    contract = replace(units[ci], after=(units[ei].id,))
    bad = plan.with_units(
        units[: ei + 1] + [contract] + [u for u in units[ei + 1 :] if u.id != contract.id]
    )
    timed, _ = asap(bad.units)
    with pytest.raises(
        UnsafePlanError, match="contracts the schema of glance while old code still runs"
    ):
        verify_plan(bad.with_units(timed), dep)
    # the expand dropped: new glance would start on the old schema
    no_expand = plan.with_units(
        [u for u in units if u.id != units[ei].id]
        and [
            replace(u, after=tuple(a if a != units[ei].id else units[ei].after[0] for a in u.after))
            for u in units
            if u.id != units[ei].id
        ]
    )
    timed, _ = asap(no_expand.units)
    with pytest.raises(
        UnsafePlanError, match="starts new glance on controller-1 before its schema is expanded"
    ):
        verify_plan(no_expand.with_units(timed), dep)
