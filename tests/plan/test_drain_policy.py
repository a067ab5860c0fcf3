"""The deployment's drain policy: validated, passed to the compute's leave as data, and the
workload windows the plan announces for computes whose instances may stop in place."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from stepwise.errors import InputError
from stepwise.model import load_deployment
from stepwise.model.choices import DrainPolicy
from stepwise.model.facts import load_facts
from stepwise.model.vocab import Step, Workflow
from stepwise.plan import selection_for
from stepwise.run.inventory import plan_vars
from stepwise.verify import plan_verified

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def _deployment(tmp_path: Path, policy: str | None, computes: int = 2) -> Path:
    """examples/classic.yaml with a drain policy and `computes` computes."""
    text = (EXAMPLES / "classic.yaml").read_text()
    text = text.replace("{count: 2, name:", f"{{count: {computes}, name:")
    if policy is not None:
        text = text.replace("\nroles:\n", f"\ndrain_policy: {policy}\nroles:\n", 1)
    text = text.replace("\nroles:\n", f"\ncatalog: {EXAMPLES / 'catalog'}\nroles:\n", 1)
    path = tmp_path / "cloud.yaml"
    path.write_text(text)
    return path


def _facts(dep, name: str = "minor-update.yaml"):
    """An example's facts, without the nodes this deployment does not have."""
    text = (EXAMPLES / "facts" / name).read_text()
    if "compute-1" not in dep.node_by_name:
        text = text.replace("  compute-1: *compute\n", "")
    path = Path(dep.path).parent / name
    path.write_text(text)
    return load_facts(path, dep)


def _plan(path: Path, workflow: Workflow = Workflow.UPDATE, preview: bool = False):
    dep = load_deployment(path)
    sel = selection_for(workflow)
    return dep, plan_verified(workflow, dep, _facts(dep), sel, runnable=False, preview=preview)


def _workload_windows(plan) -> dict[str, tuple[float, float, str]]:
    return {
        w.service: (w.start_s, w.end_s, w.why)
        for w in plan.windows
        if w.service.startswith("workloads@")
    }


def test_the_default_policy_is_refuse_and_announces_no_workload_window(tmp_path):
    dep, plan = _plan(_deployment(tmp_path, None))
    assert dep.drain_policy is DrainPolicy.REFUSE
    assert _workload_windows(plan) == {}
    assert plan_vars(plan, dep)["stepwise_drain_policy"] == "refuse"


def test_cold_migrate_moves_instances_so_it_announces_no_workload_window(tmp_path):
    dep, plan = _plan(_deployment(tmp_path, "cold-migrate"))
    assert dep.drain_policy is DrainPolicy.COLD_MIGRATE
    assert _workload_windows(plan) == {}
    assert plan_vars(plan, dep)["stepwise_drain_policy"] == "cold-migrate"


def test_stop_in_place_announces_each_computes_window_from_leave_to_rejoin(tmp_path):
    dep, plan = _plan(_deployment(tmp_path, "stop-in-place"))
    windows = _workload_windows(plan)
    assert set(windows) == {"workloads@compute-0", "workloads@compute-1"}
    for node in ("compute-0", "compute-1"):
        leave = next(u for u in plan.units if u.step is Step.LEAVE and node in u.nodes)
        rejoin = next(u for u in plan.units if u.step is Step.REJOIN and node in u.nodes)
        start, end, why = windows[f"workloads@{node}"]
        assert (start, end) == (leave.start_s, rejoin.end_s)
        assert "stop-in-place" in why and node in why
    # the computes are drained one at a time: their windows do not overlap
    (a0, a1, _), (b0, b1, _) = sorted(windows.values())
    assert a1 <= b0
    assert plan_vars(plan, dep)["stepwise_drain_policy"] == "stop-in-place"
    # the services' windows are what they were: the policy adds windows, it changes no unit
    _, refuse = _plan(_deployment(tmp_path, "refuse"))
    assert [u.id for u in refuse.units] == [u.id for u in plan.units]
    assert [w for w in plan.windows if not w.service.startswith("workloads@")] == list(
        refuse.windows
    )


def test_one_compute_shows_its_workloads_downtime_instead_of_a_drain(tmp_path):
    """Nowhere to move an instance: whatever the policy, the leave stops them in place and the
    plan announces the window."""
    dep, plan = _plan(_deployment(tmp_path, "refuse", computes=1))
    windows = _workload_windows(plan)
    assert list(windows) == ["workloads@compute-0"]
    assert "the only compute" in windows["workloads@compute-0"][2]
    assert plan_vars(plan, dep)["stepwise_drain_policy"] == "stop-in-place"


def test_the_os_upgrade_announces_the_window_from_prepare_to_cleanup(tmp_path):
    _, plan = _plan(_deployment(tmp_path, "stop-in-place"), Workflow.SYSTEM_UPGRADE, True)
    windows = _workload_windows(plan)
    assert set(windows) == {"workloads@compute-0", "workloads@compute-1"}
    for start, end, _ in windows.values():
        assert start < end


def test_an_unknown_policy_names_the_file_line_and_the_choices(tmp_path):
    with pytest.raises(InputError) as exc:
        load_deployment(_deployment(tmp_path, "evacuate"))
    text = str(exc.value)
    assert re.search(r"cloud\.yaml:\d+: drain_policy", text), text
    for choice in ("refuse", "cold-migrate", "stop-in-place"):
        assert choice in text


def _names(tasks) -> list[str]:
    return [t["name"] for t in tasks]


@pytest.mark.parametrize(
    "section,step",
    [("update", "leave"), ("upgrade", "leave"), ("system_upgrade", "prepare")],
)
def test_the_compute_leave_waits_applies_the_policy_then_waits_until_empty(section, step):
    from stepwise.model.catalog import load_catalog
    from stepwise.model.vocab import catalog_key

    svc = load_catalog()["nova_compute"]
    tasks = (svc.system_upgrade if section == "system_upgrade" else svc.tasks[section])[
        catalog_key(step)
    ]
    names = _names(tasks)
    at = {n: i for i, n in enumerate(names)}
    migrating = next(i for n, i in at.items() if "is live-migrating or busy" in n)
    refuse = next(i for n, i in at.items() if n.startswith("Refuse"))
    cold = next(i for n, i in at.items() if n.startswith("Cold-migrate"))
    stop_in_place = next(i for n, i in at.items() if n.startswith("Stop in place"))
    empty = next(i for n, i in at.items() if "runs no instance" in n)
    assert migrating < refuse < cold < stop_in_place < empty
    assert tasks[refuse]["when"].endswith("stepwise_drain_policy == 'refuse'")
    # nothing stops the service before the node is empty
    stops = [i for i, t in enumerate(tasks) if "systemctl stop" in str(t)]
    assert all(i > empty for i in stops)


def test_the_l3_agent_moves_its_routers_before_it_stops_and_takes_them_back():
    from stepwise.model.catalog import load_catalog
    from stepwise.model.vocab import Step, SystemUpgradeKey

    svc = load_catalog()["neutron_l3_agent"]
    for section in ("update", "upgrade"):
        leave = _names(svc.tasks[section][Step.LEAVE])
        assert any("Move the routers off" in n for n in leave)
        assert "active on another node" in leave[-1]
        rejoin = _names(svc.tasks[section][Step.REJOIN])
        assert any("Take the routers back" in n for n in rejoin)
    prepare = svc.system_upgrade[SystemUpgradeKey.PREPARE]
    names = _names(prepare)
    wait = next(i for i, n in enumerate(names) if "active on another node" in n)
    assert all(i > wait for i, t in enumerate(prepare) if "systemctl stop" in str(t))
    assert any(
        "Take the routers back" in n for n in _names(svc.system_upgrade[SystemUpgradeKey.CLEANUP])
    )
