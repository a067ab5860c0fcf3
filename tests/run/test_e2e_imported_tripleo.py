"""End to end on a cloud imported from TripleO's files (slow: minutes; `pytest -m e2e`).

The seed's composed layout, imported from a roles file in THT's format with THT's default
resource registry (what a default deployment really runs), brought up in the lab: every
service without a detailed emulation runs as a generic emulated service with its health
check. A minor update of the imported cloud fails no probe request.
"""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

import pytest
import yaml

from tests.run.test_e2e_lab import _lab_or_skip

FIX = Path(__file__).resolve().parents[1] / "fixtures" / "tripleo"

#: in CI again since stop 60: 213 s alone with the lab's module runs forked from a warm
#: interpreter (27 minutes beside CI's heavy labs in stop 41's run, when it was marked slow)
pytestmark = [pytest.mark.e2e, pytest.mark.lab]


@pytest.fixture
def work():
    # short path: the lab's unix sockets live under it (108-byte limit)
    d = Path(tempfile.mkdtemp(prefix="swt-"))
    yield d
    shutil.rmtree(d, ignore_errors=True)


def test_minor_update_of_an_imported_composed_cloud_fails_no_request(work: Path):
    _lab_or_skip()
    import stepwise.lab as lab
    from stepwise.cli.demo_checks import kernels
    from stepwise.cli.demo_cmd import _phase
    from stepwise.model import load_catalog, load_deployment
    from stepwise.model.importing import import_tripleo
    from stepwise.run.discover import discover, stored_facts
    from stepwise.run.store import open_store

    # the three-node control-plane roles keep their quorums; one networker and one ceph node
    # (`--count`) keep the run to what CI can afford, the import is the same
    imp = import_tripleo(
        FIX / "roles_data_composed.yaml",
        load_catalog(),
        stack="overcloud",
        environments=[FIX / "default-services-disabled.yaml"],
        counts={"Networker": 1, "CephStorage": 1},
    )
    path = work / "deployment.yaml"
    path.write_text(yaml.safe_dump(imp.doc, sort_keys=False))
    dep = load_deployment(path)
    lab_dir = work / "lab"
    lab.up(path, lab_dir)
    try:
        store = open_store(f"sqlite:///{work / 'store.sqlite'}")
        conn = lab.connector(lab_dir)
        discover(dep, store, connector=conn)
        before = kernels(lab_dir)
        out = _phase("minor update", "update", dep, store, lab_dir, stored_facts(dep, store), True)
        after = kernels(lab_dir)
    finally:
        lab.down(lab_dir)
    assert out["status"] == "done", out
    assert out["probe"]["requests"] > 0
    assert out["probe"]["failed"] == 0, out["probe"]
    # the minor update installs the new kernel on every node and reboots into it, the computes
    # too (their instances moved away first: the probe's workloads failed nothing above)
    computes = [n for n in after if "novacompute" in n]
    new = "4.18.1"
    assert computes and all(
        before[n]["running"] == "4.18.0" and after[n]["installed"] == after[n]["running"] == new
        for n in computes
    ), (before, after)
