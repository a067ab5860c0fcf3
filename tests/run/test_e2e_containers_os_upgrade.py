"""The OS upgrade of a containerized cloud (`-m e2e`, issue #36 item 3): the seed's procedure
(major-upgrades-with-os-upgrade is written for containerized TripleO) on
examples/tripleo-containers.yaml, through its command table (in CI the lab's stand-ins in the
containers, two controllers, no compute: tests/run/fixtures/tripleo-containers-mini.yaml).

Each controller's host goes to the new OS with leapp while its containers are stopped; after
it, before any service starts, the node pulls the next release's images (nothing of the new
release is fetched on the old OS), writes each container's startup config with its target
image by digest and recreates the container from it; pacemaker (on the host) and Galera (the
packages-style database role) form their new clusters with the catalog's commands.
Afterwards: every node on the new OS, every service healthy, every container running the
digest the registry holds for the next release, and no request failed outside the windows the
plans announced. On the example itself (slow) real keystone, placement and glance run from
the images' venvs and a real OpenStack client calls them through every step; after it they
serve 2024.1 with their schemas at its head, the rows written before step 1 kept.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.run.seed_table import assert_failures_inside_windows, seed_cli
from tests.run.test_e2e_containers import (
    UPGRADE_NS,
    _containerized,
    _real_code,
    _registry_digests,
    _running_digests,
)
from tests.run.test_e2e_lab import _lab_or_skip, lab_dir  # noqa: F401 - the fixture

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "tripleo-containers.yaml"
MINI = ROOT / "tests" / "run" / "fixtures" / "tripleo-containers-mini.yaml"

pytestmark = [pytest.mark.e2e, pytest.mark.lab]


@pytest.mark.parametrize(
    "example",
    [
        MINI,
        # real OpenStack in the images: 663 s alone on 2 cores, a heavy lab that CI's hour has
        # no room for (scripts/test.sh: STEPWISE_TEST_SLOW=1)
        pytest.param(EXAMPLE, marks=pytest.mark.slow),
    ],
    ids=lambda p: p.stem,
)
def test_containerized_cloud_through_the_os_upgrade(
    example: Path,
    tmp_path: Path,
    lab_dir: Path,  # noqa: F811 - the fixture
):
    _lab_or_skip()
    import stepwise.lab as lab
    from stepwise.lab.control import status as lab_status
    from stepwise.lab.nodes import Lab
    from stepwise.lab.openstack import checks
    from stepwise.lab.probe import Probe
    from stepwise.model import load_deployment
    from stepwise.plan.commands import seed_commands

    dep_path = tmp_path / example.name
    dep_path.write_text(example.read_text())
    store_url = f"sqlite:///{tmp_path / 'store.sqlite'}"
    log: list[str] = []
    sw = seed_cli(dep_path, lab_dir, store_url, log)

    lab.up(dep_path, lab_dir)
    the_lab = Lab(lab_dir)
    try:
        cnodes = [n for n in the_lab.spec.nodes if _containerized(the_lab, n)]
        assert len(cnodes) >= 2, "a first new-OS container node and one after it"
        before = _running_digests(the_lab, cnodes)
        real = bool(the_lab.spec.real_services())
        code = _real_code(the_lab, cnodes) if real else {}
        seeded = checks.seed(the_lab) if real else {}
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
        vips = {k: v["requests"] for k, v in summary["targets"].items() if k.startswith("vip:")}
        assert set(vips) == {f"vip:{name}" for name in the_lab.spec.vips} and all(vips.values())
        if real:
            assert code and _real_code(the_lab, cnodes) == dict.fromkeys(code, "2024.1")
            schemas = checks.schemas(the_lab)
            assert all(v["at_head"] and v["code"] == "2024.1" for v in schemas.values()), schemas
            assert checks.seed_kept(the_lab, seeded)["kept"]
            client = {k: v for k, v in summary["targets"].items() if k.startswith("client:")}
            assert set(client) == {"client:keystone", "client:placement", "client:glance"}
            assert all(c["requests"] > 0 for c in client.values()), client
        cloud = load_deployment(dep_path).name
        assert_failures_inside_windows(probe.records, store_url, cloud, log)
    finally:
        lab.down(lab_dir)
        (tmp_path / "commands.log").write_text("\n".join(log))
