"""Each invariant on small hand-made plans: it accepts a safe plan and refuses one that breaks
exactly its rule, with the message an operator reads (the whole list of problems is compared,
so no other rule fires)."""

from __future__ import annotations

from types import MappingProxyType
from typing import Any

import pytest

from stepwise.model.vocab import Phase, Step, Workflow
from stepwise.plan.units import Plan, Unit, Window
from stepwise.verify.invariants import INVARIANTS, check
from tests.plan.cloud import catalog, deployment, service

CONTROLLERS = ("controller-0", "controller-1", "controller-2")


def _cloud(*, pin_tasks: bool = True):
    """3 controllers (galera with majority quorum and no mixed OS, keystone rolling with
    min_available 2, glance expand/contract, nova_api offline in RPC group nova), 2 computes
    one at a time (nova_compute, RPC group nova, max_unavailable 1)."""
    galera = service("galera", "infra", rule={"quorum": "majority"}, cluster="galera")
    galera["mixed_os"] = False
    nova_api = service("nova_api", rolling=False, deps=("keystone",), rpc="nova", migrate=True)
    nova_compute = service(
        "nova_compute", "data", deps=("nova_api",), rpc="nova", rule={"max_unavailable": 1}
    )
    if not pin_tasks:
        for spec in (nova_api, nova_compute):
            del spec["upgrade"]["pin"], spec["upgrade"]["unpin"]
    cat = catalog(
        galera,
        service("keystone", deps=("galera",), rule={"min_available": 2}),
        service("glance", rule={"min_available": 1}, schema="expand_contract"),
        nova_api,
        nova_compute,
    )
    return deployment(
        cat,
        [
            {
                "name": "Controller",
                "tags": ["controlplane"],
                "services": ["galera", "keystone", "glance", "nova_api"],
                "nodes": {"count": 3, "name": "controller-{index}"},
            },
            {
                "name": "Compute",
                "update_serial": 1,
                "services": ["nova_compute"],
                "nodes": {"count": 2, "name": "compute-{index}"},
            },
        ],
    )


DEP = _cloud()


def unit(
    uid: str,
    step: Step,
    start: float,
    end: float,
    nodes: tuple[str, ...] = (),
    *,
    stops: dict[str, tuple[str, ...]] | None = None,
    starts: dict[str, tuple[str, ...]] | None = None,
    services: tuple[str, ...] = (),
    **kw: Any,
) -> Unit:
    """A unit at fixed times; its services default to those it stops or starts."""
    stops, starts = stops or {}, starts or {}
    return Unit(
        uid,
        step,
        nodes,
        services or tuple(dict.fromkeys([*stops, *starts])),
        stops=MappingProxyType(stops),
        starts=MappingProxyType(starts),
        start_s=start,
        end_s=end,
        duration_s=end - start,
        **kw,
    )


def down_and_up(name: str, service: str, nodes: tuple[str, ...], t0: float, t1: float, **kw):
    """Stop `service` on `nodes` at t0 and start it again (upgraded) at t1 (10 s each)."""
    return [
        unit(f"{name}-stop", Step.STOP, t0, t0 + 10, nodes, stops={service: nodes}, **kw),
        unit(f"{name}-start", Step.START, t1, t1 + 10, nodes, starts={service: nodes}, **kw),
    ]


def problems(workflow: Workflow, *units: Unit, dep=DEP, **params: Any) -> list[str]:
    plan = Plan(workflow, dep.name, tuple(units), params=MappingProxyType(params))
    return check(plan, dep)[0]


def windows(workflow: Workflow, *units: Unit, **params: Any) -> list[Window]:
    plan = Plan(workflow, DEP.name, tuple(units), params=MappingProxyType(params))
    found, windows = check(plan, DEP)
    assert found == []
    return windows


# -- static -------------------------------------------------------------------------------


def test_units_in_order():
    a = unit("a", Step.VALIDATE, 0, 1)
    b = unit("b", Step.VALIDATE, 1, 2, after=("a",))
    assert problems(Workflow.UPDATE, a, b) == []
    assert problems(Workflow.UPDATE, b, a) == [
        "unit b (validate on the deployment) waits for a, which is not an earlier unit "
        "(the plan must be a DAG in order)"
    ]
    assert problems(Workflow.UPDATE, a, a) == ["unit id a is used twice"]


def test_rpc_groups_can_pin():
    pin = unit("pin", Step.PIN_RPC, 0, 1, services=("nova_api", "nova_compute"))
    assert problems(Workflow.UPGRADE, pin) == []
    no_pin_tasks = _cloud(pin_tasks=False)
    assert problems(Workflow.UPGRADE, pin, dep=no_pin_tasks) == [
        "RPC group 'nova' (nova_api, nova_compute) has no `upgrade.pin` tasks: new code would "
        "talk unpinned RPC to old peers; add pin/unpin tasks to one of its services (or say "
        "how it negotiates: rpc_mixing)"
    ]
    assert problems(Workflow.UPGRADE, dep=no_pin_tasks) == [], "no pin in the plan, no rule"


# -- replayed: capacity and order ---------------------------------------------------------


def _compute_batch(name: str, node: str, t0: float) -> Unit:
    return unit(f"{name}", Step.PACKAGES, t0, t0 + 20, (node,), batch=name)


def test_role_serial_respected():
    one_at_a_time = [_compute_batch("b1", "compute-0", 0), _compute_batch("b2", "compute-1", 20)]
    assert problems(Workflow.UPDATE, *one_at_a_time) == []
    together = [_compute_batch("b1", "compute-0", 0), _compute_batch("b2", "compute-1", 5)]
    assert problems(Workflow.UPDATE, *together) == [
        "at 0:00:05 unit b2 (packages on compute-1): 2 nodes of Compute are being worked on; "
        "its update_serial is 1"
    ]
    # the OS upgrade's later nodes go one command per node: not counted against the serial
    later = [_compute_batch("b1", "compute-0", 0)]
    later.append(unit("b2", Step.PACKAGES, 5, 25, ("compute-1",), batch="b2", phase=Phase.OS_REST))
    assert problems(Workflow.UPDATE, *later) == []


def test_service_stays_available():
    one = down_and_up("c0", "galera", ("controller-0",), 0, 20)
    two = down_and_up("c1", "galera", ("controller-1",), 5, 25)
    assert problems(Workflow.UPDATE, *one) == []
    assert problems(Workflow.UPDATE, one[0], two[0], one[1], two[1]) == [
        "at 0:00:05 unit c1-stop (stop on controller-1) takes galera down on 2 of 3 nodes; "
        "its rule (quorum: majority) allows 1"
    ]
    # an offline service's outage in an upgrade is its announced window, not a fault
    offline = down_and_up("all", "nova_api", CONTROLLERS, 0, 20)
    assert problems(Workflow.UPGRADE, *offline, initial={"pinned": True}) == []


def test_control_plane_before_data_plane():
    control = down_and_up("ks", "keystone", ("controller-0",), 0, 10, phase=Phase.CONTROLPLANE)
    data = down_and_up("nc", "nova_compute", ("compute-0",), 20, 30, phase=Phase.DATAPLANE)
    assert problems(Workflow.UPDATE, *control, *data) == []
    early = down_and_up("nc", "nova_compute", ("compute-0",), 15, 30, phase=Phase.DATAPLANE)
    assert problems(Workflow.UPDATE, *control, *early) == [
        "the data plane starts stopping at 0:00:15 before the control plane is done (0:00:20)"
    ]


def test_everything_serves_again():
    stop, start = down_and_up("ks", "keystone", ("controller-0",), 0, 10)
    assert problems(Workflow.UPDATE, stop, start) == []
    assert problems(Workflow.UPDATE, stop) == [
        "keystone is left stopped on controller-0 at the end of the plan"
    ]
    # a selected part of a workflow may leave nodes stopped for the next command
    assert problems(Workflow.UPDATE, stop, partial=True) == []


def test_downtime_windows_are_recorded_not_refused():
    offline = down_and_up("all", "nova_api", CONTROLLERS, 0, 20)
    assert windows(Workflow.UPGRADE, *offline, initial={"pinned": True}) == [
        Window("nova_api", 0.0, 30.0, "")
    ]
    assert windows(Workflow.UPDATE, *down_and_up("ks", "keystone", ("controller-0",), 0, 10)) == []


# -- replayed: old and new code -----------------------------------------------------------


def test_pin_lifted_after_last_old_code():
    unpin = unit("unpin", Step.UNPIN_RPC, 0, 1, services=("nova_api",))
    all_new = {"nova_api": list(CONTROLLERS), "nova_compute": ["compute-0", "compute-1"]}
    assert problems(Workflow.UPGRADE, unpin, initial={"new_code": all_new}) == []
    assert problems(Workflow.UPGRADE, unpin) == [
        "at 0:00:00 unit unpin (unpin_rpc on the deployment) lifts the RPC pin of 'nova' while "
        "5 instance(s) still run old code (e.g. nova_api on controller-0)"
    ]


def test_contract_after_last_old_code():
    contract = unit("contract", Step.CONTRACT, 0, 1, ("controller-0",), services=("glance",))
    all_new = {"glance": list(CONTROLLERS)}
    assert problems(Workflow.UPGRADE, contract, initial={"new_code": all_new}) == []
    assert problems(
        Workflow.UPGRADE, contract, initial={"new_code": {"glance": CONTROLLERS[:1]}}
    ) == [
        "at 0:00:00 unit contract (contract on controller-0) contracts the schema of glance "
        "while old code still runs on controller-1, controller-2; contract after the last old "
        "instance"
    ]


def test_no_old_code_in_facts_at_converge():
    """A selected part (`upgrade converge`) is exempt from the two rules above, not from what
    the facts say: an instance they show on old code blocks the unpin and the contract."""
    unpin = unit("unpin", Step.UNPIN_RPC, 0, 1, ("controller-0",), services=("nova_api",))
    contract = unit("contract", Step.CONTRACT, 1, 2, ("controller-0",), services=("glance",))
    old = {"nova_compute": ["compute-1"], "glance": ["controller-2"]}
    assert problems(Workflow.UPGRADE, unpin, contract, partial=True) == []
    # the old instances were brought to the new code before (as the run stage does)
    upgraded = {"old_code": old, "new_code": {"nova_compute": ["compute-1"], "glance": CONTROLLERS}}
    assert problems(Workflow.UPGRADE, unpin, contract, partial=True, initial=upgraded) == []
    assert problems(Workflow.UPGRADE, unpin, contract, partial=True, initial={"old_code": old}) == [
        "at 0:00:00 unit unpin (unpin_rpc on controller-0) lifts the RPC pin of 'nova' while "
        "the facts show old nova_compute on compute-1; upgrade them first (stepwise upgrade run)",
        "at 0:00:01 unit contract (contract on controller-0) contracts the schema of glance while "
        "the facts show old glance on controller-2; upgrade them first (stepwise upgrade run)",
    ]


def test_schema_migrated_with_old_code_stopped():
    migrate = unit("migrate", Step.MIGRATE, 10, 15, ("controller-0",), services=("nova_api",))
    stop, start = down_and_up("all", "nova_api", CONTROLLERS, 0, 20)
    pinned = {"pinned": True}
    assert problems(Workflow.UPGRADE, stop, migrate, start, initial=pinned) == []
    early = unit("migrate", Step.MIGRATE, 0, 5, ("controller-0",), services=("nova_api",))
    assert problems(Workflow.UPGRADE, early, stop, start, initial=pinned) == [
        "at 0:00:00 unit migrate (migrate on controller-0) migrates the schema of nova_api while "
        "old code still serves on controller-0, controller-1, controller-2; stop its old "
        "readers first"
    ]


def _transfer(uid: str, t0: float, idempotent: bool = False) -> Unit:
    return unit(
        uid,
        Step.SYSTEM_UPGRADE_TRANSFER_DATA,
        t0,
        t0 + 10,
        ("controller-1",),
        services=("galera",),
        idempotent=idempotent,
    )


def test_data_transferred_once_before_serving():
    assert problems(Workflow.SYSTEM_UPGRADE, _transfer("t", 0)) == []
    where = "unit t (system_upgrade_transfer_data on controller-1)"
    assert problems(Workflow.SYSTEM_UPGRADE, _transfer("t", 0, idempotent=True)) == [
        f"{where}: a data transfer must be marked non-idempotent (it must never run twice)"
    ]
    assert problems(Workflow.SYSTEM_UPGRADE, _transfer("t", 0), _transfer("t2", 20)) == [
        "unit t2 (system_upgrade_transfer_data on controller-1): data transfer onto "
        "controller-1 a second time would overwrite newer data"
    ]
    started = unit(
        "start", Step.START, 0, 5, ("controller-1",), starts={"galera": ("controller-1",)}
    )
    assert problems(Workflow.SYSTEM_UPGRADE, started, _transfer("t", 10)) == [
        f"{where}: data transfer onto controller-1 after services started there destroys newer data"
    ]


def test_expand_before_new_code():
    expand = unit("expand", Step.MIGRATE, 0, 5, ("controller-0",), services=("glance",))
    rolled = down_and_up("g1", "glance", ("controller-1",), 10, 20)
    assert problems(Workflow.UPGRADE, expand, *rolled) == []
    early = down_and_up("g1", "glance", ("controller-1",), 0, 10)
    assert problems(Workflow.UPGRADE, *early) == [
        "at 0:00:20 unit g1-start (start on controller-1) starts new glance on controller-1 "
        "before its schema is expanded; the expand runs first, on the bootstrap node"
    ]


def test_rpc_pinned_while_mixed():
    pin = unit("pin", Step.PIN_RPC, 0, 5, services=("nova_api", "nova_compute"))
    compute = down_and_up("nc", "nova_compute", ("compute-0",), 10, 20)
    assert problems(Workflow.UPGRADE, pin, *compute) == []
    assert problems(Workflow.UPGRADE, *compute) == [
        "at 0:00:30 unit nc-start (start on compute-0) starts new nova_compute while nova_api "
        "on controller-0 runs old code and RPC group 'nova' is not pinned"
    ]


def test_cluster_on_one_os_major():
    stop, start = down_and_up("g0", "galera", ("controller-0",), 0, 20)
    new_os = unit("os", Step.SYSTEM_UPGRADE_RUN, 10, 15, ("controller-0",))
    others_new = {"new_os": ["controller-1", "controller-2"]}
    assert problems(Workflow.SYSTEM_UPGRADE, stop, new_os, start, initial=others_new) == []
    assert problems(Workflow.SYSTEM_UPGRADE, stop, new_os, start) == [
        "at 0:00:30 unit g0-start (start on controller-0): galera cluster would have members on "
        "two OS major versions (controller-0, controller-1, controller-2); such a cluster "
        "cannot form"
    ]


def test_dependencies_upgraded_first():
    galera = down_and_up("db", "galera", ("controller-0",), 0, 10)
    keystone = down_and_up("ks", "keystone", ("controller-0",), 20, 30)
    assert problems(Workflow.UPGRADE, *galera, *keystone) == []
    early = down_and_up("ks", "keystone", ("controller-0",), 5, 30)
    assert problems(Workflow.UPGRADE, galera[0], early[0], galera[1], early[1]) == [
        "keystone starts its upgrade at 0:00:05 but its dependency galera is upgraded "
        "everywhere only at 0:00:20"
    ]
    # an update keeps schema and RPC compatible: no order across services
    assert problems(Workflow.UPDATE, galera[0], early[0], galera[1], early[1]) == []


# -- the loop -----------------------------------------------------------------------------


def test_problems_at_one_event_come_in_the_order_of_the_invariants():
    first = _compute_batch("b1", "compute-0", 0)
    both = unit(
        "b2",
        Step.STOP,
        5,
        25,
        ("compute-1",),
        stops={"nova_compute": ("compute-0", "compute-1")},
        batch="b2",
    )
    back = unit("back", Step.START, 30, 40, starts={"nova_compute": ("compute-0", "compute-1")})
    assert problems(Workflow.UPDATE, first, both, back) == [
        "at 0:00:05 unit b2 (stop on compute-1): 2 nodes of Compute are being worked on; "
        "its update_serial is 1",
        "at 0:00:05 unit b2 (stop on compute-1) takes nova_compute down on 2 of 2 nodes; "
        "its rule (max_unavailable 1) allows 1",
    ]


@pytest.mark.parametrize("rule", INVARIANTS, ids=lambda r: r.__name__)
def test_every_invariant_says_its_rule_and_why(rule):
    assert rule.__doc__ and "Why:" in rule.__doc__
