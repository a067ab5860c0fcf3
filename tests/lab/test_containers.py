"""Container-style nodes in the lab (issue #23): a real registry, real images and digests,
units that run their container's image, and a registry that can fail.

One lab of examples/tripleo-containers.yaml serves every lab test here (it is also the check
that the example comes up)."""

from __future__ import annotations

import json
import subprocess
import tarfile
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
NOVA = f"{REGISTRY}/tripleo/openstack-nova-api"
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
    address = clab.node(CTRL).address
    port = clab.service("nova_api").port
    assert _health(address, port)["version"] == "1.0.0"
    [c] = json.loads(n.run("podman inspect nova_api").stdout)
    assert c["ImageName"] == f"{NOVA}:1.0.0" and c["State"]["Status"] == "running"
    _pull(n, f"{NOVA}:current")
    n.run("podman rm -f nova_api")
    failed = n.run("systemctl start tripleo_nova_api", check=False)
    assert failed.returncode == 1 and "no container" in failed.stderr
    n.run(f"podman create --name nova_api {NOVA}:current")
    n.run("systemctl restart tripleo_nova_api")
    assert n.run("systemctl is-active tripleo_nova_api").stdout.strip() == "active"
    assert _health(address, port)["version"] == "1.1.0"
    vip = clab.spec.vips["nova_api"]
    seen: set[tuple[str, str]] = set()
    deadline = time.monotonic() + 20
    while ((CTRL, "1.1.0") not in seen) and time.monotonic() < deadline:
        try:
            h = _health(vip.address, vip.port)
            seen.add((h["node"], h["version"]))
        except OSError:
            pass
        time.sleep(0.2)
    assert (CTRL, "1.1.0") in seen, seen
    assert (CTRL, "1.0.0") not in seen
    st = control.status(clab)
    row = next(r for r in st["nodes"] if r["name"] == CTRL)
    assert next(s for s in row["services"] if s["name"] == "nova_api")["version"] == "1.1.0"


def _real_code(clab, node: str, service: str) -> tuple[str, Path]:
    """What `lab status` says a real service runs on a node, and the venv its uWSGI serves."""
    st = control.status(clab)
    row = next(r for r in st["nodes"] if r["name"] == node)
    detail = next(s for s in row["services"] if s["name"] == service)["runs"]
    ini = clab.node_path(node, "/etc/keystone/keystone-uwsgi.ini").read_text()
    venv = next(line.split("=", 1)[1].strip() for line in ini.splitlines() if "virtualenv" in line)
    return detail, Path(venv)


@pytest.mark.lab
def test_a_real_service_runs_the_code_its_node_unpacked_from_its_image(clab):
    from stepwise.lab import podman

    node = "controller-openstack-1"
    n = Node(clab, node)
    detail, venv = _real_code(clab, node, "keystone")
    assert detail.startswith("keystone 24.0.0 (2023.2, first patch)"), detail
    assert "from its container's image" in detail
    # the venv is a layer of the image the container runs, unpacked in the node's own store
    [c] = json.loads(n.run("podman inspect keystone").stdout)
    [image] = json.loads(n.run(f"podman image inspect {c['Image']}").stdout)
    layers = podman.images_of(clab, node)[image["Id"]]["layers"]
    assert venv == podman.layer_dir(clab, node, layers[0]) / images.VENV_DIR
    assert venv.is_relative_to(clab.node_root(node))
    # the image is the registry's (by digest), and its first layer is the release's code
    listed = json.loads(
        n.run(f"skopeo inspect --tls-verify=false docker://{KEYSTONE}:1.0.0").stdout
    )
    assert image["Digest"] == listed["Digest"] and len(listed["Layers"]) == 2
    # the schema tool runs from that code too (as `podman exec keystone keystone-manage` would)
    assert n.run("keystone-manage db_version").stdout.strip()
    # the update's image: switched, configured for it, restarted: the new code serves
    _pull(n, f"{KEYSTONE}:current")
    n.run("podman rm -f keystone")
    n.run(f"podman create --name keystone {KEYSTONE}:current")
    n.run("os-apply-config")
    n.run("systemctl restart tripleo_keystone")
    detail, new_venv = _real_code(clab, node, "keystone")
    assert detail.startswith("keystone 24.1.0 (2023.2, latest patch)"), detail
    assert new_venv != venv and new_venv.is_relative_to(clab.node_root(node))
    vip = clab.spec.vips["keystone"]
    with urllib.request.urlopen(f"http://{vip.address}:{vip.port}/v3", timeout=5) as r:
        assert r.status == 200


@pytest.mark.lab
def test_registry_down_fails_pulls_and_services_keep_serving(clab):
    n = Node(clab, "controller-openstack-1")
    vip = clab.spec.vips["nova_api"]
    try:
        inject(clab, "registry-down", "")
        r = n.run(f"podman pull {REGISTRY}/tripleo/openstack-nova-api:current", check=False)
        assert r.returncode == 125 and r.stderr.startswith("Error: ")
        # podman's words, about the registry the node knows (not the lab's address)
        assert "connection refused" in r.stderr and REGISTRY in r.stderr, r.stderr
        assert clab.spec.containers.lab_registry not in r.stderr
        assert _health(vip.address, vip.port)["ok"]
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


def test_a_real_service_image_carries_its_release_venv_as_a_shared_layer(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    venvs = {}
    for version in images.VERSIONS:  # a tiny venv per release stands for the built ones
        venv = tmp_path / f"venv-{version}"
        (venv / "bin").mkdir(parents=True)
        (venv / "pyvenv.cfg").write_text("home = /usr/bin\n")
        (venv / "bin" / "keystone-manage").write_text(f"# code of {version}\n")
        (venv / "bin" / "python").symlink_to("/usr/bin/python3")
        venvs[version] = venv
    monkeypatch.setattr(images, "_venv", lambda series, version: venvs[version])
    real = {"openstack-keystone": "2023.2", "openstack-glance-api": "2023.2"}
    assert images.ensure(list(real), real) == 6

    def manifest(image: str, version: str) -> tuple[Path, dict]:
        root = images.layout(image, version, "2023.2")
        index = json.loads((root / "index.json").read_text())
        digest = index["manifests"][0]["digest"].removeprefix("sha256:")
        return root, json.loads((root / "blobs" / "sha256" / digest).read_text())

    root, m = manifest("openstack-keystone", "1.1.0")
    venv_blob = root / "blobs" / "sha256" / m["layers"][0]["digest"].removeprefix("sha256:")
    meta_blob = root / "blobs" / "sha256" / m["layers"][1]["digest"].removeprefix("sha256:")
    assert images.version_in_layer(meta_blob) == "1.1.0"
    with tarfile.open(venv_blob, mode="r:gz") as tar:
        code = tar.extractfile("venv/bin/keystone-manage").read().decode()
        assert code == "# code of 1.1.0\n"
        # the interpreter link is kept as the venv has it (not rewritten to /venv)
        assert tar.getmember("venv/bin/python").linkname == "/usr/bin/python3"
    # one blob for the release's code, whatever service's image holds it
    other_root, other = manifest("openstack-glance-api", "1.1.0")
    assert other["layers"][0] == m["layers"][0]
    other_blob = other_root / "blobs" / "sha256" / m["layers"][0]["digest"].removeprefix("sha256:")
    assert other_blob.stat().st_ino == venv_blob.stat().st_ino
    assert manifest("openstack-keystone", "2.0.0")[1]["layers"][0] != m["layers"][0]
    res = subprocess.run(
        ["skopeo", "inspect", f"oci:{root}:1.1.0"], capture_output=True, text=True, check=True
    )
    assert len(json.loads(res.stdout)["Layers"]) == 2
    # a venv rebuilt from a changed lock is another venv: its release's images are rebuilt
    assert images.ensure(list(real), real) == 0
    venvs["1.1.0"] = venvs["1.1.0"].rename(tmp_path / "venv-1.1.0-relocked")
    assert images.ensure(list(real), real) == 2
    assert manifest("openstack-keystone", "1.1.0")[0] != root


def test_names_of_the_contract():
    from stepwise.lab import containers as lab_containers
    from stepwise.lab.labspec import ContainerService
    from stepwise.lab.spec import build_spec
    from stepwise.model import load_deployment

    spec = build_spec(load_deployment(EXAMPLE), "/nonexistent", 7)
    c = spec.containers
    assert c.services["nova_api"] == ContainerService(
        image="openstack-nova-api", style="tripleo", unit="tripleo_nova_api", series=None
    )
    # a real service's image carries its release's code
    assert c.services["keystone"].series == "2023.2"
    # the database stays the real Galera on a packages-style role: no image, no container
    assert "galera" not in c.services and lab_containers.node_style(spec, "database-0") is None
    assert lab_containers.ref(spec, "keystone", "current") == f"{KEYSTONE}:current"
    # the registry of lab 7 is in lab 7's own addresses; refs are rewritten both ways
    assert c.lab_registry == "127.107.0.2:8787"
    moved = lab_containers.to_lab_registry(spec, f"{KEYSTONE}:current")
    assert moved == "127.107.0.2:8787/tripleo/openstack-keystone:current"
    assert lab_containers.from_lab_registry(spec, moved) == f"{KEYSTONE}:current"
