"""The prestage stage on the lab (`pytest -m e2e`, under the lab lock): a minor update with
--limit on two nodes fetches on both (dnf --downloadonly into the nodes' caches, nothing
installed) before anything stops, and the probe sees no failed request. A repository down
fails the prestage and disrupts nothing."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from test_e2e_lab import _lab_or_skip, lab_dir, small_classic  # noqa: F401 - the fixture

ROOT = Path(__file__).resolve().parents[2]
STEPWISE = str(Path(sys.executable).parent / "stepwise")
NODES = "compute-0,ceph-0"

pytestmark = [pytest.mark.e2e, pytest.mark.lab]


def _stepwise(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run(
        [STEPWISE, *args], env=env, capture_output=True, text=True, timeout=600, check=check
    )


def test_update_with_prestage_fetches_first_and_fails_no_request(
    tmp_path: Path,
    lab_dir: Path,  # noqa: F811 - the fixture imported above
):
    _lab_or_skip()
    import stepwise.lab as lab
    from stepwise.lab.faults import inject
    from stepwise.lab.nodes import Lab
    from stepwise.lab.probe import Probe
    from stepwise.run.store import open_store

    dep_path = small_classic(tmp_path / "prestagelab.yaml", "prestagelab")
    store_url = f"sqlite:///{tmp_path / 'store.sqlite'}"
    where = ("-d", str(dep_path), "--lab", str(lab_dir), "--store", store_url)
    run = ("update", "run", *where, "--limit", NODES, "--prestage-parallel", "2", "--json")
    lab.up(dep_path, lab_dir)
    the_lab = Lab(lab_dir)
    try:
        _stepwise("discover", *where)
        store = open_store(store_url)
        before = {n: the_lab.read_state(n, "packages.json") for n in NODES.split(",")}
        # a repository down on ceph-0: its prestage fails, and nothing anywhere is disrupted
        inject(the_lab, "repos-unreachable", "ceph-0")
        # (the preflight would refuse the run: the repository goes down after it)
        failed = _stepwise(*run, "--skip-preflight", check=False)
        assert failed.returncode == 1, failed.stdout + failed.stderr
        units = store.units(store.runs("prestagelab")[0].id)
        assert [u.nodes for u in units if u.state == "failed"] == [["ceph-0"]]
        assert {u.step for u in units if u.state != "pending"} == {"prestage"}
        assert the_lab.read_state("ceph-0", "packages.json") == before["ceph-0"]
        inject(the_lab, "clear", "ceph-0")

        with Probe(the_lab, rate=4.0) as probe:
            res = _stepwise(*run, check=False)
        probe.stop()
        assert res.returncode == 0, res.stdout + res.stderr
        out = json.loads(res.stdout)
        assert out["status"] == "done", out
        units = store.units(store.runs("prestagelab")[0].id)
        pre = [u for u in units if u.step == "prestage"]
        assert sorted(n for u in pre for n in u.nodes) == ["ceph-0", "compute-0"]
        stops = [u for u in units if u.step in ("leave", "stop")]
        assert stops and max(u.ended_at for u in pre) <= min(u.started_at for u in stops)
        for node in NODES.split(","):
            cache = the_lab.read_state(node, "dnf-cache.json", {})
            after = the_lab.read_state(node, "packages.json")
            changed = {p for p in after if after[p] != before[node].get(p)}
            # what the node installed is what its prestage had fetched, at that version
            assert changed and changed <= set(cache), (node, changed, cache)
            assert all(after[p]["version"] == cache[p]["version"] for p in changed)
        api = [r for r in probe.records if r["target"].startswith("vip:")]
        assert api and [r for r in probe.records if not r["ok"]] == []
    finally:
        lab.down(lab_dir)
        shutil.rmtree(tmp_path / ".stepwise", ignore_errors=True)
