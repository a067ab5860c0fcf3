"""A failed bootstrap of the lab's real OpenStack says why from the service's own logs."""

from __future__ import annotations

from pathlib import Path

from stepwise.lab.nodes import Lab
from stepwise.lab.openstack import bootstrap, config
from tests.lab_json import lab_json


def test_the_keystone_log_tails_of_its_nodes_are_shown(tmp_path: Path):
    (tmp_path / "lab.json").write_text(
        lab_json(
            {
                "controller-0": {"services": ["keystone", "galera"]},
                "database-0": {"services": ["galera"]},
            }
        )
    )
    lab = Lab(tmp_path)
    log = config.paths(lab, "controller-0", "keystone")["log"]
    log.parent.mkdir(parents=True)
    log.write_text("".join(f"line {i}\n" for i in range(30)) + "ERROR keystone: no database\n")
    said = bootstrap.service_log_tails(lab, "keystone")
    assert "controller-0" in said and str(log) in said
    assert "ERROR keystone: no database" in said and "line 29" in said
    assert "line 5\n" not in said  # the last lines only
    assert "database-0" not in said
