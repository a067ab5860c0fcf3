"""The lab's HAProxy names its backends as the catalog's `frontend:` does (no lab comes up):
the generic drain addresses `nova_osapi`, `keystone_public`, ... on a lab node as on a
TripleO controller, and the database keeps its service's name (galera drains itself)."""

from __future__ import annotations

from pathlib import Path

from stepwise.lab import haproxy
from stepwise.lab.spec import build_spec
from stepwise.model import load_deployment

ROOT = Path(__file__).resolve().parents[2]


def test_the_lab_balancer_names_each_backend_after_the_catalogs_frontend(tmp_path: Path):
    dep = load_deployment(ROOT / "examples" / "classic.yaml")
    spec = build_spec(dep, str(tmp_path), 9)
    services = spec.services
    assert services["nova_api"].frontend == "nova_osapi"
    assert services["keystone"].frontend == "keystone_public"
    assert spec.db_service == "galera" and services["galera"].frontend == "galera"
    listens = [
        line.split()[1]
        for line in haproxy.render(spec, tmp_path).splitlines()
        if line.startswith("listen ")
    ]
    assert {"nova_osapi", "keystone_public", "glance_api", "neutron", "cinder", "galera"} <= set(
        listens
    )
    assert "nova_api" not in listens and "keystone" not in listens
