"""A lab node's container image store and containers (what podman keeps in
/var/lib/containers): images pulled with the real skopeo into OCI layouts in the node's root
(one per image, their blobs in one shared directory, so a layer two images share, such as a
release's venv, is fetched and stored once per node), their registry digests, each layer
unpacked once (`layers/<digest>/`, as podman's overlay storage keeps them), and the
containers created from them.

No container engine runs here (one machine, no nested namespaces for several nodes): a unit
starts the service from its container's image, the stand-in at the version of the image's
metadata layer, real OpenStack code from the venv unpacked from the image; so `lab status`
says the runtime is a stand-in while images, digests, tags, layers and the registry are real.
"""

from __future__ import annotations

import json
import re
import secrets
import shutil
import subprocess
from pathlib import Path
from typing import Any

from stepwise.lab import containers as lab_containers
from stepwise.lab import images
from stepwise.lab.nodes import Lab, file_lock

STORE = "/var/lib/containers/storage/stepwise-dir"
IMAGES = "podman-images.json"
CONTAINERS = "podman-containers.json"


class PodmanError(Exception):
    """What podman prints with exit 125."""


def store(lab: Lab, node: str) -> Path:
    return lab.node_path(node, STORE)


def blob(lab: Lab, node: str, digest: str) -> Path:
    """Where a node keeps a blob (layer, config, manifest) it pulled."""
    return store(lab, node) / "blobs" / "sha256" / digest.removeprefix("sha256:")


def layer_dir(lab: Lab, node: str, digest: str) -> Path:
    """Where a node keeps a layer unpacked."""
    return store(lab, node) / "layers" / digest.removeprefix("sha256:")


def images_of(lab: Lab, node: str) -> dict[str, Any]:
    return lab.read_state(node, IMAGES, {}) or {}


def containers_of(lab: Lab, node: str) -> dict[str, Any]:
    return lab.read_state(node, CONTAINERS, {}) or {}


def _repo(reference: str) -> str:
    """A reference without its tag or digest."""
    name = reference.split("@", 1)[0]
    slash = name.rfind("/")
    colon = name.rfind(":")
    return name[:colon] if colon > slash else name


def pull(lab: Lab, node: str, reference: str) -> str:
    """Copy an image from the registry into the node's store (the real skopeo) and unpack its
    layers; returns its id. Raises PodmanError as podman fails (registry down, unknown tag)."""
    source = lab_containers.to_lab_registry(lab.spec, reference)
    tmp = store(lab, node) / f"tmp-{secrets.token_hex(6)}"
    tmp.parent.mkdir(parents=True, exist_ok=True)
    # a blob the node holds already is not fetched again (skopeo reuses the shared directory)
    res = subprocess.run(
        ["/usr/bin/skopeo", "copy", "--quiet", "--src-tls-verify=false",
         "--dest-shared-blob-dir", str(store(lab, node) / "blobs"),
         f"docker://{source}", f"oci:{tmp}:image"],
        capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    if res.returncode != 0:
        shutil.rmtree(tmp, ignore_errors=True)
        why = _why(res.stderr).replace(source, reference)
        why = lab_containers.from_lab_registry(lab.spec, why).replace(
            lab.spec.containers.lab_registry, lab.spec.containers.registry
        )
        raise PodmanError(f"Error: {why}")
    index = json.loads((tmp / "index.json").read_text())
    digest = index["manifests"][0]["digest"]
    manifest = json.loads(blob(lab, node, digest).read_bytes())
    image_id = manifest["config"]["digest"].removeprefix("sha256:")
    layers = [layer["digest"].removeprefix("sha256:") for layer in manifest["layers"]]
    try:
        for layer in layers:
            _unpack(lab, node, layer)
    except PodmanError:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    final = store(lab, node) / image_id
    with lab.node_lock(node):
        if final.exists():
            shutil.rmtree(tmp, ignore_errors=True)
        else:
            tmp.rename(final)
        known = images_of(lab, node)
        entry = known.setdefault(image_id, {"repo_tags": [], "repo_digests": []})
        # the metadata layer (version file) is the image's last
        entry.update(digest=digest, layer=layers[-1], layers=layers)
        repo = _repo(reference)
        tags = [reference] if "@" not in reference else []
        for tag in tags:
            for other in known.values():  # a tag names one image
                if tag in other["repo_tags"]:
                    other["repo_tags"].remove(tag)
        entry["repo_tags"] = sorted(set(entry["repo_tags"]) | set(tags))
        entry["repo_digests"] = sorted(set(entry["repo_digests"]) | {f"{repo}@{digest}"})
        lab.write_state(node, IMAGES, known)
    return image_id


def _unpack(lab: Lab, node: str, layer: str) -> None:
    """Unpack a pulled layer once (GNU tar reads gzip and plain tar alike); a marker says it
    is whole, so an unpack cut short is redone."""
    target = layer_dir(lab, node, layer)
    if (target / ".stepwise-unpacked").is_file():
        return
    with file_lock(target.with_name(target.name + ".lock")):
        if (target / ".stepwise-unpacked").is_file():
            return
        shutil.rmtree(target, ignore_errors=True)
        target.mkdir(parents=True)
        res = subprocess.run(
            ["tar", "-xf", str(blob(lab, node, layer)), "-C", str(target)],
            capture_output=True, text=True, timeout=300, check=False,
        )  # fmt: skip
        if res.returncode != 0:
            raise PodmanError(f"Error: unpacking layer {layer[:12]}: {res.stderr.strip()}")
        (target / ".stepwise-unpacked").write_text("ok")


def _why(stderr: str) -> str:
    """skopeo's reason (its log line's `msg`)."""
    lines = stderr.strip().splitlines() or ["failed"]
    m = re.search(r'msg="(.*)"', lines[-1])
    return m.group(1).replace('\\"', '"') if m else lines[-1]


def find_image(lab: Lab, node: str, reference: str) -> tuple[str, dict[str, Any]] | None:
    """The image a reference names on this node: a tag, a name@digest, or an id (prefix)."""
    known = images_of(lab, node)
    ref = reference.removeprefix("sha256:")
    for image_id, entry in known.items():
        if reference in entry["repo_tags"] or reference in entry["repo_digests"]:
            return image_id, entry
        if len(ref) >= 12 and image_id.startswith(ref):
            return image_id, entry
    if "@" in reference:  # REF:TAG@DIGEST names the digest
        repo, _, digest = reference.partition("@")
        for image_id, entry in known.items():
            if f"{_repo(repo)}@{digest}" in entry["repo_digests"]:
                return image_id, entry
    return None


def inspect_image(image_id: str, entry: dict[str, Any]) -> dict[str, Any]:
    """podman image inspect's fields the contract names."""
    return {
        "Id": image_id,
        "Digest": entry["digest"],
        "RepoTags": entry["repo_tags"],
        "RepoDigests": entry["repo_digests"],
    }


def create(lab: Lab, node: str, name: str, image: str) -> str:
    found = find_image(lab, node, image)
    if found is None:
        raise PodmanError(f"Error: {image}: image not known")
    with lab.node_lock(node):
        known = containers_of(lab, node)
        if name in known:
            raise PodmanError(
                f'Error: creating container storage: the container name "{name}" is already '
                "in use. You have to remove that container to be able to reuse that name"
            )
        cid = secrets.token_hex(32)
        known[name] = {
            "id": cid, "image": found[0], "image_name": image, "digest": found[1]["digest"],
        }  # fmt: skip
        lab.write_state(node, CONTAINERS, known)
    return cid


def remove(lab: Lab, node: str, name: str) -> bool:
    with lab.node_lock(node):
        known = containers_of(lab, node)
        gone = known.pop(name, None)
        lab.write_state(node, CONTAINERS, known)
    return gone is not None


def _image_of_container(lab: Lab, node: str, service: str) -> dict[str, Any] | None:
    """The store's entry of the image the service's container was created from (None when the
    container or its image is absent)."""
    c = containers_of(lab, node).get(service)
    return images_of(lab, node).get(c["image"]) if c else None


def container_version(lab: Lab, node: str, service: str) -> str | None:
    """The version the service's container would run: its image's version file. None when
    the container or its image is absent (its unit cannot start)."""
    entry = _image_of_container(lab, node, service)
    return images.version_in_layer(blob(lab, node, entry["layer"])) if entry else None


def venv_of_container(lab: Lab, node: str, service: str) -> Path | None:
    """Where the code of a real service's container is: the venv unpacked from its image's
    layers (None when the container, its image or a venv in it is absent)."""
    entry = _image_of_container(lab, node, service)
    for layer in entry.get("layers", []) if entry else []:
        venv = layer_dir(lab, node, layer) / images.VENV_DIR
        if (venv / "pyvenv.cfg").is_file():
            return venv
    return None


def _write_startup_config(lab: Lab, node: str, service: str, reference: str) -> None:
    """The container startup config a deployed node holds (what tripleo_container_manage or
    kolla-ansible wrote at deploy time): the image the container runs, by digest. A switch
    rewrites it."""
    from stepwise.model.choices import DeployStyle
    from stepwise.model.containers import startup_config

    style = DeployStyle(lab_containers.node_style(lab.spec, node))
    found = find_image(lab, node, reference)
    digest = found[1]["digest"] if found else ""
    path = lab.node_path(node, startup_config(service, style))
    path.parent.mkdir(parents=True, exist_ok=True)
    # the same shape as the switch writes: the reference, then the digest it resolved to
    path.write_text(json.dumps({"image": f"{reference}@{digest}" if digest else reference}) + "\n")


def deploy(lab: Lab, node: str) -> None:
    """What the deployment does on a container-style node at lab up: pull each service's
    deployed image (1.0.0) and create its container (the unit starts it at boot)."""
    for s in lab.node(node).services:
        if lab_containers.containerized(lab.spec, node, s):
            reference = lab_containers.ref(lab.spec, s, lab_containers.DEPLOYED_TAG)
            pull(lab, node, reference)
            create(lab, node, s, reference)
            _write_startup_config(lab, node, s, reference)
