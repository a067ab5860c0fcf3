"""The OS upgrade of a containerized cloud (`-m e2e`, issue #36 item 3): the seed's procedure
(major-upgrades-with-os-upgrade is written for containerized TripleO) on
examples/tripleo-containers.yaml, through its command table.

Each controller's host goes to the new OS with leapp while its containers are stopped; after
it, before any service starts, the node pulls the next release's images (nothing of the new
release is fetched on the old OS), writes each container's startup config with its target
image by digest and recreates the container from it; pacemaker (on the host) and Galera (the
packages-style database role) form their new clusters with the catalog's commands. Real
keystone, placement and glance run from the images' venvs and a real OpenStack client calls
them through every step. Afterwards: every node on the new OS, every container running the
digest the registry holds for the next release, the real services on 2024.1 with their schemas
at its head, the rows written before step 1 kept, and no request failed outside the windows
the plans announced.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from tests.run.test_e2e_containers import (
    UPGRADE_NS,
    _containerized,
    _real_code,
    _registry_digests,
    _running_digests,
)
from tests.run.test_e2e_lab import STEPWISE, lab_dir  # noqa: F401 - the fixture
from tests.run.test_e2e_real_openstack import _lab_or_fail

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "tripleo-containers.yaml"

pytestmark = [pytest.mark.e2e, pytest.mark.lab]


def test_containerized_cloud_through_the_os_upgrade(tmp_path: Path, lab_dir: Path):  # noqa: F811
    _lab_or_fail()
    import stepwise.lab as lab
    from stepwise.lab.control import status as lab_status
    from stepwise.lab.nodes import Lab
    from stepwise.lab.openstack import checks
    from stepwise.lab.probe import Probe
    from stepwise.model import load_deployment
    from stepwise.observe.windows import cloud_intervals, outside_windows
    from stepwise.plan.commands import seed_commands
    from stepwise.run.store import open_store

    dep_path = tmp_path / EXAMPLE.name
    dep_path.write_text(EXAMPLE.read_text())
    store_url = f"sqlite:///{tmp_path / 'store.sqlite'}"
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    log: list[str] = []

    def sw(*args: str) -> subprocess.CompletedProcess:
        # the prestage has its own scenarios; here the new OS's images are fetched by each
        # node's config step, after its OS upgrade
        yes = [] if args[0] == "discover" else ["--yes", "--no-prestage"]
        p = subprocess.run(
            [STEPWISE, *args, "-d", str(dep_path), "--lab", str(lab_dir), "--store", store_url]
            + yes,
            env=env,
            capture_output=True,
            text=True,
            timeout=1800,  # against a hang only
        )
        log.append(
            f"$ stepwise {' '.join(args)} -> {p.returncode}\n{p.stdout[-1500:]}{p.stderr[-1500:]}"
        )
        assert p.returncode == 0, "\n".join(log[-3:])
        return p

    lab.up(dep_path, lab_dir)
    the_lab = Lab(lab_dir)
    try:
        cnodes = [n for n in the_lab.spec.nodes if _containerized(the_lab, n)]
        before = _running_digests(the_lab, cnodes)
        code = _real_code(the_lab, cnodes)
        seeded = checks.seed(the_lab)
        # the target images' digests, as the registry holds them, for the switch to check
        sw("discover", "-e", f"target_namespace={UPGRADE_NS}")
        commands = seed_commands(load_deployment(dep_path), "R2")
        with Probe(the_lab, rate=2.0) as probe:
            for argv in commands:
                sw(*argv)
        summary = probe.stop()

        status = lab_status(the_lab)
        assert {n["name"]: n["os_major"] for n in status["nodes"]} == {
            n["name"]: 9 for n in status["nodes"]
        }
        assert all(s["healthy"] for n in status["nodes"] for s in n["services"]), status["nodes"]
        upgraded = _running_digests(the_lab, cnodes)
        for n in cnodes:
            want = _registry_digests(the_lab, n, UPGRADE_NS)
            assert {s: upgraded[(n, s)] for s in want} == want, n
            assert all(upgraded[(n, s)] != before[(n, s)] for s in want), n
        assert _real_code(the_lab, cnodes) == dict.fromkeys(code, "2024.1")
        schemas = checks.schemas(the_lab)
        assert all(v["at_head"] and v["code"] == "2024.1" for v in schemas.values()), schemas
        assert checks.seed_kept(the_lab, seeded)["kept"]

        client = {k: v for k, v in summary["targets"].items() if k.startswith("client:")}
        assert set(client) == {"client:keystone", "client:placement", "client:glance"}, client
        assert all(c["requests"] > 0 for c in client.values()), client
        intervals = cloud_intervals(open_store(store_url), "tripleo-containers")
        outside = outside_windows(probe.records, intervals)
        if outside:
            failed = [
                r for r in probe.records if not r.get("ok") and str(r.get("target")) in outside
            ]
            log.append(f"failed outside windows: {outside}; windows: {intervals}")
            log.extend(
                f"  t={float(r['t']):.1f} {r.get('target')} {str(r.get('error', ''))[:200]}"
                for r in failed[:60]
            )
        assert not outside, f"requests failed outside the announced windows: {outside}"
    finally:
        lab.down(lab_dir)
        (tmp_path / "commands.log").write_text("\n".join(log))
