"""Ansible (through ansible-runner) runs node commands on every lab node via the shipped
connection."""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.lab

PLAYBOOK = [
    {
        "hosts": "all",
        "gather_facts": False,
        "tasks": [
            {
                "name": "packages",
                "command": "dnf list installed",
                "register": "pk",
                "changed_when": False,
            },
            {
                "name": "config",
                "command": "crudini --set /etc/stepwise-test.conf DEFAULT node "
                "{{ inventory_hostname }}",
            },
            {
                "name": "read back",
                "command": "crudini --get /etc/stepwise-test.conf DEFAULT node",
                "register": "got",
            },
            {
                "name": "check",
                "assert": {"that": ["got.stdout == inventory_hostname", "'kernel' in pk.stdout"]},
            },
            {
                # pcs cluster node add runs on a member of the cluster (the catalog's join)
                "name": "delegated",
                "command": "crudini --set /etc/stepwise-delegated.conf DEFAULT from "
                "{{ inventory_hostname }}",
                "delegate_to": "ctl-0",
                "when": "inventory_hostname == 'cpt-0'",
            },
        ],
    }
]


def test_playbook_on_every_node(make_lab, tmp_path, monkeypatch):
    import os
    import sys

    import ansible_runner

    # ansible-runner looks ansible-playbook up on PATH: the one next to this interpreter.
    monkeypatch.setenv(
        "PATH", os.path.dirname(sys.executable) + os.pathsep + os.environ.get("PATH", "")
    )

    from stepwise.lab import connector

    lab = make_lab("tiny.yaml", workloads_per_compute=0)
    conn = connector(lab.dir)
    (tmp_path / "runner").mkdir()
    r = ansible_runner.run(
        private_data_dir=str(tmp_path / "runner"),
        playbook=PLAYBOOK,
        inventory={"all": {"hosts": {h: dict(v) for h, v in conn.host_vars.items()}}},
        envvars={
            "ANSIBLE_CONNECTION_PLUGINS": os.pathsep.join(conn.plugin_dirs),
            "ANSIBLE_PIPELINING": "True",
            "ANSIBLE_HOST_KEY_CHECKING": "False",
        },
        quiet=True,
    )
    assert r.status == "successful", r.stdout.read()
    assert set(r.stats["ok"]) == set(lab.nodes())
    for n in lab.nodes():
        assert f"node = {n}" in (lab.node_root(n) / "etc/stepwise-test.conf").read_text()
    # a delegated task runs on the node it was delegated to, for the host it was run for
    assert "from = cpt-0" in (lab.node_root("ctl-0") / "etc/stepwise-delegated.conf").read_text()
    assert not (lab.node_root("cpt-0") / "etc/stepwise-delegated.conf").exists()


def _module_play(name: str, state: str) -> dict:
    return {
        "name": f"{state} keystone",
        "ansible.builtin.systemd_service": {"name": name, "state": state},
        "register": f"keystone_{state}",
    }


SYSTEMD_PLAYBOOK = [
    {
        "hosts": "ctl-0",
        "gather_facts": False,
        "tasks": [
            _module_play("keystone", "stopped"),
            {
                "name": "stopped twice",
                "ansible.builtin.systemd_service": {"name": "keystone", "state": "stopped"},
                "register": "again",
            },
            {
                "name": "is down",
                "ansible.builtin.command": "systemctl status keystone",
                "register": "down",
                "failed_when": "down.rc != 3",
                "changed_when": False,
            },
            _module_play("keystone", "started"),
            {
                "name": "unknown unit",
                "ansible.builtin.systemd_service": {"name": "nope", "state": "started"},
                "register": "nope",
                "ignore_errors": True,
            },
            {
                "name": "check",
                "ansible.builtin.assert": {
                    "that": [
                        "keystone_stopped is changed",
                        "again is not changed",
                        "keystone_started is changed",
                        "keystone_started.status.ActiveState == 'inactive'",
                        "nope is failed",
                    ]
                },
            },
        ],
    }
]


def test_systemd_service_module_stops_and_starts_lab_units(make_lab, tmp_path, monkeypatch):
    """The catalog's `ansible.builtin.systemd_service` tasks act on a lab node: the module
    reads `systemctl show` (answered by the lab) and runs `systemctl stop/start` only when the
    unit is not in the wanted state (so a second stop reports no change)."""
    import os
    import sys

    import ansible_runner

    monkeypatch.setenv(
        "PATH", os.path.dirname(sys.executable) + os.pathsep + os.environ.get("PATH", "")
    )
    from stepwise.lab import connector
    from stepwise.lab.nodecmd_base import unit_state

    lab = make_lab("tiny.yaml", workloads_per_compute=0)
    conn = connector(lab.dir)
    (tmp_path / "runner").mkdir()
    r = ansible_runner.run(
        private_data_dir=str(tmp_path / "runner"),
        playbook=SYSTEMD_PLAYBOOK,
        inventory={"all": {"hosts": {h: dict(v) for h, v in conn.host_vars.items()}}},
        envvars={
            "ANSIBLE_CONNECTION_PLUGINS": os.pathsep.join(conn.plugin_dirs),
            "ANSIBLE_PIPELINING": "True",
        },
        quiet=True,
    )
    assert r.status == "successful", r.stdout.read()
    assert unit_state(lab, "ctl-0", "keystone") == "active"
