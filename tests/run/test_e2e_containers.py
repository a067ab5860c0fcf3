"""End to end on a containerized lab (slow: minutes; `pytest -m e2e`), issue #23.

examples/tripleo-containers.yaml (controllers in TripleO's podman containers, images in the
lab's real registry, the database role in packages style; keystone, placement and glance are
real OpenStack whose images carry the release's venv) through a minor update of the
containerized controllers (`--limit`: the compute's containers stay as they are) and a major
upgrade of every node, each with its prestage: the images are pulled and checked by digest on
every node before any service stops, then the units only switch containers. The probe calls
every VIP and a real OpenStack client calls keystone, placement and glance all along: no failed
request. A registry stopped during the upgrade's prestage fails the prestage and disrupts
nothing; the same command continues once it is back. After each, every container runs the digest
the registry holds for its target, and the real services run the code their node unpacked from
that image (2023.2's latest patch, then 2024.1, with the schemas at its head).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from stepwise.lab.probe import failed
from tests.lab.conftest import Node  # a node command as a task runs it
from tests.run.test_e2e_lab import _lab_or_skip, lab_dir  # noqa: F401 - the fixture

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "tripleo-containers.yaml"
STEPWISE = str(Path(sys.executable).parent / "stepwise")
UPGRADE_NS = "tripleo-next"  # the example's containers.upgrade_namespace
CONTAINER_ROLE = "ControllerOpenstack"  # the example's role whose services are in containers

#: slow: ~22 minutes beside CI's other lane on 2 cores (stop 41's fresh-clone run), on CI's
#: critical path with the demo and the seed's OS upgrade; scripts/test.sh runs it with
#: STEPWISE_TEST_SLOW=1 (tests/lab/test_containers.py stays in: real services from their images)
pytestmark = [pytest.mark.e2e, pytest.mark.lab, pytest.mark.slow]


class _Cli:
    """stepwise commands against one deployment, store and lab."""

    def __init__(self, dep: Path, store: str, lab: Path):
        self.common = ["-d", str(dep), "--store", store, "--lab", str(lab)]

    def __call__(self, *args: str, ok: bool = True) -> subprocess.CompletedProcess:
        env = {**os.environ, "PYTHONPATH": str(ROOT)}
        yes = [] if args[0] == "discover" else ["--yes"]
        p = subprocess.run(
            [STEPWISE, *args, *self.common, *yes],
            env=env,
            capture_output=True,
            text=True,
            # a safety net against a hang, not a time budget: the upgrade's 101 units took over
            # 15 minutes on 2 cores shared with another real-OpenStack scenario
            timeout=2400,
        )
        assert not ok or p.returncode == 0, f"stepwise {' '.join(args)}: {p.stdout}{p.stderr}"
        return p


def _containerized(the_lab, node: str) -> list[str]:
    from stepwise.lab import containers

    return [
        s for s in the_lab.node(node).services if containers.containerized(the_lab.spec, node, s)
    ]


def _running_digests(the_lab, nodes: list[str]) -> dict[tuple[str, str], str]:
    """(node, container) -> the digest of the image the node's container runs, as the node's
    own `podman inspect` says."""
    return {
        (n, s): _json(Node(the_lab, n).run(f"podman inspect {s}"))[0]["ImageDigest"]
        for n in nodes
        for s in _containerized(the_lab, n)
    }


def _json(done: subprocess.CompletedProcess):
    """A node command's JSON output; what it printed when that is not JSON (stop 56's CI once
    read two documents from one `podman inspect`, and nothing was kept to say why)."""
    try:
        return json.loads(done.stdout)
    except json.JSONDecodeError as exc:
        raise AssertionError(
            f"{done.args}: {exc}\nstdout: {done.stdout!r}\nstderr: {done.stderr!r}"
        ) from exc


def _registry_digests(the_lab, node: str, namespace: str | None) -> dict[str, str]:
    """container -> the digest the registry holds for the image the target names (the node's
    skopeo asking the registry)."""
    from stepwise.lab import containers

    tag = the_lab.spec.containers.tag
    out = {}
    for s in _containerized(the_lab, node):
        ref = containers.ref(the_lab.spec, s, tag, namespace)
        r = Node(the_lab, node).run(f"skopeo inspect --tls-verify=false docker://{ref}")
        out[s] = _json(r)["Digest"]
    return out


def _real_code(the_lab, nodes: list[str]) -> dict[tuple[str, str], str]:
    """(node, real service) -> the release whose code it serves; each must be served from the
    venv its node unpacked from the image of the service's container."""
    from stepwise.lab import podman
    from stepwise.lab.control import status

    out = {}
    rows = {r["name"]: r for r in status(the_lab)["nodes"]}
    for n in nodes:
        for s in rows[n]["services"]:
            if s["kind"] == "real" and s["name"] in the_lab.spec.openstack.services:
                assert "from its container's image" in s["runs"], (n, s)
                assert podman.venv_of_container(the_lab, n, s["name"]) is not None
                out[(n, s["name"])] = s["runs"].split("(", 1)[1].split(")", 1)[0]
    return out


def _vips_answered(summary: dict, the_lab) -> None:
    """Every VIP of the lab was asked (a probe that made no request proves nothing) and no
    request failed; a probe that stopped sampling early fails here too (`failed`)."""
    asked = {k: v["requests"] for k, v in summary["targets"].items() if k.startswith("vip:")}
    assert set(asked) == {f"vip:{name}" for name in the_lab.spec.vips}, summary
    assert all(asked.values()), asked
    assert failed(summary, "vip:") == {}, summary


def _served(summary: dict, the_lab) -> dict:
    """The probe's summary, once it is checked that every VIP was asked and no VIP request and
    no call of the real OpenStack client (which the lab's probe runs beside it) failed, and
    that the client called keystone, placement and glance."""
    _vips_answered(summary, the_lab)
    calls = {k: v["requests"] for k, v in summary["targets"].items() if k.startswith("client:")}
    assert set(calls) == {"client:keystone", "client:placement", "client:glance"}, summary
    assert all(calls.values()), calls
    assert failed(summary, "client:") == {}, summary
    return summary


def _units(store_url: str, result: subprocess.CompletedProcess) -> list:
    """The units the run printed by `result` recorded."""
    from stepwise.run.store import open_store

    return list(open_store(store_url).units(json.loads(result.stdout)["run_id"]))


def test_containerized_update_and_upgrade_with_prestage(
    tmp_path: Path,
    lab_dir: Path,  # noqa: F811 - the fixture
):
    _lab_or_skip()
    import stepwise.lab as lab
    from stepwise.lab.faults import inject
    from stepwise.lab.nodes import Lab
    from stepwise.lab.openstack import checks
    from stepwise.lab.probe import Probe

    dep = tmp_path / EXAMPLE.name
    dep.write_text(EXAMPLE.read_text())
    url = f"sqlite:///{tmp_path / 'store.sqlite'}"
    cli = _Cli(dep, url, lab_dir)
    lab.up(dep, lab_dir)
    the_lab = Lab(lab_dir)
    try:
        cnodes = [n for n in the_lab.spec.nodes if _containerized(the_lab, n)]
        ctrl = [n for n in cnodes if the_lab.node(n).role == CONTAINER_ROLE]
        assert ctrl and set(ctrl) != set(cnodes), "the example has container-style roles"
        before = _running_digests(the_lab, cnodes)
        code = _real_code(the_lab, cnodes)
        assert set(code.values()) == {"2023.2, first patch"}, code
        seeded = checks.seed(the_lab)

        # the minor update of the containerized role: the deployment's tag now names newer
        # images (the packages-style database nodes' update is other scenarios' subject; the
        # upgrade below takes every node)
        cli("discover")
        with Probe(the_lab, rate=4.0) as probe:
            upd = cli("update", "run", "--limit", CONTAINER_ROLE, "--json")
        probe.stop()
        assert json.loads(upd.stdout)["status"] == "done", upd.stdout
        _served(probe.summary(), the_lab)
        units = _units(url, upd)
        prestaged = [u for u in units if u.step == "prestage"]
        assert {n for u in prestaged for n in u.nodes} == set(ctrl)
        first_stop = min(u.started_at for u in units if u.step == "stop")
        assert all(u.ended_at <= first_stop for u in prestaged), "pulled before any stop"
        updated = _running_digests(the_lab, cnodes)
        for n in ctrl:
            want = _registry_digests(the_lab, n, None)
            assert {s: updated[(n, s)] for s in want} == want
            assert all(updated[(n, s)] != before[(n, s)] for s in want)
        assert {k: v for k, v in updated.items() if k[0] not in ctrl} == {
            k: v for k, v in before.items() if k[0] not in ctrl
        }, "a node outside --limit switched"
        assert _real_code(the_lab, cnodes) == dict.fromkeys(code, "2023.2, latest patch")

        # the major upgrade: a registry down during the prestage disrupts nothing
        cli("discover", "-e", f"target_namespace={UPGRADE_NS}")
        prepare = ("upgrade", "prepare", "-e", "target_release=R2", "--json")
        inject(the_lab, "registry-down", "registry")
        with Probe(the_lab, rate=4.0) as probe:
            refused = cli(*prepare, ok=False)
        probe.stop()
        assert refused.returncode != 0, refused.stdout
        assert json.loads(refused.stdout)["status"] == "failed", refused.stdout
        units = _units(url, refused)
        failed_units = [u for u in units if u.state == "failed"]
        assert failed_units and all(u.step == "prestage" for u in failed_units), failed_units
        assert not [u for u in units if u.step in ("stop", "leave") and u.state != "pending"]
        assert _running_digests(the_lab, cnodes) == updated
        _vips_answered(probe.summary(), the_lab)

        inject(the_lab, "clear", "registry")
        with Probe(the_lab, rate=4.0) as probe:
            cli(*prepare)
            cli("upgrade", "run", "-e", "target_release=R2", "--json")
            cli("upgrade", "converge", "-e", "target_release=R2", "--json")
        probe.stop()
        summary = _served(probe.summary(), the_lab)
        print(
            "containers upgrade probe:",
            {k: (v["requests"], v["failed"]) for k, v in summary["targets"].items()},
        )
        upgraded = _running_digests(the_lab, cnodes)
        for n in cnodes:
            want = _registry_digests(the_lab, n, UPGRADE_NS)
            assert {s: upgraded[(n, s)] for s in want} == want
        assert _real_code(the_lab, cnodes) == dict.fromkeys(code, "2024.1")
        # the schema tools ran from the new images' code: every schema at 2024.1's head
        schemas = checks.schemas(the_lab)
        assert all(v["at_head"] and v["code"] == "2024.1" for v in schemas.values()), schemas
        assert checks.seed_kept(the_lab, seeded)["kept"]
    finally:
        lab.down(lab_dir)
