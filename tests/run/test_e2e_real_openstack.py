"""Real OpenStack through a rolling minor update and a major upgrade, on the lab (`-m e2e`).

`stepwise demo` on examples/openstack.yaml: three controllers run real keystone, placement and
glance (PyPI code of 2023.2 under uWSGI, behind the real HAProxy VIPs, on the real Galera
cluster). The minor update (2023.2 first patch -> latest patch) and the major upgrade
(2023.2 -> 2024.1, keystone and glance expand/contract, placement's additive sync) run under a
real OpenStack client issuing tokens, listing projects, creating resource providers and images
through the VIPs: no call fails. Afterwards every schema is at the new code's head, the project,
resource provider and image created before the runs are still there (the image's data too),
and tempest's identity and image API tests pass.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from pathlib import Path

import pytest
from typer.testing import CliRunner

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "openstack.yaml"

pytestmark = [pytest.mark.e2e, pytest.mark.lab]


def _lab_or_fail() -> None:
    from stepwise.lab import haproxy, mariadb

    try:
        mariadb.binaries()
        haproxy.binary()
        if not shutil.which("uwsgi"):
            raise RuntimeError("uwsgi not found (Debian: uwsgi-core, uwsgi-plugin-python3)")
    except Exception as exc:  # pragma: no cover - depends on the machine
        if os.environ.get("CI"):
            pytest.fail(f"the lab cannot run here: {exc}")
        pytest.skip(f"no lab here: {exc}")


def _lab_processes(lab_dir: Path) -> list[str]:
    """The command lines of the processes whose environment names the lab."""
    from stepwise.lab.nodes import pid_belongs_to

    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and pid_belongs_to(int(entry.name), lab_dir.resolve()):
            try:
                found.append((entry / "cmdline").read_bytes().replace(b"\0", b" ").decode())
            except OSError:
                pass
    return found


def _check_real_infra_then_down(lab_dir: Path) -> None:
    """After the minor update and the major upgrade rolled every RabbitMQ member (stop_app,
    stop, new package, start, rejoin): the cluster still has its 3 members, all running, and
    `lab status` says it and memcached are real; keystone's cache and the services' token
    cache name every memcached member. Then `lab down` leaves no rabbit, epmd or memcached
    process of the lab behind."""
    import configparser

    from stepwise.lab import control, memcached, rabbitmq
    from stepwise.lab.nodes import Lab

    lab = Lab(lab_dir)
    st = rabbitmq.cluster_status(lab, "rabbitmq")
    assert st is not None
    members = {f"rabbit{k}@localhost" for k in (1, 2, 3)}
    assert set(st["running_nodes"]) == members == set(st["disk_nodes"]), st
    rows = {c["name"]: c for c in control.status(lab)["components"]}
    assert rows["rabbitmq"]["kind"] == "real" and "3 running" in rows["rabbitmq"]["detail"]
    assert rows["memcached"]["kind"] == "real"
    servers = memcached.servers(lab)
    assert len(servers) == 3
    for node in lab.nodes():
        assert memcached.ping(lab.node(node).address)[0]
        ks = configparser.ConfigParser(interpolation=None)
        ks.read(lab.node_path(node, "/etc/keystone/keystone.conf"))
        assert ks["cache"]["enabled"] == "true"
        assert ks["cache"]["memcache_servers"].split(",") == servers
        pl = configparser.ConfigParser(interpolation=None)
        pl.read(lab.node_path(node, "/etc/placement/placement.conf"))
        assert pl["keystone_authtoken"]["memcached_servers"].split(",") == servers
    assert any("beam.smp" in p for p in _lab_processes(lab_dir))
    control.down(lab_dir)
    left = [
        p for p in _lab_processes(lab_dir) if any(w in p for w in ("beam", "epmd", "memcached"))
    ]
    assert left == [], left


def _drained_before_stopped(store_file: Path, runs: list[int]) -> dict[str, int]:
    """Every stop of an API behind a VIP (`frontend:`) on a node came after the generic leave
    took that node's server out of HAProxy and saw its sessions reach 0, in each run's
    recorded task results; how many stops each service had."""
    from stepwise.model import load_deployment
    from stepwise.run.store import open_store

    dep = load_deployment(EXAMPLE)
    fronted = sorted(s for s in dep.instances if dep.catalog[s].frontend)
    assert {"keystone", "placement_api", "glance_api"} <= set(fronted), fronted
    store = open_store(f"sqlite:///{store_file}")
    stops = dict.fromkeys(fronted, 0)
    for run in runs:
        rows = store.task_results(run)
        for svc in fronted:
            for host in {r.host for r in rows}:
                mine = [r for r in rows if r.host == host]
                drained = waited = None
                for r in mine:
                    if r.task.startswith(f"Drain {svc} on this node in the load balancer"):
                        assert r.status == "changed", (run, host, r.task, r.status, r.message)
                        drained = r
                    elif r.task.startswith(f"Wait until {svc} on this node has no request"):
                        assert r.status == "ok", (run, host, r.task, r.status, r.message)
                        waited = r
                    elif r.task.startswith(f"Stop {svc}") and r.status in ("ok", "changed"):
                        # out of the load balancer, its requests done, before this stop
                        assert drained is not None and waited is not None, (run, host, r.task)
                        assert drained.at <= waited.at <= r.at, (run, host, svc)
                        stops[svc] += 1
                        drained = waited = None  # the next stop needs its own leave
    return stops


def test_real_openstack_minor_update_and_major_upgrade(tmp_path: Path):
    _lab_or_fail()
    from stepwise.cli.main import _register

    _register()
    from stepwise.cli.main import app

    short = Path(tempfile.mkdtemp(prefix="swo-"))  # unix sockets live under the lab dir
    # the demo keeps its store (--keep) in a directory of its own under the temporary one
    saved_tempdir, tempfile.tempdir = tempfile.tempdir, str(short)
    try:
        r = CliRunner().invoke(
            app,
            [
                "demo",
                "-d",
                str(EXAMPLE),
                "--lab-dir",
                str(short / "lab"),
                "--json",
                "--report",
                str(tmp_path / "demo.html"),
                "--keep",
                # the lists CI proves (the demo's default is the short one)
                "--tempest",
                "full",
            ],
        )
        if r.exception and not isinstance(r.exception, SystemExit):
            raise r.exception
        assert r.exit_code == 0, r.output
        (store_file,) = short.glob("stepwise-demo-*/*.sqlite")
        runs = [p["run"] for p in json.loads(r.output[r.output.index("{") :])["phases"]]
        stops = _drained_before_stopped(store_file, runs)
        print(f"API stops after their drain: {stops}")
        assert all(n > 0 for n in stops.values()), stops
        _check_real_infra_then_down(short / "lab")
    finally:
        tempfile.tempdir = saved_tempdir
        from stepwise.lab import control

        if (short / "lab" / "lab.json").exists():
            control.down(short / "lab")
        shutil.rmtree(short, ignore_errors=True)
    report = json.loads(r.output[r.output.index("{") :])
    phases = {p["phase"]: p for p in report["phases"]}
    assert set(phases) >= {
        "minor update",
        "upgrade prepare",
        "upgrade run (control plane)",
        "upgrade converge",
    }
    assert all(p["status"] == "done" for p in phases.values()), phases
    # the real client kept calling every real service through every phase and no call failed:
    # a node's APIs leave the load balancer and finish their requests before they stop; its
    # Galera member leaves the database VIP and waits until the services' pools have moved
    # their connections to the next member between two queries (connection_recycle_time),
    # and comes back only once synced. Every failure is printed with the units running then.
    for title, p in phases.items():
        client = p["probe"]["client"]
        assert set(client) == {"client:keystone", "client:placement", "client:glance"}, (
            title,
            client,
        )
        assert all(c["requests"] > 0 for c in client.values()), (title, client)
        print(f"{title}: client {client}; failures {p['probe']['failures']}")
        assert sum(c["failed"] for c in client.values()) == 0, (
            title,
            client,
            p["probe"]["failures"],
        )
        assert p["probe"]["failed"] == 0, (
            title,
            p["probe"]["targets_with_failures"],
            p["probe"]["failures"],
        )
    os_report = report["openstack"]
    # the schemas moved to 2024.1's head by the services' own tools: keystone's expand and
    # glance's expand/migrate/contract changed real tables
    assert all(s["at_head"] and s["code"] == "2024.1" for s in os_report["schemas"].values()), (
        os_report["schemas"]
    )
    before = os_report["schemas_before"]
    for svc in ("keystone", "glance_api"):
        assert before[svc]["version"] != os_report["schemas"][svc]["version"], (
            svc,
            before,
            os_report["schemas"],
        )
    assert os_report["seed"]["kept"] and os_report["seed"]["checked"] == 3, os_report["seed"]
    tempest = os_report["tempest"]
    assert tempest["ok"] and tempest["passed"] > 0 and tempest["failed"] == 0, tempest
    # what `status` says of each node agrees with what the lab's nodes have installed
    assert report["status_agrees_with_lab"]["checked"] > 0
    assert report["status_agrees_with_lab"]["mismatches"] == []
    # it ends by writing the report of its runs, the probe's measurements included
    assert (tmp_path / "demo.html").stat().st_size > 10_000
    doc = (tmp_path / "demo.html").read_text()
    assert report["report"] == str((tmp_path / "demo.html").resolve())
    assert all(f"run {p['run']}: " in doc for p in report["phases"]) and "vip:keystone" in doc
