"""Real OCI images of the lab's stand-in services, built once per machine.

One OCI image layout per (service image, release version) under
`~/.cache/stepwise/lab/images-v1/<image>/<version>/`: a single gzip layer holding the
stand-in's program marker (`/stepwise/program`) and its version (`/stepwise/version`), an
OCI config and manifest. Written with tarfile + hashlib, deterministic (fixed mtimes, owner,
gzip header): the same image has the same digest on every machine. skopeo pushes it to the
lab's registry; nodes pull it back with skopeo, so what digests say is real.
"""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import os
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


def cache_root() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "stepwise" / "lab" / CACHE_VERSION


def layout(image: str, version: str) -> Path:
    """The OCI layout of one image version (built by `ensure`)."""
    return cache_root() / image / version


def _layer(image: str, version: str) -> tuple[bytes, str]:
    """The gzip layer and the digest of its uncompressed tar (the config's diff_id)."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tar:
        d = tarfile.TarInfo("stepwise")
        d.type, d.mode, d.mtime = tarfile.DIRTYPE, 0o755, 0
        tar.addfile(d)
        files = {
            "stepwise/program": f"{PROGRAM} {image}\n",
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


def _write(root: Path, image: str, version: str) -> None:
    layer, diff_id = _layer(image, version)
    layer_digest, layer_size = _blob(root, layer)
    config = {
        "architecture": "amd64",
        "os": "linux",
        "config": {
            "Cmd": PROGRAM.split() + [image],
            "Labels": {"org.opencontainers.image.version": version},
        },
        "rootfs": {"type": "layers", "diff_ids": [diff_id]},
    }
    cfg_digest, cfg_size = _blob(root, json.dumps(config, sort_keys=True).encode())
    manifest = {
        "schemaVersion": 2,
        "mediaType": MEDIA_MANIFEST,
        "config": {"mediaType": MEDIA_CONFIG, "digest": cfg_digest, "size": cfg_size},
        "layers": [{"mediaType": MEDIA_LAYER, "digest": layer_digest, "size": layer_size}],
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


def ensure(images: list[str]) -> int:
    """Build the missing layouts (under a lock; a ready marker says a layout is whole);
    returns how many were built."""
    built = 0
    cache_root().mkdir(parents=True, exist_ok=True)
    with file_lock(cache_root() / ".lock"):
        for image in sorted(set(images)):
            for version in VERSIONS:
                root = layout(image, version)
                if (root / ".ready").is_file():
                    continue
                root.mkdir(parents=True, exist_ok=True)
                _write(root, image, version)
                (root / ".ready").write_text("ok")
                built += 1
    return built


def version_in_layer(blob: Path) -> str | None:
    """The version file of an image layer (a gzip tar blob), None when it has none."""
    try:
        with tarfile.open(blob, mode="r:gz") as tar:
            member = tar.extractfile(VERSION_FILE)
            return member.read().decode().strip() if member else None
    except (OSError, KeyError, tarfile.TarError):
        return None
