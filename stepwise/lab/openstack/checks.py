"""What an operator checks on a real cloud before and after an upgrade, on the lab's one.

`seed` creates a project, a resource provider and an image (with data) through the APIs before
a run; `seed_kept` checks afterwards that each still exists unchanged (the image's data by its
checksum). `schemas` asks each service's own tool whether its database is at the head of the
code installed on its bootstrap node. Through the VIPs, with the lab's admin credentials.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import urllib.error
import urllib.request
from pathlib import Path
from typing import TYPE_CHECKING, Any

from stepwise.lab.openstack import bootstrap as openstack_bootstrap
from stepwise.lab.openstack import config

if TYPE_CHECKING:
    from collections.abc import Collection

    from stepwise.lab.nodes import Lab

SEED_NAME = "stepwise-seed"
SEED_DATA = b"stepwise seed image\n" * 50
PLACEMENT_MICROVERSION = "placement 1.20"


def _url(lab: Lab, service: str) -> str:
    return f"http://{lab.spec.vip}:{lab.spec.vips[service].port}"


def _req(
    method: str,
    url: str,
    token: str,
    body: Any = None,
    raw: bytes | None = None,
    headers: dict[str, str] | None = None,
) -> tuple[int, bytes]:
    data = raw if raw is not None else (json.dumps(body).encode() if body is not None else None)
    req = urllib.request.Request(url, data=data, method=method)
    req.add_header("X-Auth-Token", token)
    req.add_header(
        "Content-Type", "application/octet-stream" if raw is not None else "application/json"
    )
    for k, v in (headers or {}).items():
        req.add_header(k, v)
    try:
        with urllib.request.urlopen(req, timeout=30) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read()


def seed(lab: Lab) -> dict[str, Any]:
    """Create the seed resources (whichever of the three services run real code)."""
    token = openstack_bootstrap.admin_token(lab)
    real = lab.spec.real_services()
    out: dict[str, Any] = {}
    if "keystone" in real:
        status, body = _req(
            "POST",
            config.keystone_url(lab) + "/v3/projects",
            token,
            {"project": {"name": SEED_NAME, "domain_id": "default"}},
        )
        if status == 409:  # seeded earlier
            status, body = _req(
                "GET", config.keystone_url(lab) + f"/v3/projects?name={SEED_NAME}", token
            )
            out["project"] = json.loads(body)["projects"][0]["id"]
        else:
            out["project"] = json.loads(body)["project"]["id"]
    if "placement_api" in real:
        pv = {"OpenStack-API-Version": PLACEMENT_MICROVERSION}
        status, body = _req(
            "POST",
            _url(lab, "placement_api") + "/resource_providers",
            token,
            {"name": SEED_NAME},
            headers=pv,
        )
        if status >= 400:
            status, body = _req(
                "GET",
                _url(lab, "placement_api") + f"/resource_providers?name={SEED_NAME}",
                token,
                headers=pv,
            )
            out["resource_provider"] = json.loads(body)["resource_providers"][0]["uuid"]
        else:
            out["resource_provider"] = json.loads(body)["uuid"]
    if "glance_api" in real:
        status, body = _req(
            "POST",
            _url(lab, "glance_api") + "/v2/images",
            token,
            {"name": SEED_NAME, "disk_format": "raw", "container_format": "bare"},
        )
        image = json.loads(body)["id"]
        status, _ = _req(
            "PUT", _url(lab, "glance_api") + f"/v2/images/{image}/file", token, raw=SEED_DATA
        )
        if status >= 400:
            raise RuntimeError(f"glance refused the seed image's data (HTTP {status})")
        out["image"] = image
        out["image_md5"] = hashlib.md5(SEED_DATA).hexdigest()  # noqa: S324 - glance's own checksum
    if config.is_real_placed(lab, "nova_api"):  # the servers `lab up` booted, to find ACTIVE after
        from stepwise.lab.openstack import nova_cells

        found = nova_cells.call(lab, "GET", "/servers?all_tenants=1")["servers"]
        out["servers"] = sorted(s["id"] for s in found)
    return out


def _servers_missing(lab: Lab, servers: list[str]) -> list[str]:
    """The seeded servers that are gone or not ACTIVE (with their status and host)."""
    if not servers:
        return []
    from stepwise.lab.openstack import nova_cells

    found = {
        s["id"]: s for s in nova_cells.call(lab, "GET", "/servers/detail?all_tenants=1")["servers"]
    }
    missing = []
    for sid in servers:
        s = found.get(sid)
        if s is None:
            missing.append(f"server {sid} (gone)")
        elif s["status"] != "ACTIVE":
            missing.append(f"server {s['name']} {s['status']} on {nova_cells.host_of(s)}")
    return missing


def seed_kept(lab: Lab, seeded: dict[str, Any]) -> dict[str, Any]:
    """Whether every seed resource is still there, the image with the same data."""
    token = openstack_bootstrap.admin_token(lab)
    missing = []
    if "project" in seeded:
        status, _ = _req(
            "GET", config.keystone_url(lab) + f"/v3/projects/{seeded['project']}", token
        )
        if status != 200:
            missing.append(f"project {seeded['project']} (HTTP {status})")
    if "resource_provider" in seeded:
        status, _ = _req(
            "GET",
            _url(lab, "placement_api") + f"/resource_providers/{seeded['resource_provider']}",
            token,
            headers={"OpenStack-API-Version": PLACEMENT_MICROVERSION},
        )
        if status != 200:
            missing.append(f"resource provider {seeded['resource_provider']} (HTTP {status})")
    if "image" in seeded:
        status, body = _req("GET", _url(lab, "glance_api") + f"/v2/images/{seeded['image']}", token)
        if status != 200:
            missing.append(f"image {seeded['image']} (HTTP {status})")
        else:
            status, data = _req(
                "GET", _url(lab, "glance_api") + f"/v2/images/{seeded['image']}/file", token
            )
            if status != 200 or data != SEED_DATA:
                missing.append(f"image {seeded['image']}'s data (HTTP {status}, {len(data)} bytes)")
    missing += _servers_missing(lab, seeded.get("servers", []))
    return {
        "checked": len([k for k in seeded if k not in ("image_md5", "servers")])
        + len(seeded.get("servers", [])),
        "missing": missing,
        "kept": not missing,
    }


def _alembic_head(venv: Path, versions: str) -> str | None:
    """The head revision of a project's alembic migrations in a venv (the one no other
    revises); `versions` is the migrations' directory inside site-packages."""
    revs, downs = set(), set()
    for f in venv.glob(f"lib/python3*/site-packages/{versions}/*.py"):
        text = f.read_text()
        m = re.search(r"^revision\s*=\s*['\"]([0-9a-f]+)['\"]", text, re.M)
        d = re.search(r"^down_revision\s*=\s*['\"]([0-9a-f]+)['\"]", text, re.M)
        if m:
            revs.add(m.group(1))
        if d:
            downs.add(d.group(1))
    heads = revs - downs
    return heads.pop() if len(heads) == 1 else None


#: where each project's schema is read: its owner among the real services (nova's API,
#: scheduler and compute share the conductor's; a compute has no database access at all)
SCHEMA_OWNERS = ("keystone", "placement_api", "glance_api", "nova_conductor", "neutron_server")
_HEADS = {
    "placement_api": "placement/db/sqlalchemy/alembic/versions",
    "nova_conductor": "nova/db/main/migrations/versions",
}


def _schema(lab: Lab, node: str, s: str, code: Path | None) -> tuple[str, bool]:
    """The schema version of `s`'s project (its last line) and whether it is at the head of
    the code installed on `node`, each asked of the project's own tool."""
    if s == "keystone":
        current = openstack_bootstrap.tool(lab, node, s, ["keystone-manage", "db_version"]).stdout
        return current, openstack_bootstrap.tool(
            lab, node, s, ["keystone-manage", "db_sync", "--check"]
        ).returncode == 0
    if s == "glance_api":
        current = openstack_bootstrap.tool(lab, node, s, ["glance-manage", "db", "version"]).stdout
        check = openstack_bootstrap.tool(lab, node, s, ["glance-manage", "db", "check"])
        return current, check.returncode == 0 and "up to date" in (check.stdout + check.stderr)
    if s == "neutron_server":  # expand and contract branches, each at its head
        res = openstack_bootstrap.tool(lab, node, s, ["neutron-db-manage", "current"])
        revs = [ln for ln in res.stdout.splitlines() if re.match(r"^[0-9a-f]{12}\b", ln)]
        at_head = res.returncode == 0 and len(revs) == 2 and all("(head)" in r for r in revs)
        return ", ".join(r.split()[0] for r in revs), at_head
    tool = "nova-manage" if s == "nova_conductor" else "placement-manage"
    current = openstack_bootstrap.tool(lab, node, s, [tool, "db", "version"]).stdout.strip()
    head = _alembic_head(code, _HEADS[s]) if code else None
    return current, bool(current) and current.splitlines()[-1] == head


def schemas(lab: Lab) -> dict[str, dict[str, Any]]:
    """Per real service that owns a schema: its version and whether it is at the installed
    code's head."""
    from concurrent.futures import ThreadPoolExecutor

    real = lab.spec.real_services()
    owners = [s for s in SCHEMA_OWNERS if s in real]
    # each project's tool is a process of its own that imports the project (~1.5-2 s of CPU):
    # asked one after the other they took ~13 s of the demo, twice
    with ThreadPoolExecutor(max_workers=max(1, min(len(owners), os.cpu_count() or 1))) as pool:
        return dict(zip(owners, pool.map(lambda s: _schema_of(lab, s), owners), strict=True))


def _schema_of(lab: Lab, s: str) -> dict[str, Any]:
    """`s`'s schema version, whether it is at its code's head, and that code's release."""
    node = lab.service(s).bootstrap
    release = config.release_on(lab, node, s)
    code = config.code_of(lab, node, s, release) if release else None
    current, at_head = _schema(lab, node, s, code)
    current = current.strip()
    return {
        "version": current.splitlines()[-1] if current else None,
        "at_head": at_head,
        "code": release.label if release else None,
    }


def acceptance(
    lab: Lab, workdir: Path, apis: Collection[str] | None = None, short: bool = False
) -> dict[str, Any]:
    """tempest's identity and image API tests against the lab's cloud, through its VIPs, and
    its compute and network API tests where nova and neutron-server run real code (only the
    `apis` among them when given; `short`: tempest_conf's short list); `ok` is tempest's
    verdict (a test passed, none failed: an all-skipped run is no pass)."""
    from stepwise.lab.openstack import nova_cells, tempest_conf
    from stepwise.lab.openstack import tempest as openstack_tempest

    real = lab.spec.real_services()
    compute = nova_cells.tempest_cloud(lab) if "nova_api" in real else None
    extensions = _network_extensions(lab) if "neutron_server" in real else None
    tempest_conf.write_config(
        workdir,
        config.keystone_url(lab) + "/v3",
        tempest_conf.Admin(config.ADMIN_USER, config.secret(lab), config.ADMIN_PROJECT),
        config.REGION,
        compute=compute,
        network_extensions=extensions,
    )
    tests = tempest_conf.tests_for(compute is not None, extensions is not None, apis, short)
    res = openstack_tempest.run(workdir, tests, timeout=1200)
    return {
        "ok": res.ok,
        "run": res.run,
        "passed": res.passed,
        "failed": res.failed,
        "skipped": res.skipped,
        "passed_by_api": dict(res.passed_by_api),
        "failures": [f"{test}: {why}" for test, why in res.failures],
        "seconds": round(res.seconds, 1),
        "list": "short" if short else "full",
    }


def _network_extensions(lab: Lab) -> list[str]:
    """The API extensions neutron-server serves (tempest runs a test only where its
    extension is listed)."""
    token = openstack_bootstrap.admin_token(lab)
    status, body = _req("GET", _url(lab, "neutron_server") + "/v2.0/extensions", token)
    if status != 200:
        raise RuntimeError(f"neutron-server answered HTTP {status} for its extensions")
    return sorted(e["alias"] for e in json.loads(body)["extensions"])
