"""The management node's upgrade end to end (seed undercloud-upgrade, and the OS part of
major-upgrades-with-os-upgrade): leapp, reboot into the new OS, then the undercloud upgrade,
across a database major version (MariaDB 10.3 on OS 8 -> 10.5 on OS 9)."""

from __future__ import annotations

import calendar
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.run.test_e2e_lab import STEPWISE, _lab_or_skip, lab_dir  # noqa: F401 - the fixture

ROOT = Path(__file__).resolve().parents[2]
UNDERCLOUD = ROOT / "examples" / "undercloud.yaml"

pytestmark = [pytest.mark.e2e, pytest.mark.lab]


def _t(dt) -> float:
    return calendar.timegm(dt.timetuple()) + dt.microsecond / 1e6


def test_management_node_os_and_release_upgrade_across_a_database_major(
    tmp_path: Path,
    lab_dir: Path,  # noqa: F811 - the fixture imported above
):
    _lab_or_skip()
    import stepwise.lab as lab
    from stepwise.lab import mariadb
    from stepwise.lab import services as lab_services
    from stepwise.lab.control import status as lab_status
    from stepwise.lab.nodes import Lab
    from stepwise.run.store import open_store

    dep_path = tmp_path / UNDERCLOUD.name
    shutil.copy(UNDERCLOUD, dep_path)
    store_url = f"sqlite:///{tmp_path / 'store.sqlite'}"
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    lab.up(dep_path, lab_dir)
    the_lab = Lab(lab_dir)
    try:
        node = next(iter(the_lab.spec.nodes))
        db = the_lab.spec.services["galera"]
        host, port = the_lab.node(node).address, db.db_port
        rows = [(f"uc-{i}", f"before the upgrade ({i})") for i in range(25)]
        for k, v in rows:
            mariadb.execute(host, port, "INSERT INTO data VALUES (%s, %s)", (k, v))
        assert lab_services.installed(the_lab, node)["mariadb-server"]["version"].startswith("10.3")
        common = ["-d", str(dep_path), "--lab", str(lab_dir), "--store", store_url]
        subprocess.run([STEPWISE, "discover", *common], env=env, check=True, capture_output=True)
        p = subprocess.run(
            [
                STEPWISE,
                "management-upgrade",
                "run",
                *common,
                "-e",
                "target_release=R2",
                "-e",
                "system_upgrade_mode=in-place",
                "--yes",
            ],
            env=env,
            capture_output=True,
            text=True,
            timeout=900,
        )
        assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]

        st = lab_status(the_lab)
        (n,) = st["nodes"]
        assert n["os_major"] == 9 and n["release"] == "R2"
        assert all(s["healthy"] and s["state"] == "active" for s in n["services"]), n["services"]
        assert lab_services.installed(the_lab, node)["mariadb-server"]["version"].startswith("10.5")
        assert sorted(mariadb.execute(host, port, "SELECT k, v FROM data")) == sorted(rows)

        store = open_store(store_url)
        (run,) = store.runs("undercloud")
        units = {u.step: [] for u in store.units(run.id)}
        for u in sorted(store.units(run.id), key=lambda u: u.seq):
            assert u.state == "done", (u.unit_id, u.state, u.message)
            units[u.step].append(u)
        (dump,), stops = units["backup"], units["stop"]
        assert _t(dump.ended_at) <= _t(stops[0].started_at), (
            "the dump is taken while the database runs"
        )
        (os_run,), (restore,) = units["system_upgrade_run"], units["restore"]
        assert _t(os_run.ended_at) <= _t(restore.started_at)
        db_start = units["start"][0]
        assert "galera" in db_start.services
        assert all(_t(m.started_at) >= _t(db_start.ended_at) for m in units["migrate"]), (
            "DB syncs after the DB is up"
        )
    finally:
        lab.down(lab_dir)
