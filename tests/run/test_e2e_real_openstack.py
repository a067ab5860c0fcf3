"""Real OpenStack through a rolling minor update and a major upgrade, on the lab (`-m e2e`).

`stepwise demo` on examples/openstack.yaml: three controllers run real keystone, placement and
glance (PyPI code of 2023.2 under uWSGI, behind the real HAProxy VIPs, on the real Galera
cluster). The minor update (2023.2 first patch -> latest patch) and the major upgrade
(2023.2 -> 2024.1, keystone and glance expand/contract, placement's additive sync) run under a
real OpenStack client issuing tokens, listing projects, creating resource providers and images
through the VIPs: no call fails. Afterwards every schema is at the new code's head, the project,
resource provider and image created before the runs are still there (the image's data too),
and tempest's identity and image API tests pass.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from pathlib import Path

import pytest
from typer.testing import CliRunner

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "openstack.yaml"

pytestmark = [pytest.mark.e2e, pytest.mark.lab]


def _lab_or_fail() -> None:
    from stepwise.lab import haproxy, mariadb

    try:
        mariadb.binaries()
        haproxy.binary()
        if not shutil.which("uwsgi"):
            raise RuntimeError("uwsgi not found (Debian: uwsgi-core, uwsgi-plugin-python3)")
    except Exception as exc:  # pragma: no cover - depends on the machine
        if os.environ.get("CI"):
            pytest.fail(f"the lab cannot run here: {exc}")
        pytest.skip(f"no lab here: {exc}")


def test_real_openstack_minor_update_and_major_upgrade(tmp_path: Path):
    _lab_or_fail()
    from stepwise.cli.main import _register

    _register()
    from stepwise.cli.main import app

    short = Path(tempfile.mkdtemp(prefix="swo-"))  # unix sockets live under the lab dir
    try:
        r = CliRunner().invoke(
            app,
            [
                "demo",
                "-d",
                str(EXAMPLE),
                "--lab-dir",
                str(short / "lab"),
                "--json",
                "--report",
                str(tmp_path / "demo.html"),
            ],
        )
    finally:
        shutil.rmtree(short, ignore_errors=True)
    if r.exception and not isinstance(r.exception, SystemExit):
        raise r.exception
    assert r.exit_code == 0, r.output
    report = json.loads(r.output[r.output.index("{") :])
    phases = {p["phase"]: p for p in report["phases"]}
    assert set(phases) >= {
        "minor update",
        "upgrade prepare",
        "upgrade run (control plane)",
        "upgrade converge",
    }
    assert all(p["status"] == "done" for p in phases.values()), phases
    # the real client kept calling every real service through every phase and no call failed:
    # a node's APIs leave the load balancer and finish their requests before they stop; its
    # Galera member leaves the database VIP and waits until the services' pools have moved
    # their connections to the next member between two queries (connection_recycle_time),
    # and comes back only once synced. Every failure is printed with the units running then.
    for title, p in phases.items():
        client = p["probe"]["client"]
        assert set(client) == {"client:keystone", "client:placement", "client:glance"}, (
            title,
            client,
        )
        assert all(c["requests"] > 0 for c in client.values()), (title, client)
        print(f"{title}: client {client}; failures {p['probe']['failures']}")
        assert sum(c["failed"] for c in client.values()) == 0, (
            title,
            client,
            p["probe"]["failures"],
        )
        assert p["probe"]["failed"] == 0, (
            title,
            p["probe"]["targets_with_failures"],
            p["probe"]["failures"],
        )
    os_report = report["openstack"]
    # the schemas moved to 2024.1's head by the services' own tools: keystone's expand and
    # glance's expand/migrate/contract changed real tables
    assert all(s["at_head"] and s["code"] == "2024.1" for s in os_report["schemas"].values()), (
        os_report["schemas"]
    )
    before = os_report["schemas_before"]
    for svc in ("keystone", "glance_api"):
        assert before[svc]["version"] != os_report["schemas"][svc]["version"], (
            svc,
            before,
            os_report["schemas"],
        )
    assert os_report["seed"]["kept"] and os_report["seed"]["checked"] == 3, os_report["seed"]
    tempest = os_report["tempest"]
    assert tempest["ok"] and tempest["passed"] > 0 and tempest["failed"] == 0, tempest
    # what `status` says of each node agrees with what the lab's nodes have installed
    assert report["status_agrees_with_lab"]["checked"] > 0
    assert report["status_agrees_with_lab"]["mismatches"] == []
    # it ends by writing the report of its runs, the probe's measurements included
    assert (tmp_path / "demo.html").stat().st_size > 10_000
    doc = (tmp_path / "demo.html").read_text()
    assert report["report"] == str((tmp_path / "demo.html").resolve())
    assert all(f"run {p['run']}: " in doc for p in report["phases"]) and "vip:keystone" in doc
