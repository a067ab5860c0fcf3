"""Each failure mode of the seeds: the naive procedure breaks the lab, the correct one (done by
hand with node commands) does not; the probe measures it."""

from __future__ import annotations

import json
import time

import pytest

from stepwise.lab import haproxy
from stepwise.lab.faults import inject
from stepwise.lab.probe import Probe, failed
from tests.lab.helpers import health, wait_for

pytestmark = pytest.mark.lab
CTRLS = ("ctrl-0", "ctrl-1", "ctrl-2")
SAFE_TO_BOOTSTRAP = (
    "sed -i 's/^safe_to_bootstrap: *0/safe_to_bootstrap: 1/' /var/lib/mysql/grastate.dat"
)


def settle(lab, seconds: float = 1.0) -> None:
    time.sleep(seconds)  # let HAProxy's checks (300 ms) see the current state


def test_minor_update_naive_all_at_once_vs_rolling(lab, node):
    pkgs = "openstack-keystone openstack-nova-api"
    with Probe(lab, rate=10) as p:
        import threading

        ts = [threading.Thread(target=node(n).run, args=(f"dnf -y update {pkgs}",)) for n in CTRLS]
        [t.start() for t in ts]
        [t.join() for t in ts]
        settle(lab, 1.5)
    naive = p.stop()
    assert failed(naive, "vip:keystone") or failed(naive, "vip:nova_api"), naive
    assert health(lab, "ctrl-0", "keystone")["version"] == "1.1.0"

    # The right way (to R2 here: a major needs config, so it is the harder case): one node at a
    # time, out of the balancer, stop, update, config, start, back in.
    for n in CTRLS:
        node(n).run("tripleo-repos R2")
    keystone = f"{haproxy.backend(lab.service('keystone'), 'keystone')}/"
    with Probe(lab, rate=10) as p2:
        for n in CTRLS:
            c = node(n)
            haproxy.command(lab, f"set server {keystone}{n} state drain")  # the catalog's leave
            c.run("pcs node standby")
            assert set(haproxy.admin_states(lab, n).values()) == {"maint"}
            settle(lab, 0.5)
            c.run("systemctl stop keystone")
            c.run("dnf -y update openstack-keystone")
            c.run("os-apply-config")
            if n == "ctrl-0":
                c.run("keystone-manage db sync")  # expand/contract: old keystones keep working
            c.run("systemctl start keystone")
            wait_for(lambda c=c: c.run("healthcheck keystone", check=False).returncode == 0)
            c.run("pcs node unstandby")
            # leaving standby gives back what standby took, not what the leave drained: the
            # keystone rejoin puts its server back once keystone answers
            states = haproxy.admin_states(lab, n)
            assert states.pop(keystone + n) == "drain", states
            assert set(states.values()) == {"ready"}, states
            haproxy.command(lab, f"set server {keystone}{n} state ready")
            settle(lab, 0.8)
    rolling = p2.stop()
    assert not failed(rolling, "vip:"), rolling
    assert {health(lab, n, "keystone")["version"] for n in CTRLS} == {"2.0.0"}


def test_major_upgrade_restart_loop_and_schema(lab, node):
    c0 = node("ctrl-0")
    c0.run("tripleo-repos R2")
    # Naive: update the package of a running service: it restarts on its old config and loops.
    c0.run("dnf -y update openstack-nova-api")
    wait_for(lambda: health(lab, "ctrl-0", "nova_api")["restarts"] >= 2)
    h = health(lab, "ctrl-0", "nova_api")
    assert not h["healthy"] and h["version"] == "2.0.0"
    assert "configuration is for 'R1'" in (lab.log_dir / "ctrl-0" / "nova_api.log").read_text()
    # Config applied: new code still refuses the old schema.
    c0.run("os-apply-config --service nova_api")
    time.sleep(2.5)
    assert "schema version 1 is older" in (lab.log_dir / "ctrl-0" / "nova_api.log").read_text()
    assert not health(lab, "ctrl-0", "nova_api")["healthy"]
    # Schema synced while old nova_api (no expand/contract) still runs elsewhere: they break.
    c0.run("nova-manage db sync")
    wait_for(lambda: health(lab, "ctrl-0", "nova_api")["healthy"])
    h1 = wait_for(
        lambda: (lambda h: h if not h["healthy"] else None)(health(lab, "ctrl-1", "nova_api"))
    )
    assert "newer than code" in h1["health"]
    # Keystone does expand/contract: old code keeps working on the new schema.
    c0.run("systemctl stop keystone")
    c0.run("dnf -y update openstack-keystone")
    c0.run("os-apply-config --service keystone")
    c0.run("keystone-manage db sync")
    c0.run("systemctl start keystone")
    assert health(lab, "ctrl-1", "keystone")["healthy"]
    assert health(lab, "ctrl-0", "keystone")["version"] == "2.0.0"

    # The correct way for the rest: stop on all, packages, config, then start.
    for n in ("ctrl-1", "ctrl-2"):
        c = node(n)
        c.run("systemctl stop nova_api")
        c.run("tripleo-repos R2")
        c.run("dnf -y update openstack-nova-api")
        c.run("os-apply-config --service nova_api")
        c.run("systemctl start nova_api")
    settle(lab)
    assert all(health(lab, n, "nova_api")["healthy"] for n in CTRLS)
    # Contracting keystone's schema while old keystones still run (ctrl-1, ctrl-2) breaks
    # them: the contract belongs after the last old instance is gone.
    assert health(lab, "ctrl-1", "keystone")["healthy"]
    c0.run("keystone-manage db_sync --contract")
    h = wait_for(
        lambda: (lambda h: h if not h["healthy"] else None)(health(lab, "ctrl-1", "keystone"))
    )
    assert "contracted" in h["health"]
    assert health(lab, "ctrl-0", "keystone")["healthy"], "new code runs on the contracted schema"


def test_rpc_pinning(lab, node):
    for n in CTRLS:
        c = node(n)
        c.run("systemctl stop nova_api nova_conductor")
        c.run("tripleo-repos R2")
        c.run("dnf -y update openstack-nova-api openstack-nova-conductor")
        c.run("os-apply-config")
    node("ctrl-0").run("nova-manage db sync")
    for n in CTRLS:
        node(n).run("systemctl start nova_api nova_conductor")
    # Naive: new conductors talk unpinned RPC to the old computes.
    h = wait_for(
        lambda: (lambda h: h if not h["healthy"] else None)(health(lab, "ctrl-0", "nova_conductor"))
    )
    assert "not pinned" in h["health"]
    assert not health(lab, "cmp-0", "nova_compute")["healthy"]
    # Pinned as nova is (`auto`: the oldest running peer's version, asked on reload): works.
    for n in CTRLS:
        node(n).run("crudini --set /etc/nova/nova.conf upgrade_levels compute auto")
        node(n).run("systemctl reload nova_conductor")
    wait_for(
        lambda: (
            health(lab, "cmp-0", "nova_compute")["healthy"]
            and health(lab, "ctrl-2", "nova_conductor")["healthy"]
        )
    )
    # Upgrade the computes, then lift the pins: no old peer remains.
    for n in ("cmp-0", "cmp-1"):
        c = node(n)
        c.run("nova host-evacuate-live " + n)
        c.run("systemctl stop nova_compute")
        c.run("tripleo-repos R2")
        c.run("dnf -y update openstack-nova-compute")
        c.run("os-apply-config")
        c.run("systemctl start nova_compute")
    for n in CTRLS:
        node(n).run("crudini --del /etc/nova/nova.conf upgrade_levels compute")
        node(n).run("systemctl reload nova_conductor")
    settle(lab)
    assert all(health(lab, n, "nova_conductor")["healthy"] for n in CTRLS)
    assert health(lab, "cmp-1", "nova_compute")["healthy"]


def test_quorum_loss_and_mixed_os_cluster(lab, node):
    # Losing two of three members (crash): no quorum, the database VIP stops serving.
    with Probe(lab, rate=10) as p:
        inject(lab, "crash", "ctrl-1")
        inject(lab, "crash", "ctrl-2")
        # Galera declares crashed members gone after evs.suspect_timeout (5 s): then the
        # survivor is non-primary and its clustercheck takes it out of the VIP.
        settle(lab, 8)
    assert failed(p.stop(), "vip:galera")
    assert node("ctrl-0").run("pcs status", check=False).returncode == 1
    inject(lab, "recover", "ctrl-1")
    inject(lab, "recover", "ctrl-2")
    wait_for(lambda: node("ctrl-0").run("pcs status", check=False).returncode == 0)

    # Naive rolling OS upgrade: an OS 9 member joins the OS 8 cluster -> it cannot form.
    c0 = node("ctrl-0")
    c0.run("tripleo-repos R2")
    c0.run("leapp upgrade")
    c0.run("reboot")
    assert lab.os_major("ctrl-0") == 9
    assert (
        health(lab, "ctrl-0", "pacemaker")["state"] == "inactive"
    )  # nothing runs after the upgrade
    c0.run("os-apply-config")  # packages are R2 now: the R2 configuration
    # Its corosync (OS 9) cannot start with the configuration of the OS 8 cluster.
    r = c0.run("pcs cluster start", check=False)
    assert r.returncode == 1 and "configuration written on OS 8" in r.stdout, r
    node("ctrl-1").run("pcs status")  # the old cluster is untouched
    # A new cluster of its own beside the running one is refused by pcs (still configured).
    r = c0.run("pcs cluster setup tripleo_cluster ctrl-0 --start", check=False)
    assert r.returncode == 1 and "in a cluster already" in r.stderr, r
    # Correct (the seed's one-by-one): old members leave, the new node forms a cluster alone
    # (the catalog's form_cluster), and the next new-OS node is added from it (join_cluster).
    for n in ("ctrl-1", "ctrl-2"):
        node(n).run("pcs cluster stop")
    c0.run("pcs cluster destroy")
    c0.run("pcs cluster setup tripleo_cluster ctrl-0 --start --wait")
    assert "Online: [ ctrl-0 ]" in c0.run("pcs status").stdout
    c1 = node("ctrl-1")
    for cmd in ("tripleo-repos R2", "leapp upgrade", "reboot", "os-apply-config"):
        c1.run(cmd)
    r = c0.run("pcs cluster node add ctrl-1 --start", check=False)
    assert r.returncode == 1 and "in a cluster already" in r.stderr, r
    c1.run("pcs cluster destroy")
    r = c1.run("pcs cluster node add ctrl-1 --start", check=False)  # only from a member
    assert r.returncode == 1 and "not running here" in r.stderr, r
    c0.run("pcs cluster node add ctrl-1 --start --wait")
    assert "Online: [ ctrl-0 ctrl-1 ]" in c0.run("pcs status").stdout


def test_service_that_fails_to_stop_blocks_the_new_one(lab, node):
    c0 = node("ctrl-0")
    inject(lab, "hang-stop", "ctrl-0", "keystone")
    r = c0.run("systemctl stop keystone", check=False)
    assert r.returncode != 0 and "timeout" in r.stderr
    c0.run("dnf -y update openstack-keystone")  # the restart cannot replace the hung process
    time.sleep(1.5)
    assert health(lab, "ctrl-0", "keystone")["state"].startswith("deactivating")
    # The old code still runs although the new package is installed: the upgrade did not happen.
    served = json.loads(c0.run("healthcheck keystone").stdout)
    assert served["version"] == "1.0.0"
    assert "openstack-keystone 1.1.0" in c0.run("dnf list installed openstack-keystone").stdout
    # Correct: make sure it is gone (kill), then start the new version.
    c0.run("systemctl kill keystone")
    c0.run("systemctl start keystone")
    h = wait_for(lambda: (lambda h: h if h["healthy"] else None)(health(lab, "ctrl-0", "keystone")))
    assert h["version"] == "1.1.0"


def test_reboot_kills_workloads_not_moved(lab, node):
    with Probe(lab, rate=10) as p:
        node("cmp-0").run("reboot")
        settle(lab)
    naive = p.stop()
    assert failed(naive, "workload:vm-0")
    assert lab.read_state("_lab", "workloads.json")["vm-0"]["state"] == "lost"
    # Correct: move the workloads away, wait until they moved (live migration completes
    # asynchronously, as nova's does), then reboot. The rebooted cmp-0 is where they go: its
    # compute service is up first (a reboot ends with its units still starting; a loaded CI
    # machine took over the second above to start it, and nova found no valid host)
    wait_for(
        lambda: node("cmp-0").run("systemctl is-active nova_compute", check=False).returncode == 0
    )
    with Probe(lab, rate=10) as p:
        node("cmp-1").run("nova host-evacuate-live cmp-1")
        listing = "openstack server list --all-projects --host cmp-1 -f value -c Name"
        assert node("cmp-1").run(listing).stdout.strip() == "vm-1"  # still there: MIGRATING
        wait_for(lambda: node("cmp-1").run(listing).stdout.strip() == "")
        node("cmp-1").run("reboot")
        settle(lab)
    moved = p.stop()
    assert not failed(moved, "workload:vm-1"), moved
    vm1 = lab.read_state("_lab", "workloads.json")["vm-1"]
    assert (vm1["host"], vm1["state"]) == ("cmp-0", "running")


def test_data_transfer_twice_destroys_newer_data(lab, node):
    """The seed's once-only transfer: a second copy of the old datadir after the new node has
    served overwrites what it wrote since (stepwise's flag refuses that copy: e2e OS upgrade)."""
    c0 = node("ctrl-0")
    copy = "rsync -a --delete ctrl-1:/var/lib/mysql/ /var/lib/mysql/"
    for n in CTRLS:
        node(n).run("systemctl stop keystone nova_api nova_conductor galera")
    c0.run(copy)
    # every member stopped cleanly: a start alone forms no cluster, a new one is bootstrapped
    # (the catalog's form_cluster), and only from a datadir marked safe to bootstrap from
    r = c0.run("systemctl start galera", check=False)
    assert r.returncode != 0 and "Galera forms no cluster by itself" in r.stdout + r.stderr, r
    r = c0.run("galera_new_cluster", check=False)  # ctrl-1 was not the last to stop
    assert r.returncode == 1, r
    c0.run(SAFE_TO_BOOTSTRAP)  # as the catalog's form_cluster does
    c0.run("galera_new_cluster")
    c0.run("tripleo-repos R2")
    c0.run("dnf -y update openstack-keystone")
    c0.run("os-apply-config --service keystone")
    c0.run("keystone-manage db sync")
    c0.run("systemctl start keystone")
    wait_for(lambda: health(lab, "ctrl-0", "keystone")["healthy"])
    # an old node that is down cannot be copied from, as over SSH
    inject(lab, "crash", "ctrl-2")
    r = c0.run("rsync -a --delete ctrl-2:/var/lib/mysql/ /var/lib/mysql/", check=False)
    assert r.returncode == 255 and "No route to host" in r.stderr, r
    # Naive: copy again: the newer data is gone.
    c0.run("systemctl stop galera")
    c0.run(copy)
    c0.run(SAFE_TO_BOOTSTRAP)
    c0.run("galera_new_cluster")
    wait_for(lambda: "schema 1 is older than code 2" in health(lab, "ctrl-0", "keystone")["health"])


def test_fault_clear_lets_an_instance_live_migrate_again(lab, node):
    """`lab fault clear NODE` undoes every fault of the node, no-live-migrate on its
    instances too: nova's host-evacuate-live moves the instance afterwards."""
    from stepwise.lab.faults import inject

    assert "vm-1 on cmp-1 cannot live-migrate" == inject(lab, "no-live-migrate", "cmp-1", "vm-1")
    assert lab.read_state("_lab", "workloads.json")["vm-1"]["no_live_migrate"]
    said = inject(lab, "clear", "cmp-1")
    assert said == "cmp-1: faults cleared (vm-1 can live-migrate again)"
    assert "no_live_migrate" not in lab.read_state("_lab", "workloads.json")["vm-1"]
    node("cmp-1").run("nova host-evacuate-live cmp-1")
    listing = "openstack server list --all-projects --host cmp-1 -f value -c Name"
    wait_for(lambda: node("cmp-1").run(listing).stdout.strip() == "")
    assert lab.read_state("_lab", "workloads.json")["vm-1"]["host"] == "cmp-0"
