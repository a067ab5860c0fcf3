"""Container-style nodes in the lab (issue #23): a real registry, real images and digests,
units that run their container's image, and a registry that can fail.

One lab of examples/tripleo-containers.yaml serves every lab test here (it is also the check
that the example comes up)."""

from __future__ import annotations

import json
import subprocess
import time
import urllib.request
from pathlib import Path

import pytest

from stepwise.lab import control, images
from stepwise.lab.faults import inject
from tests.lab.conftest import Node

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "tripleo-containers.yaml"
REGISTRY = "127.0.0.1:8787"  # the example's `containers.registry`
KEYSTONE = f"{REGISTRY}/tripleo/openstack-keystone"
CTRL = "controller-openstack-0"


@pytest.fixture(scope="module")
def clab(tmp_path_factory):
    with pytest.MonkeyPatch.context() as mp:
        base = tmp_path_factory.mktemp("containers")
        mp.setenv("STEPWISE_LAB_HOME", str(base / "labs"))
        t0 = time.monotonic()
        lab = control.up(EXAMPLE, base / "lab", progress=print)
        print(f"lab up of the example: {time.monotonic() - t0:.1f}s")
        try:
            yield lab
        finally:
            control.down(lab.dir)


def _health(address: str, port: int) -> dict:
    with urllib.request.urlopen(f"http://{address}:{port}/healthcheck", timeout=3) as r:
        return json.loads(r.read())


def _pull(n: Node, ref: str) -> str:
    t0 = time.monotonic()
    image_id = n.run(f"podman pull --tls-verify=false {ref}").stdout.strip()
    print(f"podman pull on {n.name}: {time.monotonic() - t0:.2f}s")
    return image_id


@pytest.mark.lab
def test_registry_digests_are_real(clab):
    n = Node(clab, CTRL)
    st = control.status(clab)
    registry = next(c for c in st["components"] if c["name"] == "registry")
    assert registry["kind"] == "real" and "serving" in registry["detail"]
    row = next(r for r in st["nodes"] if r["name"] == CTRL)
    assert row["container_runtime"].startswith("stand-in")
    assert next(r for r in st["nodes"] if r["name"] == "database-0")["container_runtime"] is None
    listed = json.loads(
        n.run(f"skopeo inspect --tls-verify=false docker://{KEYSTONE}:current").stdout
    )
    image_id = _pull(n, f"{KEYSTONE}:current")
    [pulled] = json.loads(n.run(f"podman image inspect {KEYSTONE}:current").stdout)
    assert pulled["Digest"] == listed["Digest"] and pulled["Id"] == image_id
    assert f"{KEYSTONE}@{listed['Digest']}" in pulled["RepoDigests"]
    # the deployed 1.0.0 image is another image; the update tag is 1.1.0's
    [deployed] = json.loads(n.run(f"podman image inspect {KEYSTONE}:1.0.0").stdout)
    assert deployed["Digest"] != pulled["Digest"]
    assert listed["Labels"]["org.opencontainers.image.version"] == "1.1.0"
    nxt = f"{REGISTRY}/tripleo-next/openstack-keystone:current"
    upgrade = json.loads(n.run(f"skopeo inspect docker://{nxt}").stdout)
    assert upgrade["Labels"]["org.opencontainers.image.version"] == "2.0.0"
    assert n.run("podman image exists no.where/x:1", check=False).returncode == 1
    # the services are in images: the host has no package of theirs to update
    host = n.run("dnf list installed").stdout
    assert "openstack-keystone" not in host and "kernel" in host


@pytest.mark.lab
def test_switching_the_container_image_changes_what_the_service_runs(clab):
    n = Node(clab, CTRL)
    address = clab.node(CTRL)["address"]
    port = clab.service("keystone")["port"]
    assert _health(address, port)["version"] == "1.0.0"
    [c] = json.loads(n.run("podman inspect keystone").stdout)
    assert c["ImageName"] == f"{KEYSTONE}:1.0.0" and c["State"]["Status"] == "running"
    _pull(n, f"{KEYSTONE}:current")
    n.run("podman rm -f keystone")
    failed = n.run("systemctl start tripleo_keystone", check=False)
    assert failed.returncode == 1 and "no container" in failed.stderr
    n.run(f"podman create --name keystone {KEYSTONE}:current")
    n.run("systemctl restart tripleo_keystone")
    assert n.run("systemctl is-active tripleo_keystone").stdout.strip() == "active"
    assert _health(address, port)["version"] == "1.1.0"
    vip = clab.spec["vips"]["keystone"]
    seen: set[tuple[str, str]] = set()
    deadline = time.monotonic() + 20
    while ((CTRL, "1.1.0") not in seen) and time.monotonic() < deadline:
        try:
            h = _health(vip["address"], vip["port"])
            seen.add((h["node"], h["version"]))
        except OSError:
            pass
        time.sleep(0.2)
    assert (CTRL, "1.1.0") in seen, seen
    assert (CTRL, "1.0.0") not in seen
    st = control.status(clab)
    row = next(r for r in st["nodes"] if r["name"] == CTRL)
    assert next(s for s in row["services"] if s["name"] == "keystone")["version"] == "1.1.0"


@pytest.mark.lab
def test_registry_down_fails_pulls_and_services_keep_serving(clab):
    n = Node(clab, "controller-openstack-1")
    vip = clab.spec["vips"]["nova_api"]
    try:
        inject(clab, "registry-down", "")
        r = n.run(f"podman pull {REGISTRY}/tripleo/openstack-nova-api:current", check=False)
        assert r.returncode == 125 and r.stderr.startswith("Error: ")
        # podman's words, about the registry the node knows (not the lab's address)
        assert "connection refused" in r.stderr and REGISTRY in r.stderr, r.stderr
        assert clab.spec["containers"]["lab_registry"] not in r.stderr
        assert _health(vip["address"], vip["port"])["ok"]
        st = control.status(clab)
        assert (
            "NOT answering"
            in next(c for c in st["components"] if c["name"] == "registry")["detail"]
        )
    finally:
        inject(clab, "clear", "registry")
    _pull(n, f"{REGISTRY}/tripleo/openstack-nova-api:current")


def test_images_are_built_once_and_deterministic(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    t0 = time.monotonic()
    assert images.ensure(["openstack-a", "openstack-b"]) == 6
    cold = time.monotonic() - t0
    t1 = time.monotonic()
    assert images.ensure(["openstack-a", "openstack-b"]) == 0
    print(f"image build: cold {cold:.3f}s, cached {time.monotonic() - t1:.3f}s")
    index = json.loads((images.layout("openstack-a", "1.1.0") / "index.json").read_text())
    manifest_digest = index["manifests"][0]["digest"]
    blobs = images.layout("openstack-a", "1.1.0") / "blobs" / "sha256"
    manifest = json.loads((blobs / manifest_digest.removeprefix("sha256:")).read_text())
    layer = blobs / manifest["layers"][0]["digest"].removeprefix("sha256:")
    assert images.version_in_layer(layer) == "1.1.0"
    # rebuilt elsewhere, the same bytes: the digest is the image's, not the build's
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "again"))
    images.ensure(["openstack-a"])
    again = json.loads((images.layout("openstack-a", "1.1.0") / "index.json").read_text())
    assert again["manifests"][0]["digest"] == manifest_digest
    other = json.loads((images.layout("openstack-a", "2.0.0") / "index.json").read_text())
    assert other["manifests"][0]["digest"] != manifest_digest
    # skopeo reads the layout as an OCI image (what lab up pushes)
    res = subprocess.run(
        ["skopeo", "inspect", f"oci:{images.layout('openstack-a', '1.1.0')}:1.1.0"],
        capture_output=True, text=True, check=True,
    )  # fmt: skip
    assert json.loads(res.stdout)["Digest"] == manifest_digest


def test_names_of_the_contract():
    from stepwise.lab import containers as C
    from stepwise.lab.spec import build_spec
    from stepwise.model import load_deployment

    spec = build_spec(load_deployment(EXAMPLE), "/nonexistent", 7)
    c = spec["containers"]
    assert c["services"]["nova_api"] == {
        "image": "openstack-nova-api", "style": "tripleo", "unit": "tripleo_nova_api",
    }  # fmt: skip
    # the database stays the real Galera on a packages-style role: no image, no container
    assert "galera" not in c["services"] and C.node_style(spec, "database-0") is None
    assert C.ref(spec, "keystone", "current") == f"{KEYSTONE}:current"
    # the registry of lab 7 is in lab 7's own addresses; refs are rewritten both ways
    assert c["lab_registry"] == "127.107.0.2:8787"
    moved = C.to_lab_registry(spec, f"{KEYSTONE}:current")
    assert moved == "127.107.0.2:8787/tripleo/openstack-keystone:current"
    assert C.from_lab_registry(spec, moved) == f"{KEYSTONE}:current"
