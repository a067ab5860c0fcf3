"""The OS upgrade of real OpenStack (`-m e2e`): examples/openstack.yaml through the seed's 12 steps.

Three controllers run real keystone, placement and glance (2023.2 from PyPI under uWSGI) on the
real Galera cluster. The seed's command forms move them, one at a time, to the new OS and to
2024.1 at once: controller-0 first (its OS, then the one-time copy of an old member's Galera
datadir onto it, which bootstraps the new cluster, then the new release), the others after it
(they join the new cluster by SST). A real OpenStack client keeps calling through every step.
Afterwards: every node on the new OS and release, the project, resource provider and image
created before step 1 are still there (the rows moved by the datadir copy and SST), each
schema is at 2024.1's head, the datadir was copied exactly once, and no probe or client call
failed outside the downtime the plans announced.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.run.seed_table import assert_failures_inside_windows, seed_cli
from tests.run.test_e2e_lab import lab_dir  # noqa: F401 - the fixture
from tests.run.test_e2e_real_openstack import _lab_or_fail

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "openstack.yaml"

#: in CI again since stop 60: 249 s alone (~20 minutes when it was marked slow, before the lab's
#: module runs were forked from a warm interpreter and its schemas kept)
pytestmark = [pytest.mark.e2e, pytest.mark.lab]


def test_real_openstack_through_the_os_upgrade(tmp_path: Path, lab_dir: Path):  # noqa: F811
    _lab_or_fail()
    import stepwise.lab as lab
    from stepwise.lab.control import status as lab_status
    from stepwise.lab.nodes import Lab
    from stepwise.lab.openstack import checks
    from stepwise.lab.probe import Probe
    from stepwise.run.store import open_store

    dep_path = tmp_path / EXAMPLE.name
    dep_path.write_text(EXAMPLE.read_text())
    store_url = f"sqlite:///{tmp_path / 'store.sqlite'}"
    log: list[str] = []
    sw = seed_cli(dep_path, lab_dir, store_url, log)

    lab.up(dep_path, lab_dir)
    the_lab = Lab(lab_dir)
    try:
        seeded = checks.seed(the_lab)
        sw("discover")
        from stepwise.model import load_deployment
        from stepwise.plan.commands import seed_commands

        # 1 prepare; 2-4 controller-0 into the new OS; 5 an old member's Galera datadir onto it
        # (the control plane's announced downtime); 6-7 the new release on it; 8-9 the others
        # one by one, joining the new cluster by SST; 10-12 online migrations, converge (with
        # keystone's and glance's contract), cleanup
        commands = seed_commands(load_deployment(dep_path), "R2")
        assert (
            "external-upgrade",
            "run",
            "--tags",
            "system_upgrade_transfer_data",
            "--limit",
            "Controller",
        ) in commands
        with Probe(the_lab, rate=2.0) as probe:
            for argv in commands:
                sw(*argv)
        summary = probe.stop()

        status = lab_status(the_lab)
        assert {n["name"]: n["os_major"] for n in status["nodes"]} == {
            n["name"]: 9 for n in status["nodes"]
        }
        assert all(n["release"] == "R2" for n in status["nodes"]), status["nodes"]
        assert all(s["healthy"] for n in status["nodes"] for s in n["services"]), status["nodes"]
        # the rows written by real OpenStack before step 1 came through the datadir copy and SST
        kept = checks.seed_kept(the_lab, seeded)
        assert kept["kept"] and kept["checked"] == 3, kept
        schemas = checks.schemas(the_lab)
        assert all(s["at_head"] and s["code"] == "2024.1" for s in schemas.values()), schemas

        store = open_store(store_url)
        transfers = [
            u
            for r in store.runs("openstack", limit=1000)
            for u in store.units(r.id)
            if u.step == "system_upgrade_transfer_data" and u.state == "done"
        ]
        assert len(transfers) == 1, transfers
        client = {k: v for k, v in summary["targets"].items() if k.startswith("client:")}
        assert set(client) == {"client:keystone", "client:placement", "client:glance"}, summary[
            "targets"
        ].keys()
        assert all(c["requests"] > 0 for c in client.values()), client
        # the probe's and the client's failures fall inside the windows the plans announced
        # (stop 40's failures outside them were a plan defect: a leave that drained an API's
        # last servers opened no window, fixed in stop 42)
        assert_failures_inside_windows(probe.records, store_url, "openstack", log)
    finally:
        lab.down(lab_dir)
        (tmp_path / "commands.log").write_text("\n".join(log))
