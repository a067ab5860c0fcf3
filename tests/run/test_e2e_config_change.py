"""End to end on the lab (slow: minutes; `pytest -m e2e`): a configuration change alone.

The deployment renders nova_compute's new configuration on compute-0 only; discover hashes it
against the running one with the node's sha256sum; the minor update restarts nova_compute
there (drain, stop, config, start, rejoin: no package step) and nowhere else; afterwards the
node runs the rendered file and discover finds nothing left to restart.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tests.run.test_e2e_lab import _lab_or_skip, lab_dir  # noqa: F401 - the fixture

ROOT = Path(__file__).resolve().parents[2]
CLASSIC = ROOT / "examples" / "classic.yaml"
STEPWISE = str(Path(sys.executable).parent / "stepwise")

pytestmark = [pytest.mark.e2e, pytest.mark.lab]


def _stepwise(*args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run([STEPWISE, *args], env=env, capture_output=True, text=True)


def _discover(dep: Path, lab: Path, out: Path) -> dict:
    """Discover's facts, with every package kept at its installed version: only the
    configuration changes in this test (the lab's repositories offer 1.1.0 updates)."""
    r = _stepwise("discover", "-d", str(dep), "--lab", str(lab), "-o", str(out), "--force")
    assert r.returncode == 0, r.stdout + r.stderr
    facts = yaml.safe_load(out.read_text())
    for nf in facts["nodes"].values():
        for pf in nf.get("packages", {}).values():
            pf["available"] = pf.get("installed")
    out.write_text(yaml.safe_dump(facts))
    return facts


def test_config_change_restarts_only_that_service_where_it_changed(
    tmp_path: Path,
    lab_dir: Path,  # noqa: F811 - the fixture
):
    _lab_or_skip()
    import stepwise.lab as lab
    from stepwise.lab.nodes import Lab

    dep = tmp_path / "classic.yaml"
    dep.write_text(CLASSIC.read_text())
    lab.up(dep, lab_dir)
    try:
        nodes = Lab(lab_dir)
        running = nodes.node_path("compute-0", "/etc/nova_compute/nova_compute.conf")
        staged = nodes.node_path(
            "compute-0",
            "/var/lib/config-data/puppet-generated/nova_compute/etc/nova_compute/nova_compute.conf",
        )
        staged.parent.mkdir(parents=True, exist_ok=True)
        staged.write_text(running.read_text() + "\n[stepwise_test]\nchanged = 1\n")

        facts_path = tmp_path / "facts.yaml"
        facts = _discover(dep, lab_dir, facts_path)
        changed = {
            (n, s)
            for n, nf in facts["nodes"].items()
            for s, c in (nf.get("config") or {}).items()
            if c.get("rendered") and c.get("current") and c["rendered"] != c["current"]
        }
        assert changed == {("compute-0", "nova_compute")}

        r = _stepwise(
            "update",
            "run",
            "-d",
            str(dep),
            "--lab",
            str(lab_dir),
            "--facts",
            str(facts_path),
            "--json",
            "--yes",
        )
        assert r.returncode == 0, r.stdout + r.stderr
        res = json.loads(r.stdout)
        assert res["status"] == "done" and res["units"]["failed"] == []
        assert running.read_text() == staged.read_text()

        plan = json.loads(
            _stepwise("plan", "update", "-d", str(dep), "--facts", str(facts_path), "--json").stdout
        )
        steps = {u["step"] for u in plan["units"]}
        assert "packages" not in steps and {"leave", "stop", "config", "start"} <= steps
        assert {n for u in plan["units"] for n in u["nodes"]} == {"compute-0"}

        again = tmp_path / "again.yaml"
        _discover(dep, lab_dir, again)
        r = _stepwise("plan", "update", "-d", str(dep), "--facts", str(again), "--json")
        assert json.loads(r.stdout)["units"] == []
    finally:
        lab.down(lab_dir)
