"""Rendering units into plays (no Ansible run)."""

from __future__ import annotations

from pathlib import Path

from stepwise.model import load_deployment
from stepwise.plan.units import Plan, Unit
from stepwise.run.render import inventory, render_unit

from conftest import write_cloud


def test_unit_play_runs_each_services_tasks_on_its_nodes(tmp_path: Path):
    dep = load_deployment(write_cloud(tmp_path, computes=2))
    u = Unit("u", "start", ("ctl-0", "cmp-0"), ("api", "worker"),
             work={"ctl-0": ("api",), "cmp-0": ("worker",)})
    play = render_unit(Plan("update", dep.name, (u,)), u, dep)
    assert play["name"] == "u" and play["hosts"] == "ctl-0,cmp-0" and play["any_errors_fatal"]
    blocks = {b["name"]: b for b in play["tasks"]}
    assert blocks["api"]["when"] == "inventory_hostname in ['ctl-0']"
    assert all(t["name"].startswith("worker | ") for t in blocks["worker"]["block"])


def test_defaults_health_checks_and_once_only_guard(tmp_path: Path):
    dep = load_deployment(write_cloud(tmp_path, computes=1))
    plan = Plan("update", dep.name, ())
    verify = render_unit(plan, Unit("v", "verify", ("ctl-0",), ("api",)), dep)
    names = [t["name"] for b in verify["tasks"] for t in b["block"]]
    assert "api | health command" in names
    assert render_unit(plan, Unit("g", "gate", (), ()), dep) is None
    xfer = Unit("x", "system_upgrade_transfer_data", ("cmp-0",), ("worker",), idempotent=False)
    play = render_unit(Plan("system-upgrade", dep.name, (xfer,)), xfer, dep, run_id=7)
    assert "runs at most once" in play["tasks"][0]["name"] and "run=7 unit=x" in play["tasks"][0]["ansible.builtin.shell"]
    assert "mark system_upgrade_transfer_data done" in play["tasks"][-1]["name"]
    exported = render_unit(Plan("system-upgrade", dep.name, (xfer,)), xfer, dep, for_export=True)
    assert "never" in exported["tags"]
    repos = render_unit(plan, Unit("r", "repos", ("ctl-0",), ()), dep)
    assert "target_release" in repos["tasks"][0]["ansible.builtin.command"]


def test_inventory_groups_roles_and_merges_overrides(tmp_path: Path):
    dep = load_deployment(write_cloud(tmp_path, computes=1))
    inv = inventory(dep, overrides={"all": {"children": {"x": {"hosts": {"cmp-0": {"ansible_host": "10.0.0.5"}}}}}})
    cmp0 = inv["all"]["children"]["Compute"]["hosts"]["cmp-0"]
    assert cmp0["ansible_host"] == "10.0.0.5" and cmp0["stepwise_node_address"] == "10.0.0.5"
    assert "ctl-0" in inv["all"]["children"]["Controller"]["hosts"]
