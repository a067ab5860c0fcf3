"""The connection contract: what a connector may provide per node (`NodeAccess`), the lab's
connector that provides all of it, and the run layer reading it only through the contract."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
from conftest import write_cloud

from stepwise.model import load_deployment
from stepwise.model.choices import UpgradeMode
from stepwise.model.connection import Connector, NodeAccess
from stepwise.model.vocab import NodeWork, Step, Workflow
from stepwise.plan.units import Plan, Unit
from stepwise.run import node_work
from stepwise.run.ansible_files import to_yaml
from stepwise.run.inventory import inventory
from stepwise.run.render import render_unit
from tests.lab_json import lab_json

ROOT = Path(__file__).resolve().parents[2]


def test_every_field_names_its_host_variable_its_meaning_and_round_trips():
    names = NodeAccess.names()
    assert names == (
        "flag_dir",
        "os_release",
        "reboot_command",
        "reprovision_command",
        "node_root",
    )
    variables = [NodeAccess.var(n) for n in names]
    assert len(set(variables)) == len(names)
    assert all(v == "stepwise_" + n for v, n in zip(variables, names, strict=True))
    assert all(NodeAccess.meaning(n) for n in names)
    assert NodeAccess.real_default("flag_dir") == "/var/lib/stepwise/flags"
    assert NodeAccess.real_default("os_release") == "/etc/os-release"
    assert NodeAccess.real_default("node_root") == ""
    assert NodeAccess.real_default("reboot_command") is None
    with pytest.raises(KeyError):
        NodeAccess.var("nothing")
    access = NodeAccess(flag_dir="/f", reboot_command="reboot")
    assert access.host_vars() == {"stepwise_flag_dir": "/f", "stepwise_reboot_command": "reboot"}
    assert NodeAccess.from_host_vars({**access.host_vars(), "ansible_port": 22}) == access
    assert NodeAccess().host_vars() == {}


def test_a_connector_tells_what_it_provides_per_node():
    conn = Connector.from_inventory(
        {"all": {"vars": {"stepwise_reboot_command": "reboot"}, "hosts": {"n1": {}}}}
    )
    assert conn.access("n1") == NodeAccess(reboot_command="reboot")
    assert conn.access("elsewhere") == NodeAccess()


def test_the_lab_connector_provides_the_whole_contract(tmp_path: Path):
    import stepwise.lab as lab

    nodes = {
        "ctl-0": {"role": "Controller", "address": "127.1.0.1"},
        "cmp-0": {"role": "Compute", "address": "127.1.0.2"},
        "ctl-1": {"role": "Controller", "address": "127.1.0.3"},
    }
    (tmp_path / "lab.json").write_text(lab_json(nodes))
    conn = lab.connector(tmp_path)
    assert conn.name == "lab" and conn.plugin_dirs == (lab.ansible_plugin_dir(),)
    assert list(conn.host_vars) == ["ctl-0", "ctl-1", "cmp-0"]  # by role, as an inventory
    root = tmp_path.resolve() / "nodes" / "ctl-0" / "root"
    assert conn.access("ctl-0") == NodeAccess(
        flag_dir=str(root / "var/lib/stepwise/flags"),
        os_release=str(root / "etc/os-release"),
        reboot_command="reboot",
        reprovision_command="reprovision",
        node_root=str(root),
    )
    hv = conn.host_vars["cmp-0"]
    assert hv["ansible_connection"] == "stepwise_lab" and hv["ansible_host"] == "127.1.0.2"


def _os_upgrade_plays(tmp_path: Path, mode: UpgradeMode) -> str:
    dep = load_deployment(write_cloud(tmp_path, computes=1))
    units = [
        Unit(str(s), s, ("cmp-0",), (), idempotent=s.info.node_work is not NodeWork.UPGRADE_OS)
        for s in (
            Step.SYSTEM_UPGRADE_PREPARE,
            Step.SYSTEM_UPGRADE_RUN,
            Step.SYSTEM_UPGRADE_CLEANUP,
            Step.REBOOT,
        )
    ]
    plan = Plan(
        Workflow.SYSTEM_UPGRADE, dep.name, tuple(units), params={"system_upgrade_mode": mode}
    )
    return to_yaml([render_unit(plan, u, dep) for u in units])


def test_plays_read_each_field_with_its_real_node_default(tmp_path: Path):
    text = _os_upgrade_plays(tmp_path / "a", UpgradeMode.IN_PLACE)
    text += _os_upgrade_plays(tmp_path / "b", UpgradeMode.REPROVISION)
    for name in NodeAccess.names():
        default = NodeAccess.real_default(name)
        if default is None:
            # no default on a real node: the play says what it does without one
            assert f"{NodeAccess.var(name)}" in text
        else:
            assert f"{NodeAccess.var(name)} | default('{default}')" in text


def test_the_inventory_carries_what_the_connector_provides(tmp_path: Path):
    dep = load_deployment(write_cloud(tmp_path, computes=1))
    access = NodeAccess(flag_dir="/lab/flags", node_root="/lab")
    conn = Connector("test", {"cmp-0": access.host_vars()})
    hosts = inventory(dep, conn)["all"]["children"]["Compute"]["hosts"]
    assert NodeAccess.from_host_vars(hosts["cmp-0"]) == access


def test_every_kind_of_node_work_renders():
    assert set(node_work._NODE_WORK) == set(NodeWork)


def test_only_the_contract_names_its_host_variables():
    """Adding a connection type touches the connector, nothing in run: the run layer reads
    the contract's values through `NodeAccess`, never by their variable names."""
    names = {NodeAccess.var(n) for n in NodeAccess.names()}
    found = []
    for path in (ROOT / "stepwise").rglob("*.py"):
        if path.name == "connection.py" and path.parent.name == "model":
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Constant) and isinstance(node.value, str):
                found += [
                    f"{path.relative_to(ROOT)}:{node.lineno} {v}" for v in names if v in node.value
                ]
    assert found == []
