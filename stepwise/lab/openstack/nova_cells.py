"""Deploying real nova on a new lab as a deployment tool does it, with nova's own tools and API.

`databases` (the database VIP answers, before any nova service starts): the API, cell0 and
cell1 databases, `nova-manage api_db sync`, `cell_v2 map_cell0`, `cell_v2 create_cell`, `db
sync` (cells v2 as nova's install guide orders it). `discover` (the computes started):
`cell_v2 discover_hosts` until every compute is mapped and up in `os-services`. `servers`:
a flavor, an image in the real glance and servers on every compute, booted through nova's API
with no network (`networks: none`: neutron-server runs no agent, so no port would bind) and
waited ACTIVE.
"""

from __future__ import annotations

import time
import urllib.error
import urllib.request
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from stepwise.lab.openstack import config
from stepwise.lab.openstack.bootstrap import (
    admin_token,
    api_call,
    checked,
    service_log_tails,
    tool,
)
from stepwise.lab.openstack.tempest_conf import ComputeCloud

if TYPE_CHECKING:
    from stepwise.lab.nodes import Lab

Say = Callable[[str], None]
DATABASES = ("nova_api", "nova", "nova_cell0")
#: the compute API's microversion the lab speaks (2.37: `networks: none`; 2.53: service ids)
MICROVERSION = "2.60"
FLAVOR = "lab.tiny"
#: tempest's flavor: its tests boot as users, not as the admin
TEMPEST_FLAVOR = "lab.tempest"
IMAGE = "lab-image"
#: how long a server may take to become ACTIVE (fake driver: a few seconds on 2 busy cores)
ACTIVE_TIMEOUT = 120.0


def _manage(lab: Lab, args: list[str], timeout: float = 300.0) -> str:
    boot = lab.service("nova_conductor").bootstrap
    res = tool(lab, boot, "nova_conductor", ["nova-manage", *args], timeout=timeout)
    checked(res, f"nova-manage {' '.join(args[:2])}",
             lambda: service_log_tails(lab, "nova_conductor"))  # fmt: skip
    return res.stdout


def databases(lab: Lab, say: Say) -> bool:
    """The three databases and cells v2: cell0 and cell1 mapped, every schema synced (the
    schemas loaded from this machine's kept ones when it has them for this code: True)."""
    from stepwise.lab import mariadb
    from stepwise.lab.openstack import schema_cache

    t0 = time.monotonic()
    vip = lab.spec.vips[lab.spec.db_service]
    for name in DATABASES:
        mariadb.execute(vip.address, vip.port, f"CREATE DATABASE IF NOT EXISTS {name}")
    boot = lab.service("nova_conductor").bootstrap
    loaded = schema_cache.synced(
        lab, boot, "nova_conductor", ("nova_api",), lambda: _manage(lab, ["api_db", "sync"])
    )
    _manage(
        lab, ["cell_v2", "map_cell0", "--database_connection", config.db_url(lab, "nova_cell0")]
    )
    # asked of the API database, not of `cell_v2 list_cells` (one more nova-manage, ~2 s)
    cells = mariadb.execute(vip.address, vip.port, "SELECT name FROM nova_api.cell_mappings")
    if ("cell1",) not in cells:
        _manage(lab, ["cell_v2", "create_cell", "--name", "cell1"])
    # `db sync` syncs the main database and cell0's (mapped above)
    loaded &= schema_cache.synced(
        lab, boot, "nova_conductor", ("nova", "nova_cell0"), lambda: _manage(lab, ["db", "sync"])
    )
    kept = " (schemas kept from an earlier sync of this code)" if loaded else ""
    say(f"nova: cells v2 formed (API database, cell0, cell1) in {time.monotonic() - t0:.1f}s{kept}")
    return loaded


def computes(lab: Lab) -> list[str]:
    """The nodes that run real nova-compute."""
    svc = lab.spec.services.get("nova_compute")
    return list(svc.instances) if svc and svc.real_openstack else []


def call(lab: Lab, method: str, path: str, body: Any = None, token: str | None = None) -> Any:
    """One call to nova's API through its VIP, as an admin (the answer's JSON, or None)."""
    url = f"http://{lab.spec.vip}:{lab.spec.vips['nova_api'].port}/v2.1{path}"
    version = {"OpenStack-API-Version": f"compute {MICROVERSION}"}
    return api_call(method, url, body, token or admin_token(lab), version)[1]


def wait_conductors(lab: Lab, timeout: float = 120.0) -> None:
    """Until every nova-conductor has its service record: a conductor records itself just
    before it starts consuming its RPC queue, and it says READY to its unit earlier (when it
    is built), so a compute started right after its unit's start would ping a queue nobody
    reads yet and wait out nova's 10 s before asking again (`wait_until_ready`)."""
    want = set(lab.service("nova_conductor").instances)
    deadline = time.monotonic() + timeout
    while True:
        try:
            found = call(lab, "GET", "/os-services?binary=nova-conductor")["services"]
        except (urllib.error.URLError, OSError, KeyError, TypeError):
            found = []
        if want <= {s["host"] for s in found}:
            return
        if time.monotonic() > deadline:
            raise RuntimeError(
                f"nova-conductor recorded no service on {', '.join(sorted(want))} after "
                f"{timeout:.0f} s" + service_log_tails(lab, "nova_conductor")
            )
        time.sleep(0.5)


def discover(lab: Lab, say: Say, timeout: float = 180.0) -> None:
    """Map every compute into cell1 and wait until nova counts it up."""
    want = set(computes(lab))
    if not want:
        return
    deadline = time.monotonic() + timeout
    while True:
        _manage(lab, ["cell_v2", "discover_hosts"])
        services = call(lab, "GET", "/os-services?binary=nova-compute")["services"]
        up = {s["host"] for s in services if s["state"] == "up" and s["status"] == "enabled"}
        hypervisors = {h["hypervisor_hostname"]: h["id"] for h in
                       call(lab, "GET", "/os-hypervisors")["hypervisors"]}  # fmt: skip
        if want <= up and want <= set(hypervisors):
            _keep_node_identity(lab, hypervisors)
            say(f"nova: {len(want)} compute(s) mapped to cell1 and up")
            return
        if time.monotonic() > deadline:
            raise RuntimeError(f"nova-compute not up on {', '.join(sorted(want - up))} after "
                               f"{timeout:.0f} s (os-services: {services})")  # fmt: skip
        time.sleep(2)


def _keep_node_identity(lab: Lab, hypervisors: dict[str, str]) -> None:
    """Each compute's node identity (`compute_id` in its state path), which nova-compute
    demands on every start after its first (nova 2023.1's stable compute UUIDs): libvirt's
    driver writes it at the first start, the fake driver never does, so the lab writes what
    a hypervisor driver would have, the compute node's UUID in nova's database."""
    for node in computes(lab):
        path = config.nova_state(lab, node) / "compute_id"
        if not path.exists():
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(hypervisors[node] + "\n")


def servers(lab: Lab, say: Say, per_compute: int = 2) -> list[dict[str, Any]]:
    """`per_compute` servers on every compute (placed by host, as an admin may), ACTIVE."""
    hosts = computes(lab)
    if not hosts:
        return []
    flavor = _flavor(lab)
    image = _image(lab)
    made = []
    for k, host in enumerate(h for h in hosts for _ in range(per_compute)):
        body = {"server": {"name": f"vm-{k}", "flavorRef": flavor, "imageRef": image,
                           "networks": "none", "availability_zone": f"nova:{host}"}}  # fmt: skip
        made.append(call(lab, "POST", "/servers", body)["server"]["id"])
    found = wait_active(lab, made)
    say(f"nova: {len(found)} server(s) ACTIVE on {len(hosts)} compute(s)")
    return found


def wait_active(lab: Lab, ids: list[str], timeout: float = ACTIVE_TIMEOUT) -> list[dict[str, Any]]:
    """The servers once every one is ACTIVE (fails on ERROR or after `timeout`)."""
    deadline = time.monotonic() + timeout
    while True:
        found = [call(lab, "GET", f"/servers/{i}")["server"] for i in ids]
        bad = [s for s in found if s["status"] == "ERROR"]
        if bad:
            raise RuntimeError(
                "server(s) in ERROR: "
                + "; ".join(
                    f"{s['name']}: {(s.get('fault') or {}).get('message', '?')}" for s in bad
                )
            )
        if all(s["status"] == "ACTIVE" for s in found):
            return found
        if time.monotonic() > deadline:
            raise RuntimeError(
                "servers not ACTIVE after "
                f"{timeout:.0f} s: {[(s['name'], s['status']) for s in found]}"
            )
        time.sleep(1)


def _flavor(lab: Lab, name: str = FLAVOR, disk: int = 0) -> str:
    """A lab flavor (made once): 1 vCPU, 64 MB, `disk` GB (a user other than the admin may
    boot only flavors with a disk: nova's policy on zero-disk flavors)."""
    for f in call(lab, "GET", "/flavors")["flavors"]:
        if f["name"] == name:
            return f["id"]
    body = {"flavor": {"name": name, "ram": 64, "vcpus": 1, "disk": disk}}
    return call(lab, "POST", "/flavors", body)["flavor"]["id"]


def _image(lab: Lab) -> str:
    """A small image in the real glance (made once), active: nova's API checks it exists."""
    token = admin_token(lab)
    base = f"http://{lab.spec.vip}:{lab.spec.vips['glance_api'].port}/v2/images"
    found = api_call("GET", f"{base}?name={IMAGE}", token=token)[1]["images"]
    if found and found[0]["status"] == "active":
        return found[0]["id"]
    meta = {"name": IMAGE, "disk_format": "raw", "container_format": "bare",
            "visibility": "public"}  # fmt: skip
    image = api_call("POST", base, meta, token)[1]
    api_call("PUT", f"{base}/{image['id']}/file", b"\0" * 1024, token)
    return image["id"]


def tempest_cloud(lab: Lab) -> ComputeCloud:
    """What tempest must know of this nova: the lab's image and flavor (made if missing), its
    computes, the newest microversion it speaks (its version document)."""
    newest = call(lab, "GET", "/")["version"]["version"]
    flavor = _flavor(lab, TEMPEST_FLAVOR, disk=1)
    return ComputeCloud(_image(lab), flavor, len(computes(lab)), newest)


def host_of(server: dict[str, Any]) -> str:
    """The compute a server runs on (the admin's view)."""
    return server.get("OS-EXT-SRV-ATTR:host") or ""


def live_migrate(lab: Lab, server_id: str) -> None:
    """Ask nova to live-migrate a server to a host its scheduler picks."""
    try:
        call(lab, "POST", f"/servers/{server_id}/action",
             {"os-migrateLive": {"host": None, "block_migration": "auto"}})  # fmt: skip
    except urllib.error.HTTPError as exc:
        raise RuntimeError(f"live migration of {server_id} refused: {exc.code} "
                           f"{exc.read()[:300]!r}") from None  # fmt: skip
