"""Real OCI images of the lab's services, built once per machine.

One OCI image layout per (service image, release version) under
`~/.cache/stepwise/lab/images-v1/<image>/<version>/`. A stand-in's image is a single gzip
layer holding its program marker (`/stepwise/program`) and its version (`/stepwise/version`),
an OCI config and manifest, written with tarfile + hashlib, deterministic (fixed mtimes, owner,
gzip header): the same image has the same digest on every machine.

A real OpenStack service's image (`openstack/<venv>/<image>/<version>/`) carries the code
the lab runs for that version: the release's venv (lab/openstack/venvs.py) as its first layer,
`/venv` in the image, then the same small metadata layer. The three services of a release
share the venv layer (one blob, hard-linked into each layout), as images built on one base
share it in a registry. skopeo pushes the layouts to the lab's registry; nodes pull them back
with skopeo, so what digests say is real.
"""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import os
import shutil
import subprocess
import tarfile
from pathlib import Path

from stepwise.lab.nodes import file_lock

CACHE_VERSION = "images-v1"
#: the versions the lab publishes (lab/repos.py: R1, R1-updates, R2)
VERSIONS = ("1.0.0", "1.1.0", "2.0.0")
PROGRAM = "python3 -m stepwise.lab.svcproc"
VERSION_FILE = "stepwise/version"
MEDIA_MANIFEST = "application/vnd.oci.image.manifest.v1+json"
MEDIA_CONFIG = "application/vnd.oci.image.config.v1+json"
MEDIA_LAYER = "application/vnd.oci.image.layer.v1.tar+gzip"
#: where a real service's image holds its code
VENV_DIR = "venv"


def cache_root() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "stepwise" / "lab" / CACHE_VERSION


def layout(image: str, version: str, series: str | None = None) -> Path:
    """The OCI layout of one image version (built by `ensure`); `series`: the image of real
    OpenStack code of that series, kept under the name of the venv it carries (a venv rebuilt
    from a changed lock is a new venv, so its images are new too)."""
    if series is None:
        return cache_root() / image / version
    return cache_root() / "openstack" / _venv(series, version).name / image / version


def _layer(image: str, version: str, program: str = PROGRAM) -> tuple[bytes, str]:
    """The gzip layer and the digest of its uncompressed tar (the config's diff_id)."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tar:
        d = tarfile.TarInfo("stepwise")
        d.type, d.mode, d.mtime = tarfile.DIRTYPE, 0o755, 0
        tar.addfile(d)
        files = {
            "stepwise/program": f"{program} {image}\n",
            VERSION_FILE: f"{version}\n",
        }
        for name, text in files.items():
            data = text.encode()
            info = tarfile.TarInfo(name)
            info.size, info.mode, info.mtime = len(data), 0o644, 0
            tar.addfile(info, io.BytesIO(data))
    raw = buf.getvalue()
    gz = io.BytesIO()
    with gzip.GzipFile(fileobj=gz, mode="wb", mtime=0, filename="") as fh:
        fh.write(raw)
    return gz.getvalue(), "sha256:" + hashlib.sha256(raw).hexdigest()


def _blob(root: Path, data: bytes) -> tuple[str, int]:
    digest = hashlib.sha256(data).hexdigest()
    path = root / "blobs" / "sha256" / digest
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    return "sha256:" + digest, len(data)


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        while chunk := fh.read(1 << 20):
            h.update(chunk)
    return "sha256:" + h.hexdigest()


def venv_layer(venv: Path) -> tuple[Path, str, str]:
    """A built venv as the gzip layer `/venv`, built once per venv: GNU tar (sorted names,
    root owner; the files keep their mtimes so the venv's compiled bytecode stays valid where
    it is unpacked), then `gzip -1 -n` (no name or time in the header). Compressed here once
    rather than by skopeo at every lab's push (a registry stores layers compressed). Returns
    the file, its digest and the digest of the uncompressed tar (the config's diff_id)."""
    out = cache_root() / "venv-layers" / f"{venv.name}.tar.gz"
    sums = out.with_name(out.name + ".sha256")
    if sums.is_file() and out.is_file():
        digest, diff_id = sums.read_text().split()
        return out, digest, diff_id
    out.parent.mkdir(parents=True, exist_ok=True)
    tar = out.with_name(out.name + ".tmp.tar")
    subprocess.run(
        ["tar", "--sort=name", "--owner=0", "--group=0", "--numeric-owner",
         "--exclude=./.stepwise-ready", "--transform", f"s,^\\.,{VENV_DIR},S",
         "-C", str(venv), "-cf", str(tar), "."],
        check=True, capture_output=True, timeout=600,
    )  # fmt: skip
    diff_id = _sha256(tar)
    subprocess.run(["gzip", "-1", "-n", "-f", str(tar)], check=True, timeout=600)
    Path(str(tar) + ".gz").rename(out)
    digest = _sha256(out)
    sums.write_text(f"{digest} {diff_id}\n")
    return out, digest, diff_id


def _link_blob(root: Path, path: Path, digest: str) -> int:
    """A big blob put into a layout by a hard link (a copy across file systems)."""
    dest = root / "blobs" / "sha256" / digest.removeprefix("sha256:")
    dest.parent.mkdir(parents=True, exist_ok=True)
    if not dest.exists():
        try:
            os.link(path, dest)
        except OSError:
            shutil.copyfile(path, dest)
    return path.stat().st_size


def _write(root: Path, image: str, version: str, venv: Path | None = None) -> None:
    """One image layout; with `venv`, the venv layer first (a real service's image)."""
    program = PROGRAM if venv is None else "uwsgi"
    layer, diff_id = _layer(image, version, program)
    layer_digest, layer_size = _blob(root, layer)
    layers = [{"mediaType": MEDIA_LAYER, "digest": layer_digest, "size": layer_size}]
    diff_ids = [diff_id]
    if venv is not None:
        tar, tar_digest, tar_diff_id = venv_layer(venv)
        size = _link_blob(root, tar, tar_digest)
        layers.insert(0, {"mediaType": MEDIA_LAYER, "digest": tar_digest, "size": size})
        diff_ids.insert(0, tar_diff_id)
    config = {
        "architecture": "amd64",
        "os": "linux",
        "config": {
            "Cmd": program.split() + [image],
            "Labels": {"org.opencontainers.image.version": version},
        },
        "rootfs": {"type": "layers", "diff_ids": diff_ids},
    }
    cfg_digest, cfg_size = _blob(root, json.dumps(config, sort_keys=True).encode())
    manifest = {
        "schemaVersion": 2,
        "mediaType": MEDIA_MANIFEST,
        "config": {"mediaType": MEDIA_CONFIG, "digest": cfg_digest, "size": cfg_size},
        "layers": layers,
    }
    m_digest, m_size = _blob(root, json.dumps(manifest, sort_keys=True).encode())
    index = {
        "schemaVersion": 2,
        "manifests": [
            {
                "mediaType": MEDIA_MANIFEST,
                "digest": m_digest,
                "size": m_size,
                "annotations": {"org.opencontainers.image.ref.name": version},
            }
        ],
    }
    (root / "oci-layout").write_text(json.dumps({"imageLayoutVersion": "1.0.0"}))
    (root / "index.json").write_text(json.dumps(index))


def ensure(images: list[str], real: dict[str, str] | None = None) -> int:
    """Build the missing layouts (under a lock; a ready marker says a layout is whole);
    returns how many were built. `real` maps an image to the OpenStack series whose code it
    carries (its venvs are built already: lab up builds them first)."""
    real = real or {}
    built = 0
    cache_root().mkdir(parents=True, exist_ok=True)
    with file_lock(cache_root() / ".lock"):
        for image in sorted(set(images)):
            for version in VERSIONS:
                root = layout(image, version, real.get(image))
                if (root / ".ready").is_file():
                    continue
                shutil.rmtree(root, ignore_errors=True)  # a build cut short
                root.mkdir(parents=True, exist_ok=True)
                series = real.get(image)
                _write(root, image, version, _venv(series, version) if series else None)
                (root / ".ready").write_text("ok")
                built += 1
    return built


def _venv(series: str, version: str) -> Path:
    """The venv whose code a real image of `series` at lab `version` carries."""
    from stepwise.lab.openstack import releases, venvs

    release = releases.release_for(series, version)
    if release is None:
        raise ValueError(f"no real OpenStack release of {series} stands for {version}")
    return venvs.venv_path(release.lock)


def version_in_layer(blob: Path) -> str | None:
    """The version file of an image's metadata layer (a gzip tar blob, the image's last),
    None when it has none."""
    try:
        with tarfile.open(blob, mode="r:gz") as tar:
            member = tar.extractfile(VERSION_FILE)
            return member.read().decode().strip() if member else None
    except (OSError, KeyError, tarfile.TarError):
        return None
