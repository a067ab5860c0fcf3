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
from stepwise.lab.nodes import Lab
from stepwise.lab.openstack import nova_cells
from stepwise.lab.openstack.client import client_probe_for_lab

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "openstack-nova.yaml"
STEPWISE = str(Path(sys.executable).parent / "stepwise")

pytestmark = [pytest.mark.e2e, pytest.mark.lab]


@pytest.fixture
def lab_dir() -> Iterator[Path]:
    """A short path: the lab's unix sockets live under it (108-byte limit)."""
    d = Path(tempfile.mkdtemp(prefix="swn-"))
    yield d / "lab"
    shutil.rmtree(d, ignore_errors=True)


def test_real_nova_servers_kept_through_the_computes_rolling_update(
    tmp_path: Path, lab_dir: Path, monkeypatch
):
    monkeypatch.setenv("STEPWISE_LAB_HOME", str(tmp_path / "labs"))
    dep = tmp_path / "openstack-nova.yaml"  # its store beside it, not in examples/
    dep.write_text(EXAMPLE.read_text())
    said: list[str] = []
    lab = control.up(dep, lab_dir, progress=said.append, timeout=240)
    try:
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
        # a real client lists and shows servers and lists networks through the VIPs meanwhile
        probe = client_probe_for_lab(lab, max_seconds=900, interval=1.0)
        assert probe is not None
        with probe:
            _stepwise("update", "run", "-d", str(dep), "--lab", str(lab_dir), "--limit",
                      "Compute", "--no-prestage")  # fmt: skip
        records = probe.stop()
        calls = {
            t: [r for r in records if r["target"] == t] for t in ("client:nova", "client:neutron")
        }
        assert all(len(c) >= 10 for c in calls.values()), {t: len(c) for t, c in calls.items()}
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
    finally:
        control.down(lab.dir)


def _stepwise(*args: str) -> str:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    r = subprocess.run([STEPWISE, *args], env=env, capture_output=True, text=True, timeout=900)
    assert r.returncode == 0, (
        f"stepwise {' '.join(args[:2])}: {r.returncode}\n{r.stdout}\n{r.stderr}"
    )
    return r.stdout


def _servers(lab: Lab) -> dict[str, dict]:
    """Every server by ID: name, status, power state, host (the admin's view)."""
    found = nova_cells.call(lab, "GET", "/servers/detail?all_tenants=1")["servers"]
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

    url = f"http://{lab.spec['vip']}:{lab.spec['vips']['neutron_server']['port']}{path}"
    return api_call("POST" if body is not None else "GET", url, body, admin_token(lab))[1]


def _status_rows(lab: Lab) -> list[dict]:
    st = control.status(lab, ask_clusters=False)
    return [dict(s, node=n["name"], service=s["name"]) for n in st["nodes"] for s in n["services"]]


def _node_run(lab: Lab, node: str, cmd: str, ok: tuple[int, ...] = (0,)) -> str:
    r = subprocess.run(cmd, shell=True, env=lab.node_env(node), cwd=lab.node_root(node),
                       capture_output=True, text=True, timeout=120)  # fmt: skip
    assert r.returncode in ok, f"{cmd}: {r.returncode}\n{r.stdout}\n{r.stderr}"
    return r.stdout
