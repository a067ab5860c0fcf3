"""The lab's container registry: Debian's real `docker-registry` (distribution), run by the
lab supervisor on the lab's own loopback address, with its storage in the lab directory.

`publish` pushes the stand-ins' OCI images (lab/images.py) with the real `skopeo copy`, as
`openstack tripleo container image prepare` leaves a registry: the deployed tag, the update
tag an update follows, and the next release's namespace for an upgrade.
"""

from __future__ import annotations

import shutil
import subprocess
import time
import urllib.error
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from stepwise.lab import images
from stepwise.lab.nodes import Lab

BINARY = "/usr/bin/docker-registry"
UNIT = "registry"  # the supervisor's unit of the lab-wide pseudo-node
HINT = "apt-get install -y docker-registry skopeo"


def check_installed() -> None:
    """Raise RuntimeError naming what is missing (the lab's registry and its client)."""
    missing = [p for p in (BINARY, "skopeo") if shutil.which(p) is None]
    if missing:
        raise RuntimeError(f"the lab's container registry needs {', '.join(missing)}")


def config_file(lab: Lab) -> Path:
    return lab.dir / "registry" / "config.yml"


def write_config(lab: Lab) -> None:
    """distribution's configuration: filesystem storage under the lab, plain HTTP on the
    lab's registry address, deletes allowed (no auth: loopback only)."""
    addr = lab.spec.containers.lab_registry
    storage = lab.dir / "registry" / "storage"
    storage.mkdir(parents=True, exist_ok=True)
    config_file(lab).write_text(
        "version: 0.1\n"
        "log:\n  level: warn\n"
        "storage:\n"
        f"  filesystem:\n    rootdirectory: {storage}\n"
        "  delete:\n    enabled: true\n"
        f"http:\n  addr: {addr}\n"
    )


def command(lab: Lab) -> list[str]:
    """What the supervisor runs for the registry unit."""
    return [BINARY, "serve", str(config_file(lab))]


def ping(lab: Lab, timeout: float = 1.0) -> bool:
    """Whether the registry answers its API (`GET /v2/`)."""
    url = f"http://{lab.spec.containers.lab_registry}/v2/"
    try:
        with urllib.request.urlopen(url, timeout=timeout) as r:
            return r.status == 200
    except (OSError, urllib.error.URLError):
        return False


def wait_ready(lab: Lab, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if ping(lab):
            return
        time.sleep(0.1)
    raise RuntimeError(f"the lab's registry did not answer on {lab.spec.containers.lab_registry}")


def publications(lab: Lab) -> list[tuple[str, str, str]]:
    """(image, version, lab reference) of everything the registry holds after lab up."""
    c = lab.spec.containers
    out = []
    for spec in c.services.values():
        name = spec.image
        base = f"{c.lab_registry}/{c.namespace}/{name}"
        out.append((name, "1.0.0", f"{base}:1.0.0"))
        out.append((name, "1.1.0", f"{base}:1.1.0"))
        out.append((name, "1.1.0", f"{base}:{c.tag}"))
        out.append((name, "2.0.0", f"{c.lab_registry}/{c.upgrade_namespace}/{name}:2.0.0"))
        out.append((name, "2.0.0", f"{c.lab_registry}/{c.upgrade_namespace}/{name}:{c.tag}"))
    return out


def skopeo(*args: str, timeout: float = 60.0) -> subprocess.CompletedProcess[str]:
    """The real skopeo (never the lab's node command of the same name)."""
    return subprocess.run(
        ["/usr/bin/skopeo", *args], capture_output=True, text=True, timeout=timeout, check=False
    )


def publish(lab: Lab) -> dict[str, Any]:
    """Build the images (once per machine) and push every publication; returns timings."""
    c = lab.spec.containers
    t0 = time.monotonic()
    real = {s.image: s.series for s in c.services.values() if s.series}
    built = images.ensure([s.image for s in c.services.values()], real)
    t1 = time.monotonic()

    def push(p: tuple[str, str, str]) -> None:
        name, version, dest = p
        src = f"oci:{images.layout(name, version, real.get(name))}:{version}"
        res = skopeo("copy", "--quiet", "--dest-tls-verify=false", src, f"docker://{dest}")
        if res.returncode != 0:
            raise RuntimeError(f"skopeo copy {src} {dest}: {res.stderr.strip()}")

    # one repository's tags one after another: two uploads of the same blob into one
    # repository at once fail in distribution ("blob unknown to registry")
    by_repo: dict[str, list[tuple[str, str, str]]] = {}
    for p in publications(lab):
        by_repo.setdefault(p[2].rpartition(":")[0], []).append(p)
    with ThreadPoolExecutor(max_workers=4) as ex:
        list(ex.map(lambda ps: [push(p) for p in ps], by_repo.values()))
    return {"built": built, "build_s": t1 - t0, "push_s": time.monotonic() - t1}
