"""Drains that really drain, on the lab (slow: minutes; `pytest -m e2e`).

Two computes with two instances each, one instance of each compute unable to live-migrate
(`lab fault no-live-migrate`). A minor update of the computes, run three times with the three
drain policies:
- cold-migrate, compute-0: its live-migratable instance, busy with a client's snapshot when
  the drain first asks to move it (nova refuses with 409), is live-migrated once the snapshot
  ended and the leave waits for it (the leave ends after the instance left, it never fails a
  request); the other is cold-migrated and runs on compute-1 afterwards;
- refuse, compute-1: the run stops in compute-1's leave, naming the instances that cannot
  move and what nova said of them, before anything on compute-1 is stopped;
- stop-in-place, compute-1: the plan announces the workloads' window of compute-1, the
  instances stopped in place fail requests only inside it and run again on compute-1 after.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
from test_e2e_lab import _lab_or_skip, lab_dir  # noqa: F401 - the fixture

from stepwise.lab.nodes import read_unit
from stepwise.run.store.base import epoch

ROOT = Path(__file__).resolve().parents[2]
STEPWISE = str(Path(sys.executable).parent / "stepwise")

pytestmark = [pytest.mark.e2e, pytest.mark.lab]


def _cloud(path: Path, policy: str) -> Path:
    """examples/classic.yaml with one ceph node (the data plane only has to be there) and a
    drain policy; two computes, so that each can be drained onto the other."""
    text = (ROOT / "examples" / "classic.yaml").read_text()
    text = text.replace('count: 3, name: "ceph', 'count: 1, name: "ceph')
    text = text.replace("name: classic\n", f"name: drainlab\ndrain_policy: {policy}\n", 1)
    text = text.replace("\nroles:\n", f"\ncatalog: {ROOT / 'examples' / 'catalog'}\nroles:\n", 1)
    path.write_text(text)
    return path


class _Runs:
    """`stepwise update run` of the computes on one lab, a fresh store each time (each run
    plans from what the nodes report then)."""

    def __init__(self, tmp_path: Path, directory: Path):
        self.tmp, self.lab_dir, self.n = tmp_path, directory, 0
        self.env = {**os.environ, "PYTHONPATH": str(ROOT)}

    def run(self, policy: str, limit: str):
        from stepwise.run.store import open_store

        self.n += 1
        dep = _cloud(self.tmp / f"drainlab-{self.n}.yaml", policy)
        url = f"sqlite:///{self.tmp / f'store-{self.n}.sqlite'}"
        common = ["-d", str(dep), "--lab", str(self.lab_dir), "--store", url]
        subprocess.run(
            [STEPWISE, "discover", *common], check=True, env=self.env, capture_output=True
        )
        p = subprocess.run(
            [STEPWISE, "update", "run", *common, "--limit", limit, "--json"],
            env=self.env,
            capture_output=True,
            text=True,
            timeout=1200,
        )
        store = open_store(url)
        return p, json.loads(p.stdout), store, store.runs("drainlab")[0]


def test_drain_waits_for_live_migration_and_applies_each_policy(tmp_path: Path, lab_dir: Path):  # noqa: F811
    _lab_or_skip()
    import stepwise.lab as lab
    from stepwise.lab import services as lab_services
    from stepwise.lab.faults import inject
    from stepwise.lab.nodes import Lab
    from stepwise.lab.probe import Probe
    from stepwise.observe.windows import window_intervals
    from stepwise.plan.units import Plan

    lab.up(_cloud(tmp_path / "drainlab.yaml", "refuse"), lab_dir, workloads_per_compute=2)
    the_lab = Lab(lab_dir)
    runs = _Runs(tmp_path, lab_dir)
    try:
        home = {vm: st["host"] for vm, st in lab_services.workloads(the_lab).items()}
        assert home == {
            "vm-0": "compute-0",
            "vm-1": "compute-0",
            "vm-2": "compute-1",
            "vm-3": "compute-1",
        }
        for vm in ("vm-1", "vm-3"):
            inject(the_lab, "no-live-migrate", home[vm], vm)

        # 1. cold-migrate on compute-0; vm-0 is snapshotted past the drain's first request (the
        # run reaches it in seconds): the drain waits for the snapshot and asks again
        inject(the_lab, "snapshot", "compute-0", "vm-0", seconds=45)
        busy_until = lab_services.workloads(the_lab)["vm-0"]["busy_until"]
        with Probe(the_lab, rate=4.0) as probe:
            p, res, store, run = runs.run("cold-migrate", "compute-0")
        probe.stop()
        assert p.returncode == 0, p.stdout + p.stderr
        wl = lab_services.workloads(the_lab)
        assert {vm: st["host"] for vm, st in wl.items()} == {
            "vm-0": "compute-1",
            "vm-1": "compute-1",
            "vm-2": "compute-1",
            "vm-3": "compute-1",
        }
        assert all(st["state"] == "running" for st in wl.values()), wl
        units = store.units(run.id)
        leave = next(u for u in units if u.step == "leave" and u.nodes == ["compute-0"])
        stop = next(u for u in units if u.step == "stop" and u.nodes == ["compute-0"])
        # the live migration completes asynchronously: the leave waited for it
        assert epoch(leave.ended_at) >= wl["vm-0"]["migrated_at"] - 0.5, (leave, wl["vm-0"])
        assert epoch(stop.started_at) >= wl["vm-0"]["migrated_at"]
        # live-migrated (not cold: that stops it), once the snapshot was over, by the second ask
        assert wl["vm-0"]["migrated_at"] >= busy_until
        assert epoch(leave.started_at) < busy_until - 20, (leave, busy_until)
        again = [
            t
            for t in store.task_results(run.id, leave.unit_id)
            if t.task.startswith("Live-migrate them once more")
        ]
        assert again and all(t.status != "skipped" for t in again), again
        vm0 = [r for r in probe.records if r["target"] == "workload:vm-0"]
        assert vm0 and all(r["ok"] for r in vm0), [r for r in vm0 if not r["ok"]][:3]
        # cold migration moves every instance: no workload window is announced
        assert not [w for w in Plan.from_json(run.plan).windows if "workloads@" in w.service]

        # 2. refuse on compute-1: vm-1 (cold-migrated there) and vm-3 cannot live-migrate
        p, res, store, run = runs.run("refuse", "compute-1")
        assert p.returncode == 1 and res["status"] == "failed", p.stdout + p.stderr
        failure = res["failures"][0]
        assert failure["host"] == "compute-1", failure
        assert "drain_policy refuse" in failure["message"], failure
        assert "vm-1" in failure["message"] and "vm-3" in failure["message"], failure
        assert "Nova said" in failure["message"], failure
        assert "not live-migratable" in failure["message"], failure
        units = store.units(run.id)
        assert [u.step for u in units if u.state == "failed"] == ["leave"]
        # nothing on compute-1 was stopped: its nova_compute and the two instances still run
        assert not [u for u in units if u.step == "stop" and u.state != "pending"]
        assert read_unit(the_lab, "compute-1", "nova_compute")
        wl = lab_services.workloads(the_lab)
        assert {vm for vm, st in wl.items() if st["host"] == "compute-1"} >= {"vm-1", "vm-3"}
        assert all(st["state"] == "running" for st in wl.values()), wl

        # 3. stop-in-place on compute-1: an announced window, the instances back after it
        with Probe(the_lab, rate=4.0) as probe:
            p, res, store, run = runs.run("stop-in-place", "compute-1")
        probe.stop()
        assert p.returncode == 0, p.stdout + p.stderr
        plan = Plan.from_json(run.plan)
        assert [w.service for w in plan.windows if w.service.startswith("workloads@")] == [
            "workloads@compute-1"
        ]
        spans = window_intervals(plan, store, run.id)["workloads@compute-1"]
        for vm in ("vm-1", "vm-3"):
            recs = [r for r in probe.records if r["target"] == f"workload:{vm}"]
            failed = [r for r in recs if not r["ok"]]
            assert failed, f"{vm} was stopped in place: the probe saw it down"
            outside = [r for r in failed if not any(a - 3 <= r["t"] <= b + 3 for a, b in spans)]
            assert outside == [], outside[:3]
            assert recs[-1]["ok"], recs[-3:]
        wl = lab_services.workloads(the_lab)
        assert wl["vm-1"]["host"] == wl["vm-3"]["host"] == "compute-1"
        assert all(st["state"] == "running" and not st.get("tags") for st in wl.values()), wl
        # the instances the refused run live-migrated to compute-0 kept serving
        moved = [r for r in probe.records if r["target"] == "workload:vm-2"]
        assert moved and all(r["ok"] for r in moved)
    finally:
        lab.down(lab_dir)
        shutil.rmtree(tmp_path / ".stepwise", ignore_errors=True)


def _networker_cloud(path: Path) -> Path:
    """classic with its L3 agents on two networkers (TripleO's Networker role), one ceph node."""
    text = (ROOT / "examples" / "classic.yaml").read_text()
    text = text.replace('count: 3, name: "ceph', 'count: 1, name: "ceph')
    text = text.replace("name: classic\n", "name: l3lab\n", 1)
    text = text.replace("      - neutron_l3_agent\n", "", 1)
    text = text.replace("\nroles:\n", f"\ncatalog: {ROOT / 'examples' / 'catalog'}\nroles:\n", 1)
    text += (
        "  - name: Networker\n"
        "    update_serial: 1\n"
        "    services: [neutron_l3_agent, neutron_ovs_agent, openvswitch]\n"
        '    nodes: {count: 2, name: "networker-{index}", address: "127.0.4.1{index}"}\n'
    )
    path.write_text(text)
    return path


def test_l3_routers_fail_over_before_their_agent_stops(tmp_path: Path, lab_dir: Path):  # noqa: F811
    _lab_or_skip()
    import stepwise.lab as lab
    from stepwise.lab import routers
    from stepwise.lab.control import status
    from stepwise.lab.nodes import Lab
    from stepwise.lab.probe import Probe, Target, request
    from stepwise.run.store import open_store

    dep = _networker_cloud(tmp_path / "l3lab.yaml")
    lab.up(dep, lab_dir)
    the_lab = Lab(lab_dir)
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    url = f"sqlite:///{tmp_path / 'store.sqlite'}"
    common = ["-d", str(dep), "--lab", str(lab_dir), "--store", url]
    try:
        before = routers.state(the_lab)
        assert {r: s["master"] for r, s in before.items()} == {
            "router-vm-0": "networker-0",
            "router-vm-1": "networker-1",
        }
        # what the failover prevents: a router whose master's L3 agent stops fails its
        # floating IP while the process keeps the address (keepalived still holds the IP)
        fip = the_lab.spec.routers["router-vm-0"]
        target = Target("fip:vm-0", "http", fip.fip, fip.port)
        deadline = time.monotonic() + 60  # the routers start after the workloads they forward to
        while not request(target)[0]:
            assert time.monotonic() < deadline, request(target)
            time.sleep(0.5)
        the_lab.call("stop", node="networker-0", unit="neutron_l3_agent")
        time.sleep(0.5)  # the router's view of its agent is cached for 0.25 s
        assert not request(target)[0]
        assert the_lab.call("start", node="networker-0", unit="neutron_l3_agent")["ok"]
        assert read_unit(the_lab, "networker-0", "neutron_l3_agent")
        assert request(target)[0]

        subprocess.run([STEPWISE, "discover", *common], check=True, env=env, capture_output=True)
        with Probe(the_lab, rate=5.0) as probe:
            p = subprocess.run(
                [STEPWISE, "update", "run", *common, "--limit", "Networker", "--json"],
                env=env,
                capture_output=True,
                text=True,
                timeout=1200,
            )
        probe.stop()
        assert p.returncode == 0, p.stdout + p.stderr
        store = open_store(url)
        run = store.runs("l3lab")[0]
        units = store.units(run.id)
        # both networkers were updated: their L3 agent stopped and started again
        for node in ("networker-0", "networker-1"):
            steps = [u.step for u in units if u.nodes == [node] and u.state == "done"]
            assert "leave" in steps and "stop" in steps and "rejoin" in steps, (node, steps)
        fips = [r for r in probe.records if r["target"].startswith("fip:")]
        failed = [r for r in fips if not r["ok"]]
        print(
            f"floating-IP requests while the networkers were updated: {len(fips)}, "
            f"failed {len(failed)}"
        )
        assert len(fips) > 100 and failed == [], failed[:5]
        # every router is hosted by both networkers again, untagged, and forwarding
        after = routers.state(the_lab)
        for r, s in after.items():
            assert sorted(s["hosts"]) == ["networker-0", "networker-1"] and not s["tags"], (r, s)
            assert s["master"] in ("networker-0", "networker-1")
        rows = {r["name"]: r for r in status(the_lab)["routers"]}
        assert all(r["forwarding"] for r in rows.values()), rows
    finally:
        lab.down(lab_dir)
        shutil.rmtree(tmp_path / ".stepwise", ignore_errors=True)
