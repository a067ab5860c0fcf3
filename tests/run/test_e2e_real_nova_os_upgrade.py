"""The seed's OS upgrade (its 12 steps as commands) of `examples/openstack-nova.yaml`, real nova
and neutron-server on a real Galera and RabbitMQ (issue 33, `-m e2e`).

The lone controller goes first: its services stop (the control plane's announced window), it
moves to the new OS, and the clusters that cannot span two OS majors start over on it with the
catalog's own commands: Galera bootstraps a new cluster from the datadir the node kept
(`galera_new_cluster`), RabbitMQ's old database goes and the broker forms a new cluster
(`rm -rf .../mnesia`, `rabbitmqctl set_policy`), then 2024.1 starts on the new OS with the
compute RPC pinned while the computes still run 2023.2. Each compute is drained (its servers
live-migrated through the real API to the other one), upgraded to the new OS and 2024.1, and
rejoins; the online data migrations, converge (the pin lifted) and the cleanup end it. A real
client calls nova and neutron through the VIPs all along: no call fails outside the windows
the plans announced; every row and every server is kept.
"""

from __future__ import annotations

import json
import shutil
import tempfile
from pathlib import Path

import pytest

from stepwise.lab import control, mariadb
from stepwise.lab.openstack.client import client_probe_for_lab
from tests.run.seed_table import assert_failures_inside_windows, seed_cli, write_rows
from tests.run.test_e2e_real_nova import (
    COMPUTES,
    EXAMPLE,
    NOVA_NODES,
    _node_run,
    _pin,
    _servers,
    _status_rows,
)

pytestmark = [pytest.mark.e2e, pytest.mark.lab]

#: what the old RabbitMQ cluster holds and a cluster formed anew does not
OLD_VHOST = "before-the-os-upgrade"


def test_real_nova_through_the_seeds_os_upgrade(tmp_path: Path, monkeypatch):
    from stepwise.model import load_deployment
    from stepwise.plan.commands import seed_commands
    from stepwise.run.store import open_store

    monkeypatch.setenv("STEPWISE_LAB_HOME", str(tmp_path / "labs"))
    short = Path(tempfile.mkdtemp(prefix="swo-"))  # the lab's unix sockets: 108-byte paths
    lab_dir = short / "lab"
    dep = tmp_path / "openstack-nova.yaml"
    dep.write_text(EXAMPLE.read_text())
    store_url = f"sqlite:///{tmp_path / 'store.sqlite'}"
    log: list[str] = []
    # one controller: every step of its control plane is an announced window
    sw = seed_cli(dep, lab_dir, store_url, log, run_options=["--accept-downtime"])

    lab = control.up(dep, lab_dir, timeout=240)
    probe = None
    try:
        galera = lab.spec.services["galera"]
        at = (lab.node("controller-0").address, galera.db_port)
        rows = write_rows(*at)
        _node_run(lab, "controller-0", f"rabbitmqctl add_vhost {OLD_VHOST}")
        before = _servers(lab)
        assert len(before) == 4 and all(s["status"] == "ACTIVE" for s in before.values())
        sw("discover")
        probe = client_probe_for_lab(lab, max_seconds=1500, interval=1.0)
        assert probe is not None
        commands = [list(a) for a in seed_commands(load_deployment(dep), "R2")]
        with probe:
            for argv in commands:
                sw(*argv)
                tags = argv[argv.index("--tags") + 1] if "--tags" in argv else ""
                if argv[:2] == ["upgrade", "run"] and tags == "system_upgrade_prepare":
                    node = argv[argv.index("--limit") + 1]
                    if node in COMPUTES:
                        # drained before its OS upgrade: every server ACTIVE on the other one
                        hosts = {s["host"] for s in _servers(lab).values()}
                        assert hosts == set(COMPUTES) - {node}, (node, _servers(lab))
                if argv[:2] == ["upgrade", "run"] and not tags:
                    node = argv[argv.index("--limit") + 1]
                    if node == "controller-0":
                        # step 6 done: 2024.1 on the new OS, the computes still on 2023.2 and
                        # pinned; the clusters formed anew on this node
                        assert {_pin(lab, n) for n in NOVA_NODES} == {"auto"}
                        vhosts = _node_run(lab, "controller-0", "rabbitmqctl list_vhosts -q")
                        assert OLD_VHOST not in vhosts.split() and "/" in vhosts.split(), vhosts
                        policies = _node_run(lab, "controller-0", "rabbitmqctl list_policies -q")
                        assert "ha-all" in policies, policies
        records = probe.stop()
        probe = None
        (tmp_path / "client-calls.json").write_text(json.dumps(records))

        # every node on the new OS and the new release, every service healthy
        status = control.status(lab)
        assert {(n["name"], n["os_major"], n["release"]) for n in status["nodes"]} == {
            (n, 9, "R2") for n in NOVA_NODES
        }
        assert all(s["healthy"] for n in status["nodes"] for s in n["services"]), json.dumps(
            status["nodes"]
        )[:3000]
        runs = {(r["node"], r["service"]): r["runs"] for r in _status_rows(lab)}
        for n in COMPUTES:
            assert "nova 29.2.2 (2024.1)" in runs[(n, "nova_compute")], runs
        assert {_pin(lab, n) for n in NOVA_NODES} == {""}  # lifted at converge
        # the rows the database held before step 1, on the new cluster
        assert sorted(mariadb.execute(*at, "SELECT k, v FROM data")) == sorted(rows)
        cluster = _node_run(lab, "controller-0", "rabbitmqctl cluster_status --formatter json")
        assert json.loads(cluster)["running_nodes"] == ["rabbit1@localhost"], cluster
        # every server kept, ACTIVE and running, on a compute that runs 2024.1
        after = _servers(lab)
        assert set(after) == set(before)
        assert all(s["status"] == "ACTIVE" and s["power_state"] == 1 for s in after.values())
        assert {s["host"] for s in after.values()} <= set(COMPUTES), after
        # the catalog formed both new clusters on the controller
        store = open_store(store_url)
        units = [u for r in store.runs("openstack-nova", limit=1000) for u in store.units(r.id)]
        formed = {
            s for u in units if u.step == "form_cluster" and u.state == "done" for s in u.services
        }
        assert formed == {"galera", "pacemaker", "rabbitmq"}, formed
        # nova's online data migrations have nothing left to do
        migrations = _node_run(lab, "controller-0", "nova-manage db online_data_migrations")
        completed = {
            r.split("|")[3].strip() for r in migrations.splitlines() if r.count("|") == 4
        } - {"Completed"}
        assert completed == {"0"}, migrations
        # the real client: its calls failed only inside the windows the plans announced
        assert len([r for r in records if r["target"] == "client:nova"]) >= 20
        assert_failures_inside_windows(records, store_url, "openstack-nova", log)
    finally:
        if probe is not None:
            probe.stop()
        control.down(lab.dir)
        (tmp_path / "commands.log").write_text("\n".join(log))
        # the lab's logs outlive its short-lived directory, for a failure's post-mortem
        shutil.copytree(lab.log_dir, tmp_path / "lab-logs", dirs_exist_ok=True)
        shutil.rmtree(short, ignore_errors=True)
