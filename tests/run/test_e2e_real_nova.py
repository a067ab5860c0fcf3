"""Real nova on the lab (issue 33): `examples/openstack-nova.yaml` brought up and its computes
rolled through the seed's minor update, with real drains, while a real client calls nova and
neutron through the VIPs (`-m e2e`).

`lab up` forms cells v2 with nova's own tools and boots two servers on each compute through the
real API; nova live-migrates one when asked. Then `stepwise update run --limit Compute` rolls
the computes one at a time (28.0.0 -> 28.3.1): the catalog's leave disables each compute and
live-migrates its servers away with the real `openstack` client before nova-compute stops (the
fake driver keeps its instances in the compute's memory: a compute restarted with servers on it
would lose them). No client call fails; afterwards every server is ACTIVE and running, both
computes run the new code and are up and enabled again, and the lab says which parts are real.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from stepwise.lab import control, kinds
from stepwise.lab.nodes import Lab, ini_section
from stepwise.lab.openstack import checks, client_probe, config, nova_cells
from stepwise.lab.openstack.client import client_probe_for_lab

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "openstack-nova.yaml"
COMPUTES = ("compute-0", "compute-1")
NOVA_NODES = ("controller-0", *COMPUTES)
STEPWISE = str(Path(sys.executable).parent / "stepwise")

pytestmark = [pytest.mark.e2e, pytest.mark.lab]


@pytest.fixture(scope="module")
def cloud(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Lab, Path, Path, list[str]]]:
    """The example's lab, up once for the file's tests (they run in order): the lab, the
    deployment file (its store beside it, not in examples/), the lab's directory (a short
    path: its unix sockets live under it, 108-byte limit) and what `lab up` said."""
    tmp = tmp_path_factory.mktemp("real-nova")
    short = Path(tempfile.mkdtemp(prefix="swn-"))
    lab_dir = short / "lab"
    dep = tmp / "openstack-nova.yaml"
    dep.write_text(EXAMPLE.read_text())
    said: list[str] = []
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("STEPWISE_LAB_HOME", str(tmp / "labs"))
        lab = control.up(dep, lab_dir, progress=said.append, timeout=240)
        try:
            yield lab, dep, lab_dir, said
        finally:
            control.down(lab.dir)
            shutil.rmtree(short, ignore_errors=True)


def test_real_nova_servers_kept_through_the_computes_rolling_update(cloud):
    lab, dep, lab_dir, said = cloud
    assert any("2 compute(s) mapped to cell1 and up" in m for m in said), said
    assert _services_up(lab) == [
        ("nova-compute", "compute-0"),
        ("nova-compute", "compute-1"),
        ("nova-conductor", "controller-0"),
        ("nova-scheduler", "controller-0"),
    ]
    servers = _servers(lab)
    assert len(servers) == 4 and all(s["status"] == "ACTIVE" for s in servers.values())
    hosts = sorted(s["host"] for s in servers.values())
    assert hosts == ["compute-0", "compute-0", "compute-1", "compute-1"]
    # nova picks the destination and moves the instance (real conductor, scheduler, RPC)
    moving = next(i for i, s in servers.items() if s["host"] == "compute-0")
    nova_cells.live_migrate(lab, moving)
    _wait_host(lab, moving, "compute-1")
    # the lab says what is real; a node's nova-manage and nova-status are nova's own
    rows = {(r["node"], r["service"]): r for r in _status_rows(lab)}
    assert rows[("compute-0", "nova_compute")]["kind"] == kinds.REAL
    assert "nova 28.0.0" in rows[("compute-0", "nova_compute")]["runs"]
    assert "as a process" in rows[("compute-0", "nova_compute")]["runs"]
    assert "under uWSGI" in rows[("controller-0", "nova_api")]["runs"]
    assert "under uWSGI" in rows[("controller-0", "neutron_server")]["runs"]
    cells = _node_run(lab, "controller-0", "nova-manage cell_v2 list_cells")
    assert "cell0" in cells and "cell1" in cells
    # nova's own checks pass (a warning, exit 1, for the fake driver's machine type)
    check = _node_run(lab, "controller-0", "nova-status upgrade check", ok=(0, 1))
    assert "Cells v2" in check and "Failure" not in check
    # neutron-server answers through its VIP and keeps a tenant network (VXLAN, in its
    # database: no agent wires it)
    made = _neutron(lab, "/v2.0/networks", {"network": {"name": "lab-net"}})["network"]
    assert made["provider:network_type"] == "vxlan" and made["status"] == "ACTIVE"
    assert [n["name"] for n in _neutron(lab, "/v2.0/networks")["networks"]] == ["lab-net"]

    before = _servers(lab)
    _stepwise("discover", "-d", str(dep), "--lab", str(lab_dir))
    # a real client lists and shows servers, lists networks and builds servers through the
    # VIPs meanwhile
    probe = client_probe_for_lab(lab, max_seconds=900, interval=1.0)
    assert probe is not None
    with probe:
        _stepwise("update", "run", "-d", str(dep), "--lab", str(lab_dir), "--limit",
                  "Compute", "--no-prestage")  # fmt: skip
    records = probe.stop()
    calls = {t: [r for r in records if r["target"] == t] for t in ("client:nova", "client:neutron")}
    assert all(len(c) >= 10 for c in calls.values()), {t: len(c) for t, c in calls.items()}
    # and now and then a small server built, ACTIVE and deleted (a record for each call):
    # nova's write path through the computes' drains, scheduled to the compute still enabled
    lives = [r for r in records if r["target"] == "client:nova-server"]
    assert len(lives) >= 4, lives
    failed = [r for r in records if not r["ok"]]
    assert failed == [], failed[:5]
    after = _servers(lab)
    assert set(after) == set(before)
    assert all(s["status"] == "ACTIVE" and s["power_state"] == 1 for s in after.values()), after
    # the second compute's drain moved every server onto the first, already updated one
    assert {s["host"] for s in after.values()} == {"compute-0"}, after
    rows = {(r["node"], r["service"]): r for r in _status_rows(lab)}
    for node in ("compute-0", "compute-1"):
        assert "nova 28.3.1" in rows[(node, "nova_compute")]["runs"]
    assert "nova 28.0.0" in rows[("controller-0", "nova_conductor")]["runs"]
    # `lab status` lists them from nova's API
    shown = control.status(lab)["servers"]
    assert [(r["status"], r["host"]) for r in shown] == [("ACTIVE", "compute-0")] * 4
    listed = nova_cells.call(lab, "GET", "/os-services?binary=nova-compute")["services"]
    assert {(s["host"], s["state"], s["status"]) for s in listed} == {
        ("compute-0", "up", "enabled"),
        ("compute-1", "up", "enabled"),
    }


def test_real_nova_refuses_the_order_the_verifier_refuses(cloud):
    """nova's upgrade order judged by the real services: a catalog without nova-conductor's
    dependency on placement plans the conductor's restart while placement is still down for
    its own upgrade; the verifier (with the real catalog) refuses that plan, and the real
    nova-conductor, started while placement does not answer, exits at its start."""
    from stepwise.errors import UnsafePlanError
    from stepwise.model import load_deployment
    from stepwise.model.vocab import Step, Workflow
    from stepwise.plan import make_plan
    from stepwise.verify import verify_plan
    from tests.verify.test_real_nova_order import without_conductors_placement

    lab, dep_path, _, _ = cloud
    dep = load_deployment(dep_path)
    plan = make_plan(Workflow.UPGRADE, without_conductors_placement(dep))
    start = next(u for u in plan.units if u.step is Step.START and "nova_conductor" in u.services)
    assert "placement_api" in start.services  # started together: placement may not answer yet
    with pytest.raises(UnsafePlanError, match="its dependency placement_api"):
        verify_plan(plan, dep)
    # what that unit risks, on the real services: placement down, the conductor starting
    log = config.paths(lab, "controller-0", "nova_conductor")["log"]
    seen = log.stat().st_size
    _node_run(lab, "controller-0", "systemctl stop placement-api")
    try:
        r = subprocess.run("systemctl restart openstack-nova-conductor", shell=True,
                           env=lab.node_env("controller-0"), cwd=lab.node_root("controller-0"),
                           capture_output=True, text=True, timeout=180)  # fmt: skip
        # on a loaded machine the start may return before the conductor reaches placement:
        # then it exits a little later, and its unit is no longer active
        said = b""
        deadline = time.monotonic() + 120
        while b"does not have any supported versions" not in said:
            assert time.monotonic() < deadline, (r.returncode, r.stderr, said[-2000:])
            time.sleep(2)
            with open(log, "rb") as fh:
                fh.seek(seen)
                said = fh.read()
        assert b"placement service" in said
        assert r.returncode != 0 or _wait_inactive(lab, "openstack-nova-conductor")
    finally:
        _node_run(lab, "controller-0", "systemctl start placement-api")
        _node_run(lab, "controller-0", "systemctl start openstack-nova-conductor")
    _wait_computes_up(lab)  # the next test moves a server: nova must count both computes up


def test_real_nova_major_upgrade_pins_compute_rpc_until_no_old_compute_remains(cloud):
    """2023.2 -> 2024.1 with the README's commands: nova's and neutron's own upgrade checks
    first, the schemas expanded by their own tools, the controllers upgraded (an announced
    window: one controller), then the computes rolled while nova itself caps the compute RPC
    at the old computes' version (`[upgrade_levels] compute = auto`, what nova's conductor
    logs), then converge lifts the pin, runs the online data migrations and contracts;
    tempest's compute and network tests pass on the result."""
    lab, dep, lab_dir, _ = cloud
    before = _servers(lab)
    common = ("-d", str(dep), "--lab", str(lab_dir), "-e", "target_release=R2", "--yes")
    _stepwise("upgrade", "prepare", *common)
    assert {_pin(lab, n) for n in NOVA_NODES} == {"auto"}
    _stepwise("upgrade", "run", *common, "--plane", "control", "--accept-downtime")
    rows = {(r["node"], r["service"]): r for r in _status_rows(lab)}
    for svc in ("nova_api", "nova_conductor", "nova_scheduler"):
        assert "nova 29.2.2" in rows[("controller-0", svc)]["runs"], svc
    assert "neutron 24.2.2" in rows[("controller-0", "neutron_server")]["runs"]
    assert all("nova 28.3.1" in rows[(n, "nova_compute")]["runs"] for n in COMPUTES)
    # nova 2024.1 (service version 67) speaks the old computes' compute RPC (2023.2's 6.2):
    # what the upgraded conductor logs when it first calls a compute
    log = config.paths(lab, "controller-0", "nova_conductor")["log"]
    seen = log.stat().st_size
    _wait_computes_up(lab)  # their heartbeats stalled while the conductor restarted
    nova_cells.live_migrate(lab, next(iter(before)))
    _wait_moved(lab, next(iter(before)), before)
    with open(log, "rb") as fh:
        fh.seek(seen)
        assert b"Automatically selected compute RPC version 6.2" in fh.read()
    # the computes roll with real drains while a client calls nova and neutron
    for step in (("run", "--plane", "data"), ("converge",)):
        probe = client_probe_for_lab(lab, max_seconds=900, interval=1.0)
        assert probe is not None
        with probe:
            _stepwise("upgrade", *step, *common)
        records = probe.stop()
        assert len(records) >= 10 and [r for r in records if not r["ok"]] == [], step
    assert {_pin(lab, n) for n in NOVA_NODES} == {""}  # lifted at converge
    rows = {(r["node"], r["service"]): r for r in _status_rows(lab)}
    assert all("nova 29.2.2" in rows[(n, "nova_compute")]["runs"] for n in COMPUTES)
    after = _servers(lab)
    assert set(after) == set(before)
    assert all(s["status"] == "ACTIVE" and s["power_state"] == 1 for s in after.values()), after
    listed = nova_cells.call(lab, "GET", "/os-services")["services"]
    assert all(s["state"] == "up" for s in listed) and len(listed) == 4, listed
    # nothing left for the online data migrations (nova's exit 0: no further update possible):
    # a second run completes none. The one row 2024.1 still counts is nova's own marker, the
    # soft-deleted all-zero instance 2023.2's fill_virtual_interface_list leaves in cell0 (no
    # host: populate_instance_compute_id cannot map it, nor needs to)
    migrations = _node_run(lab, "controller-0", "nova-manage db online_data_migrations")
    rows = [
        [c.strip() for c in r.split("|")[1:4]] for r in migrations.splitlines() if r.count("|") == 4
    ]
    assert rows[0] == ["Migration", "Total Needed", "Completed"], migrations
    assert {done for _, _, done in rows[1:]} == {"0"}, migrations
    assert {name for name, needed, _ in rows[1:] if needed != "0"} <= {
        "populate_instance_compute_id"
    }
    heads = _node_run(lab, "controller-0", "neutron-db-manage current")
    assert heads.count("(head)") == 2, heads
    # unpinned, nova still moves a server (the computes now speak 2024.1's compute RPC)
    _wait_computes_up(lab)
    moving = next(iter(after))
    nova_cells.live_migrate(lab, moving)
    _wait_moved(lab, moving, after)
    # tempest as the acceptance of the upgraded cloud: its compute tests (servers built,
    # rebooted, stopped and started, live-migrated between the computes) and network tests
    # (networks, subnets, ports), through the VIPs. Its identity and image tests (~100, 1.5-2
    # minutes of CI's time) run after the same 2023.2 -> 2024.1 upgrade of keystone and
    # glance in test_e2e_real_openstack.py's demo, and in `stepwise demo` on this example
    verdict = checks.acceptance(lab, lab_dir.parent / "tempest", apis=("compute", "network"))
    assert verdict["ok"], verdict["failures"]
    by_api = verdict["passed_by_api"]
    assert by_api.get("compute", 0) >= 40 and by_api.get("network", 0) >= 30, verdict
    assert set(by_api) == {"compute", "network"}, verdict


def _stepwise(*args: str) -> str:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    r = subprocess.run([STEPWISE, *args], env=env, capture_output=True, text=True, timeout=900)
    assert r.returncode == 0, (
        f"stepwise {' '.join(args[:2])}: {r.returncode}\n{r.stdout}\n{r.stderr}"
    )
    return r.stdout


def _servers(lab: Lab) -> dict[str, dict]:
    """Every server by ID but the client probe's own (built and deleted while it runs): name,
    status, power state, host (the admin's view)."""
    found = [
        s
        for s in nova_cells.call(lab, "GET", "/servers/detail?all_tenants=1")["servers"]
        if not s["name"].startswith(client_probe.PREFIX)
    ]
    return {
        s["id"]: {
            "name": s["name"],
            "status": s["status"],
            "power_state": s.get("OS-EXT-STS:power_state"),
            "host": nova_cells.host_of(s),
        }
        for s in found
    }


def _services_up(lab: Lab) -> list[tuple[str, str]]:
    listed = nova_cells.call(lab, "GET", "/os-services")["services"]
    return sorted((s["binary"], s["host"]) for s in listed if s["state"] == "up")


def _wait_host(lab: Lab, server_id: str, host: str, timeout: float = 120.0) -> None:
    deadline = time.monotonic() + timeout
    while True:
        s = nova_cells.call(lab, "GET", f"/servers/{server_id}")["server"]
        if s["status"] == "ACTIVE" and nova_cells.host_of(s) == host:
            return
        assert s["status"] != "ERROR", s.get("fault")
        assert time.monotonic() < deadline, f"still {s['status']} on {nova_cells.host_of(s)}"
        time.sleep(1)


def _neutron(lab: Lab, path: str, body: dict | None = None) -> dict:
    from stepwise.lab.openstack.bootstrap import admin_token, api_call

    url = f"http://{lab.spec.vip}:{lab.spec.vips['neutron_server'].port}{path}"
    return api_call("POST" if body is not None else "GET", url, body, admin_token(lab))[1]


def _status_rows(lab: Lab) -> list[dict]:
    st = control.status(lab, ask_clusters=False)
    return [dict(s, node=n["name"], service=s["name"]) for n in st["nodes"] for s in n["services"]]


def _node_run(lab: Lab, node: str, cmd: str, ok: tuple[int, ...] = (0,)) -> str:
    r = subprocess.run(cmd, shell=True, env=lab.node_env(node), cwd=lab.node_root(node),
                       capture_output=True, text=True, timeout=120)  # fmt: skip
    assert r.returncode in ok, f"{cmd}: {r.returncode}\n{r.stdout}\n{r.stderr}"
    return r.stdout


def _pin(lab: Lab, node: str) -> str:
    """The node's `[upgrade_levels] compute` in /etc/nova/nova.conf ("" when unset)."""
    return ini_section(lab.node_path(node, "/etc/nova/nova.conf"), "upgrade_levels").get(
        "compute", ""
    )


def _wait_moved(lab: Lab, server_id: str, was: dict[str, dict], timeout: float = 120.0) -> None:
    """Wait until the server is ACTIVE on another host than it was on."""
    other = next(h for h in COMPUTES if h != was[server_id]["host"])
    _wait_host(lab, server_id, other, timeout)


def _wait_inactive(lab: Lab, unit: str, timeout: float = 60.0) -> bool:
    """Whether the controller's unit stops being active within `timeout` (it exited)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        r = subprocess.run(f"systemctl is-active {unit}", shell=True,
                           env=lab.node_env("controller-0"), cwd=lab.node_root("controller-0"),
                           capture_output=True, text=True, timeout=60)  # fmt: skip
        if r.returncode != 0:
            return True
        time.sleep(2)
    return False


def _wait_computes_up(lab: Lab, timeout: float = 180.0) -> None:
    """Wait until nova counts every compute up (a live migration off a compute nova counts
    down fails)."""
    deadline = time.monotonic() + timeout
    while True:
        listed = nova_cells.call(lab, "GET", "/os-services?binary=nova-compute")["services"]
        if len(listed) == len(COMPUTES) and all(s["state"] == "up" for s in listed):
            return
        assert time.monotonic() < deadline, listed
        time.sleep(2)
