"""The lab comes up healthy, reports its state, and leaves nothing behind when taken down."""

from __future__ import annotations

import os
import signal
import subprocess
import time

import pytest

from stepwise.lab import control
from stepwise.processes import pid_alive

pytestmark = pytest.mark.lab


def lab_processes(lab) -> list[int]:
    return control.lab_pids(lab)


def listening(prefix: str) -> bool:
    out = subprocess.run(["ss", "-ltnH"], capture_output=True, text=True).stdout
    return prefix in out


def test_up_status_commands_down(lab, node):
    st = control.status(lab)
    assert {n["os_major"] for n in st["nodes"]} == {8}
    assert all(s["healthy"] and s["version"] for n in st["nodes"] for s in n["services"])
    assert all(w["healthy"] for w in st["workloads"])
    ctrl = node("ctrl-0")
    assert "openstack-nova-api 1.0.0" in ctrl.run("dnf list installed openstack-nova-api").stdout
    r = ctrl.run("dnf check-update", check=False)
    assert r.returncode == 100 and "openstack-nova-api 1.1.0 openstack-R1-updates-el8" in r.stdout
    assert ctrl.run("systemctl is-active nova_api").stdout.strip() == "active"
    # the unit its package ships (the catalog's `unit:`) names the same service
    assert ctrl.run("systemctl is-active openstack-nova-api.service").stdout.strip() == "active"
    assert (
        "Unit openstack-nova-compute.service could not be found"
        in ctrl.run("systemctl status openstack-nova-compute", check=False).stderr
    )
    assert ctrl.run("systemctl is-active nope", check=False).returncode != 0
    ctrl.run("crudini --set /etc/nova_api/nova_api.conf DEFAULT debug true")
    assert (
        ctrl.run("crudini --get /etc/nova_api/nova_api.conf DEFAULT debug").stdout.strip() == "true"
    )
    assert (lab.node_root("ctrl-0") / "etc/nova_api/nova_api.conf").read_text().count(
        "debug = true"
    ) == 1
    assert ctrl.run("nova-manage db version").stdout.strip() == "1"
    assert "HEALTH_OK" in ctrl.run("ceph health").stdout
    ctrl.run("pcs status")
    # a reboot is done when the node answers, its units still starting; a start then joins the
    # start in progress, as systemd's job does: the cluster runs here once it returns
    ctrl.run("reboot")
    ctrl.run("systemctl start pacemaker")
    ctrl.run("pcs node unstandby ctrl-0")
    prefix = f"127.{100 + lab.index}."
    assert listening(prefix)
    control.down(lab.dir)
    assert lab_processes(lab) == []
    assert not listening(prefix)


def test_down_after_supervisor_crash(lab):
    sup = int(lab.supervisor_pid_file.read_text())
    before = lab_processes(lab)
    assert len(before) > 10
    os.kill(sup, signal.SIGKILL)
    time.sleep(0.3)
    assert not lab.supervisor_alive()
    control.down(lab.dir)
    assert not [p for p in before if pid_alive(p)]
    assert not listening(f"127.{100 + lab.index}.")


def test_two_labs_do_not_collide(make_lab):
    a = make_lab("tiny.yaml")
    b = make_lab("tiny.yaml")
    assert a.index != b.index
    assert a.spec.vip != b.spec.vip
    assert all(w["healthy"] for w in control.status(b)["workloads"])
