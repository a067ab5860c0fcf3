"""A one-controller cloud through the seed's OS upgrade in reprovision mode (`-m e2e`, issue #36
item 5): its controller is Galera's only member, so no other member holds the data the wipe
would lose. The plan persists the datadir (the catalog's `data:`) with the node's
configuration before the wipe and restores it after; the rows written before step 1 are read
back from the real MariaDB afterwards, and nothing was transferred (there was no one to
transfer from)."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from tests.run.seed_table import seed_cli, write_rows
from tests.run.test_e2e_lab import STEPWISE, _lab_or_skip, lab_dir  # noqa: F401 - the fixture

ROOT = Path(__file__).resolve().parents[2]
LONE = """\
name: lone
description: one controller, Galera's only member
roles:
  - name: Controller
    tags: [controlplane]
    update_serial: 1
    services: [pacemaker, haproxy, galera, keystone]
    nodes:
      - {name: controller-0, address: 127.0.1.10}
"""
REPROVISION = ("-e", "system_upgrade_mode=reprovision")

pytestmark = [pytest.mark.e2e, pytest.mark.lab]


def test_a_lone_database_member_keeps_its_rows_through_a_reprovision(
    tmp_path: Path,
    lab_dir: Path,  # noqa: F811
):
    _lab_or_skip()
    import stepwise.lab as lab
    from stepwise.lab import mariadb
    from stepwise.lab.control import status as lab_status
    from stepwise.lab.nodes import Lab
    from stepwise.model import load_deployment
    from stepwise.plan.commands import seed_commands
    from stepwise.run.store import open_store

    dep_path = tmp_path / "lone.yaml"
    dep_path.write_text(LONE)
    store_url = f"sqlite:///{tmp_path / 'store.sqlite'}"
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    log: list[str] = []

    # one controller: every step of its control plane is an announced window
    sw = seed_cli(dep_path, lab_dir, store_url, log, run_options=["--accept-downtime"])

    plan = subprocess.run(
        [STEPWISE, "plan", "system-upgrade", "-d", str(dep_path), "--expand"],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    said = " ".join(plan.stdout.split())
    assert "controller-0 alone holds /var/lib/mysql: a reprovision keeps it" in said, said
    assert "on the data the node kept" in said and "transferred data" not in said, said

    lab.up(dep_path, lab_dir)
    the_lab = Lab(lab_dir)
    try:
        galera = the_lab.spec.services["galera"]
        at = (the_lab.node("controller-0").address, galera.db_port)
        rows = write_rows(*at)
        sw("discover")
        for argv in seed_commands(load_deployment(dep_path), "R2"):
            tags = argv[argv.index("--tags") + 1] if "--tags" in argv else ""
            into_new_os = argv[0] == "upgrade" and tags.startswith("system_upgrade_")
            sw(*argv, *(REPROVISION if into_new_os else ()))

        status = lab_status(the_lab)
        node = next(n for n in status["nodes"] if n["name"] == "controller-0")
        assert (node["os_major"], node["release"]) == (9, "R2"), node
        assert all(s["healthy"] for s in node["services"]), node["services"]
        # the rows the wipe would have taken came back with the persisted datadir
        assert sorted(mariadb.execute(*at, "SELECT k, v FROM data")) == sorted(rows)
        store = open_store(store_url)
        units = [u for r in store.runs("lone", limit=1000) for u in store.units(r.id)]
        assert not [u for u in units if u.step == "system_upgrade_transfer_data"], units
        prepared = [u for u in units if u.step == "system_upgrade_prepare" and u.state == "done"]
        assert len(prepared) == 1, prepared
        assert not (tmp_path / ".stepwise" / "persist" / "lone" / "controller-0").exists()
    finally:
        lab.down(lab_dir)
        (tmp_path / "commands.log").write_text("\n".join(log))
