"""Planner behaviour on a small classic cloud: ordering, change-awareness, safety rules."""

from __future__ import annotations

import json

import pytest

from stepwise.errors import InputError, UnsafePlanError
from stepwise.model.catalog import allowance
from stepwise.model.vocab import Workflow
from stepwise.plan import make_plan, selection_for
from stepwise.verify import verify_plan
from tests.plan.cloud import (
    classic,
    cycles,
    expand_contract_cloud,
    facts,
    max_down,
    visits_per_node,
)


@pytest.fixture(scope="module")
def dep():
    return classic()


def first(plan, pred):
    return next(u for u in plan.units if pred(u))


def test_update_is_deterministic_and_a_dag(dep):
    a = make_plan("update", dep)
    b = make_plan("update", dep)
    assert json.dumps(a.to_json()) == json.dumps(b.to_json())
    seen = set()
    for u in a.units:
        assert set(u.after) <= seen
        seen.add(u.id)


def test_update_keeps_rules_and_cycles_every_instance_once(dep):
    plan = verify_plan(make_plan("update", dep), dep)
    assert set(cycles(plan).values()) == {(1, 1)}
    assert len(cycles(plan)) == sum(len(ns) for ns in dep.instances.values())
    worst = max_down(plan)
    for s, n in worst.items():
        a = allowance(dep.catalog[s], len(dep.instances[s]))
        assert a is None or n <= a, (s, n, a)
    assert worst["galera"] == 1 and worst["nova_compute"] == 2 and worst["ceph_osd"] == 1
    assert plan.windows == ()  # a minor update has no downtime window


def test_update_control_plane_finishes_before_data_plane_stops(dep):
    plan = make_plan("update", dep)
    ctrl_end = max(
        u.end_s for u in plan.units if u.phase == "controlplane" and (u.stops or u.starts)
    )
    data_start = min(u.start_s for u in plan.units if u.phase == "dataplane" and u.stops)
    assert data_start >= ctrl_end


def test_update_visits_each_node_once_in_dependency_order(dep):
    plan = verify_plan(make_plan("update", dep), dep)
    batches_of = visits_per_node(plan)
    assert set(batches_of) == {n.name for n in dep.nodes}
    assert all(len(b) == 1 for b in batches_of.values()), "a node is taken out of service once"
    # inside a controller's visit: galera starts before keystone, keystone before nova_api;
    # they stop the other way round
    visit = [u for u in plan.units if u.batch == next(iter(batches_of["controller-0"]))]
    start = next(u for u in visit if u.step == "start").work["controller-0"]
    stop = next(u for u in visit if u.step == "stop").work["controller-0"]
    assert start.index("galera") < start.index("keystone") < start.index("nova_api")
    assert list(stop) == list(reversed(start))


def test_update_is_change_aware(dep):
    fx = facts(dep, {"compute-1": ["pkg-nova_compute"], "compute-3": ["pkg-nova_compute"]})
    plan = verify_plan(make_plan("update", dep, fx), dep)
    touched = {n for u in plan.units for n in u.nodes}
    assert touched == {"compute-1", "compute-3"}
    assert {s for u in plan.units for s in u.stops} == {"nova_compute"}


def test_nothing_changes_gives_an_empty_plan(dep):
    plan = make_plan("update", dep, facts(dep, {}))
    assert plan.units == ()


def test_kernel_update_reboots_in_the_same_visit_with_everything_on_the_node_down(dep):
    fx = facts(dep, {"compute-0": ["pkg-nova_compute", "kernel"], "controller-1": ["kernel"]})
    plan = verify_plan(make_plan("update", dep, fx), dep)
    reboots = [u for u in plan.units if u.step == "reboot"]
    assert sorted(n for u in reboots for n in u.nodes) == ["compute-0", "controller-1"]
    for node in ("compute-0", "controller-1"):
        visits = {
            u.batch for u in plan.units if u.stops and any(node in ns for ns in u.stops.values())
        }
        assert len(visits) == 1, f"{node}: one visit for its packages and its reboot"
        visit = [u for u in plan.units if u.batch in visits]
        assert set(visit[0].stops) == set(dep.services_on(node))
        steps = [u.step for u in visit]
        assert steps.index("packages") < steps.index("reboot") < steps.index("start")
    compute = [u for u in plan.units if u.step == "packages" and "compute-0" in u.nodes][0]
    assert compute.work["compute-0"] == ("nova_compute",)
    assert compute.vars["extra_packages"] == {"compute-0": ["kernel"]}
    ctrl = [u for u in plan.units if u.step == "packages" and "controller-1" in u.nodes][0]
    assert ctrl.vars["extra_packages"] == {"controller-1": ["kernel"]}


def test_upgrade_stages_pins_and_schema_window(dep):
    plan = verify_plan(make_plan("upgrade", dep), dep)
    stages = [u.stage for u in plan.units]
    assert stages.index("run") > max(i for i, s in enumerate(stages) if s == "prepare")
    pin = first(plan, lambda u: u.step == "pin_rpc")
    unpin = first(plan, lambda u: u.step == "unpin_rpc")
    new_rpc = [u for u in plan.units if any(s in ("nova_api", "nova_compute") for s in u.starts)]
    assert all(pin.end_s <= u.start_s and u.end_s <= unpin.start_s for u in new_rpc)
    stop = first(plan, lambda u: u.step == "stop" and "nova_api" in u.stops)
    assert sorted(stop.stops["nova_api"]) == ["controller-0", "controller-1", "controller-2"]
    migrate = first(plan, lambda u: u.step == "migrate" and "nova_api" in u.services)
    assert migrate.nodes == ("controller-0",) and migrate.start_s >= stop.start_s
    [window] = [w for w in plan.windows]
    assert window.service == "nova_api" and window.start_s == stop.start_s
    # keystone rolls (expand on the bootstrap node first), galera never loses quorum
    ks_mig = first(plan, lambda u: u.step == "migrate" and "keystone" in u.services)
    assert ks_mig.nodes == ("controller-0",)
    assert max_down(plan)["galera"] == 1
    assert first(plan, lambda u: u.step == "converge").services == ("keystone",)


def test_upgrade_stage_and_plane_selection(dep):
    # previews: a stage out of order is refused to a run (tests/plan/test_upgrade_order.py)
    run_ctrl = make_plan(
        "upgrade",
        dep,
        selection=selection_for(Workflow.UPGRADE, stage="run", plane="control"),
        preview=True,
    )
    assert {u.stage for u in run_ctrl.units} == {"run"}
    assert {u.phase for u in run_ctrl.units} == {"controlplane"}
    data = make_plan(
        "upgrade",
        dep,
        selection=selection_for(Workflow.UPGRADE, stage="run", plane="data"),
        preview=True,
    )
    assert {n for u in data.units for n in u.nodes} == {f"compute-{i}" for i in range(4)} | {
        f"ceph-{i}" for i in range(3)
    }
    ids = {u.id for u in data.units}
    assert all(set(u.after) <= ids for u in data.units)
    with pytest.raises(InputError, match="stage"):
        make_plan("upgrade", dep, selection=selection_for(Workflow.UPGRADE, stage="converged"))
    with pytest.raises(InputError, match="plane"):
        make_plan("update", dep, selection=selection_for(Workflow.UPDATE, plane="storage"))


def test_limit_selects_nodes_and_roles(dep):
    plan = make_plan("update", dep, limit="Compute,!compute-0")
    assert {n for u in plan.units for n in u.nodes} == {"compute-1", "compute-2", "compute-3"}
    with pytest.raises(InputError, match="matches no node or role") as exc:
        make_plan("update", dep, limit="computer-1")
    assert "did you mean" in str(exc.value)


def test_json_contract_round_trips(dep):
    plan = verify_plan(make_plan("upgrade", dep), dep)
    data = plan.to_json()
    u = data["units"][5]
    for key in (
        "id",
        "after",
        "step",
        "nodes",
        "services",
        "stops",
        "starts",
        "start_s",
        "end_s",
        "why",
    ):
        assert key in u
    assert set(data["estimate"]) == {"duration_s", "lower_bound_s"}
    from stepwise.plan import Plan

    again = Plan.from_json(json.loads(json.dumps(data)))
    assert again.to_json() == data


def _example(name):
    from pathlib import Path

    from stepwise.model import load_deployment

    return load_deployment(Path(__file__).resolve().parents[2] / "examples" / name)


def test_undercloud_upgrade_order_and_database_major_change():
    dep = _example("undercloud.yaml")
    node = dep.nodes[0].name
    db_pkgs = [p for p in dep.catalog["galera"].packages]
    from types import MappingProxyType as MP

    from stepwise.model.facts import Facts, NodeFacts, PackageFact

    def fx(available):
        return Facts(
            MP({node: NodeFacts(MP({p: PackageFact("10.3.1", available) for p in db_pkgs}))}),
            True,
            "<t>",
        )

    plan = verify_plan(make_plan("undercloud-upgrade", dep, fx("10.5.2")), dep)
    steps = [u.step for u in plan.units]
    assert steps == [
        "validate",
        "packages",
        "backup",
        "leave",  # the APIs behind the node's load balancer finish their requests
        "stop",
        "packages",
        "restore",
        "config",
        "start",
        "migrate",
        "start",
        "converge",
        "contract",
        "rejoin",
        "verify",
    ]
    tool, dump, stop = plan.units[1], plan.units[2], plan.units[4]
    assert tool.tags[-1] == "tool" and tool.vars["extra_packages"] == {
        node: list(dep.roles[0].tool_packages)
    }
    assert dump.end_s <= stop.start_s  # the dump is taken while the database still runs
    assert set(stop.stops) == set(
        dep.services_on(node)
    )  # everything stops before any package changes
    assert plan.units[5].vars["all_packages"] == [node]  # then all packages, not only the services'
    db_start, migrate = plan.units[8], plan.units[9]
    assert (
        set(db_start.starts) == {"galera"} and db_start.end_s <= migrate.start_s
    )  # DB syncs need the DB up
    assert set(migrate.services) == {
        s for s in dep.services_on(node) if dep.catalog[s].has_step("upgrade", "migrate")
    }
    # every sync to its end once the new release runs (#36 item 6): not the expand alone
    rest, converge, contract = plan.units[10], plan.units[11], plan.units[12]
    assert rest.end_s <= converge.start_s and converge.end_s <= contract.start_s
    assert set(converge.services) == {"keystone", "glance_api", "nova_conductor"}
    assert set(contract.services) == {"keystone", "glance_api", "neutron_server"}
    assert "mariadb-upgrade" in plan.units[6].why and "restore the dump" not in plan.units[6].why
    # same path for a minor update, without the dump/restore when the major version stays
    minor = make_plan("undercloud-upgrade", dep, fx("10.3.9"))
    assert [u.step for u in minor.units] == [
        "validate",
        "packages",
        "leave",
        "stop",
        "packages",
        "config",
        "start",
        "migrate",
        "start",
        "converge",
        "contract",
        "rejoin",
        "verify",
    ]


def test_management_node_os_upgrade_is_asked_for_and_runs_between_stop_and_packages():
    from stepwise.errors import InputError

    dep = _example("undercloud.yaml")
    plain = make_plan("undercloud-upgrade", dep)
    assert "system_upgrade_run" not in [u.step for u in plain.units]
    plan = verify_plan(
        make_plan(
            "undercloud-upgrade",
            dep,
            variables={"system_upgrade_mode": "in-place", "target_release": "R2"},
        ),
        dep,
    )
    steps = [str(u.step) for u in plan.units]
    assert steps == [
        "validate",
        "repos",
        "packages",
        "backup",
        "leave",
        "stop",
        "system_upgrade_prepare",
        "system_upgrade_run",
        "packages",
        "restore",
        "config",
        "start",
        "migrate",
        "start",
        "converge",
        "contract",
        "rejoin",
        "verify",
    ]
    with pytest.raises(InputError, match="in place"):
        make_plan("undercloud-upgrade", dep, variables={"system_upgrade_mode": "reprovision"})


def test_expand_contract_rolls_expand_first_contract_last_and_offline_keeps_its_window():
    dep = expand_contract_cloud()
    plan = verify_plan(make_plan("upgrade", dep), dep)
    expand = first(plan, lambda u: u.step == "migrate" and "glance" in u.services)
    assert (
        expand.nodes == ("controller-0",) and expand.batch and not expand.batch.startswith("group:")
    )
    new_glance = [u for u in plan.units if "glance" in u.starts]
    assert len(new_glance) == 3 and all(u.end_s >= expand.end_s for u in new_glance)
    assert max_down(plan)["glance"] == 1, "glance rolls: never all down"
    contract = first(plan, lambda u: u.step == "contract")
    converge = first(plan, lambda u: u.step == "converge")
    assert contract.services == ("glance",) and contract.start_s >= converge.end_s
    assert contract.start_s >= max(u.end_s for u in new_glance)
    assert contract.stage == "converge"
    assert [w.service for w in plan.windows] == ["heat"], "only the offline service has a window"
    assert first(plan, lambda u: u.step == "migrate" and "heat" in u.services).batch == "group:heat"


def test_planner_never_makes_a_plan_its_verifier_refuses_for_partial_facts(dep):
    # only the nova packages change (the case: cinder/neutron RPC groups unchanged)
    fx = facts(dep, {n.name: ["pkg-nova_api"] for n in dep.role_of("controller-0").nodes})
    plan = verify_plan(make_plan("upgrade", dep, fx), dep)
    pin = first(plan, lambda u: u.step == "pin_rpc")
    assert set(pin.services) == {"nova_api", "nova_compute"}, (
        "only RPC groups with a changing member are pinned"
    )
    assert plan.params["initial"]["new_code"]["nova_compute"] == [
        n.name for n in dep.role_of("compute-0").nodes
    ]


def test_a_limit_that_splits_an_offline_migration_is_refused(dep):
    with pytest.raises(
        UnsafePlanError, match="--limit upgrades nova_api on some nodes but not on controller-1"
    ):
        make_plan("upgrade", dep, limit="controller-0")


def test_upgrade_visits_a_compute_once_and_says_why_a_controller_is_visited_again():
    from pathlib import Path

    from stepwise.model import load_deployment

    dep = load_deployment(Path(__file__).resolve().parents[2] / "examples" / "composed.yaml")
    plan = verify_plan(make_plan("upgrade", dep), dep)
    visits = visits_per_node(plan)
    computes = [n.name for n in dep.nodes if dep.role_of(n).name == "Compute"]
    # openvswitch (infra) on a compute: nothing in the control plane needs it first, so it
    # rides the compute's data-plane visit with nova_compute and the agents
    assert computes and all(len(visits[n]) == 1 for n in computes), {n: visits[n] for n in computes}
    rolling = [
        u.why
        for u in plan.units
        if u.batch in visits["controller-openstack-0"]
        and u.stops
        and not u.batch.startswith("group:")
    ]  # the offline heat window is not a visit
    assert len(rolling) > 1 and all(
        "controller-openstack-0 is visited again" in w for w in rolling[1:]
    )
