"""Deploying real keystone, placement and glance on a new lab, as a deployment tool would.

`prepare` (before any node starts): the release venvs (built once per machine), the lab's
password, the shared fernet keys' directory. `databases` (once the database VIP answers): the
three databases, their schemas by the services' own `*-manage` tools, keystone's fernet and
credential keys (made once, copied to every keystone node as TripleO distributes them) and
`keystone-manage bootstrap`. `register` (once keystone serves): the service users and the
catalog entries of placement and glance, and a `clouds.yaml` for the openstack client.
"""

from __future__ import annotations

import grp
import json
import os
import pwd
import shutil
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from stepwise.lab.openstack import config as openstack_config
from stepwise.lab.openstack import releases as openstack_releases
from stepwise.lab.openstack import schema_cache
from stepwise.lab.openstack.venvs import BuildProgress, ensure_venv

if TYPE_CHECKING:
    from stepwise.lab.nodes import Lab

Say = Callable[[str], None]


def venvs_needed(series: str) -> list[str]:
    """Every venv a lab of `series` uses: the three releases' code, the OpenStack client (the
    probe) and tempest (acceptance), all built at the first `lab up` with one progress bar."""
    return [r.lock for r in openstack_releases.SERIES[series]] + ["client", "tempest"]


def prepare(lab: Lab, build: BuildProgress | None = None) -> None:
    """Build what is missing of the release venvs and write the lab's password."""
    from concurrent.futures import ThreadPoolExecutor

    series = lab.spec.openstack.series
    # two at a time: pip spends much of a build waiting on downloads and on one core
    with ThreadPoolExecutor(max_workers=2) as pool:
        for f in [pool.submit(ensure_venv, name, build) for name in venvs_needed(series)]:
            f.result()
    d = lab.dir / "openstack"
    d.mkdir(mode=0o700, parents=True, exist_ok=True)
    pw = d / "password"
    if not pw.exists():
        openstack_config._write_private(pw, openstack_config.new_password() + "\n")


def tool(
    lab: Lab, node: str, service: str, args: list[str], timeout: float = 300.0
) -> subprocess.CompletedProcess:
    """Run a real service's own tool (`keystone-manage`, `glance-status`, ...) as the node has it:
    the installed release's code with the node's configuration."""
    release = openstack_config.release_on(lab, node, service)
    if release is None:
        raise RuntimeError(f"{service} is not installed on {node}")
    code = openstack_config.code_of(lab, node, service, release)
    conf = openstack_config.paths(lab, node, service)["config"]
    # through the venv's python: a script's first line names the path the venv was built at,
    # not where a container's image unpacked it
    return subprocess.run(
        [
            str(code / "bin" / "python"),
            str(code / "bin" / args[0]),
            "--config-file",
            str(conf),
            *args[1:],
        ],
        capture_output=True,
        text=True,
        timeout=timeout,
        stdin=subprocess.DEVNULL,
    )


def checked(res: subprocess.CompletedProcess, what: str, logs: Callable[[], str] = str) -> None:
    """Raise when a bootstrap tool failed, with its last output and `logs()` (the service's
    own log tails: the *-manage tools write their errors there, not to stderr)."""
    if res.returncode != 0:
        tail = (res.stderr or res.stdout).strip().splitlines()[-3:]
        raise RuntimeError(f"{what} failed (exit {res.returncode}): " + " | ".join(tail) + logs())


def _placed(lab: Lab) -> list[str]:
    return [
        s
        for s in openstack_releases.SERVICES
        if s in lab.spec.services and openstack_config.is_real(lab, s)
    ]


#: the databases the lab creates for the services other than nova (nova's three:
#: `nova_cells.databases`)
_DATABASES = {"keystone": "keystone", "placement_api": "placement", "glance_api": "glance",
              "neutron_server": "neutron"}  # fmt: skip


def databases(lab: Lab, say: Say, beside: Callable[[], bool] | None = None) -> None:
    """Create and sync the services' databases; keystone's keys and bootstrap. The services'
    syncs (and `beside`, nova's cells) run at once: each schema is its own database, and one
    sync alone leaves the machine half idle while its DDL waits on the database (on 2 cores,
    the four syncs and nova's cells took 43 s one after the other, 28 s at once). A schema
    this machine made before for the same code is loaded instead (`schema_cache`): ~5 s."""
    from concurrent.futures import ThreadPoolExecutor

    from stepwise.lab import mariadb

    placed = [s for s in _placed(lab) if s in _DATABASES]
    if not placed and beside is None:
        return  # no real service here keeps a database (a message bus alone)
    if lab.spec.db_service is None:
        raise RuntimeError(
            f"real {', '.join(placed) or 'nova'} need a database: add the catalog's galera "
            "service to a role of the deployment"
        )
    vip = lab.spec.vips[lab.spec.db_service]
    for s in placed:
        mariadb.execute(vip.address, vip.port, f"CREATE DATABASE IF NOT EXISTS {_DATABASES[s]}")
    t0 = time.monotonic()
    jobs = [_SYNCS[s] for s in placed]
    # three at a time: more would only share the same two cores
    with ThreadPoolExecutor(max_workers=3) as pool:
        futures = [pool.submit(beside)] if beside is not None else []
        futures += [pool.submit(job, lab) for job in jobs]
        loaded = sum(f.result() for f in futures)  # the first failure, with its tool's words
    kept = f", {loaded} of {len(futures)} from this machine's kept schemas" if loaded else ""
    say(
        f"real OpenStack databases synced ({', '.join(placed)}) in "
        f"{time.monotonic() - t0:.1f}s{kept}"
    )


def _sync(service: str, argv: list[str]) -> Callable[[Lab], bool]:
    """A service's schema sync by its own tool on its bootstrap node (what it made kept for
    the next lab up of the same code: `schema_cache`); True when the kept schema was loaded."""

    def sync(lab: Lab) -> bool:
        boot = lab.service(service).bootstrap
        return schema_cache.synced(
            lab,
            boot,
            service,
            (_DATABASES[service],),
            lambda: checked(tool(lab, boot, service, argv), " ".join(argv)),
        )

    return sync


def _keystone(lab: Lab) -> bool:
    """keystone's schema, its key repositories (copied to every keystone node) and its
    bootstrap; True when the schema was loaded from this machine's kept one."""
    svc = lab.service("keystone")
    boot = svc.bootstrap
    user, group = pwd.getpwuid(os.getuid()).pw_name, grp.getgrgid(os.getgid()).gr_name

    def logs() -> str:
        return service_log_tails(lab, "keystone")

    def schema() -> bool:
        return schema_cache.synced(
            lab,
            boot,
            "keystone",
            (_DATABASES["keystone"],),
            lambda: checked(
                tool(lab, boot, "keystone", ["keystone-manage", "db_sync"]),
                "keystone-manage db_sync",
                logs,
            ),
        )

    def keys(what: str) -> None:
        argv = ["keystone-manage", what, "--keystone-user", user, "--keystone-group", group]
        checked(tool(lab, boot, "keystone", argv), f"keystone-manage {what}", logs)

    # the key repositories are files, the schema is the database: made at once (each tool
    # is a process that imports keystone, ~1.5 s of CPU)
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(max_workers=3) as pool:
        loaded = pool.submit(schema)
        made = [pool.submit(keys, what) for what in ("fernet_setup", "credential_setup")]
        for f in made:
            f.result()
        was_loaded = loaded.result()
    src = lab.node_root(boot) / "etc" / "keystone"
    for node in svc.instances:
        if node != boot:
            for repo in ("fernet-keys", "credential-keys"):
                dst = lab.node_root(node) / "etc" / "keystone" / repo
                shutil.rmtree(dst, ignore_errors=True)
                shutil.copytree(src / repo, dst)
    _keystone_bootstrap(lab, boot, logs)
    return was_loaded


def _keystone_bootstrap(lab: Lab, boot: str, logs: Callable[[], str]) -> None:
    """`keystone-manage bootstrap`: the admin, its project and role, keystone's endpoints."""
    url = openstack_config.keystone_url(lab) + "/v3"
    checked(
        tool(
            lab,
            boot,
            "keystone",
            [
                # one argument with '=': a value starting with '-' is never taken for an option
                "keystone-manage",
                "bootstrap",
                f"--bootstrap-password={openstack_config.secret(lab)}",
                "--bootstrap-username",
                openstack_config.ADMIN_USER,
                "--bootstrap-project-name",
                openstack_config.ADMIN_PROJECT,
                "--bootstrap-admin-url",
                url,
                "--bootstrap-internal-url",
                url,
                "--bootstrap-public-url",
                url,
                "--bootstrap-region-id",
                openstack_config.REGION,
            ],
        ),
        "keystone-manage bootstrap",
        logs,
    )


#: each service's schema sync (keystone's also makes its keys and the admin)
_SYNCS: dict[str, Callable[[Lab], bool]] = {
    "keystone": _keystone,
    "placement_api": _sync("placement_api", ["placement-manage", "db", "sync"]),
    "neutron_server": _sync("neutron_server", ["neutron-db-manage", "upgrade", "heads"]),
    "glance_api": _sync("glance_api", ["glance-manage", "db_sync"]),
}


# --- the real APIs (keystone's catalog first) -----------------------------------------------
def api_call(
    method: str,
    url: str,
    body: Any = None,
    token: str | None = None,
    headers: dict[str, str] | None = None,
) -> tuple[dict[str, Any], Any]:
    """One call to a real API: (the answer's headers, its JSON or None). A `bytes` body is
    sent as it is (an image's data), anything else as JSON."""
    raw_body = isinstance(body, bytes)
    data = body if raw_body else (json.dumps(body).encode() if body is not None else None)
    ctype = "application/octet-stream" if raw_body else "application/json"
    req = urllib.request.Request(
        url, data=data, method=method, headers={"Content-Type": ctype, **(headers or {})}
    )
    if token:
        req.add_header("X-Auth-Token", token)
    with urllib.request.urlopen(req, timeout=30) as r:
        raw = r.read()
        return dict(r.headers), (json.loads(raw) if raw else None)


def admin_token(lab: Lab) -> str:
    """A project-scoped admin token from keystone through the VIP."""
    auth = {
        "auth": {
            "identity": {
                "methods": ["password"],
                "password": {
                    "user": {
                        "name": openstack_config.ADMIN_USER,
                        "domain": {"id": "default"},
                        "password": openstack_config.secret(lab),
                    }
                },
            },
            "scope": {
                "project": {"name": openstack_config.ADMIN_PROJECT, "domain": {"id": "default"}}
            },
        }
    }
    headers, _ = api_call("POST", openstack_config.keystone_url(lab) + "/v3/auth/tokens", auth)
    return headers.get("X-Subject-Token") or headers["x-subject-token"]


def _find_or_create(
    url: str, token: str, kind: str, plural: str, match: dict[str, str], body: dict[str, Any]
) -> str:
    query = "&".join(f"{k}={v}" for k, v in match.items())
    _, found = api_call("GET", f"{url}/{plural}?{query}", token=token)
    if found.get(plural):
        return found[plural][0]["id"]
    _, made = api_call("POST", f"{url}/{plural}", {kind: body}, token)
    return made[kind]["id"]


#: The services the lab's keystone catalog lists: service -> (user, service type, description,
#: the endpoint's path)
_CATALOG_ENTRIES = {
    "placement_api": ("placement", "placement", "Placement API", ""),
    "glance_api": ("glance", "image", "Image service", ""),
    "nova_api": ("nova", "compute", "Compute service", "/v2.1"),
    "neutron_server": ("neutron", "network", "Networking service", ""),
}


def register(lab: Lab, say: Say, timeout: float = 120.0) -> None:
    """Service users and catalog entries for placement and glance; the lab's clouds.yaml."""
    if "keystone" not in _placed(lab):
        return  # nothing to register with, and no cloud for a client to reach
    url = openstack_config.keystone_url(lab) + "/v3"
    token = _first_token(lab, timeout)
    project = _find_or_create(
        url,
        token,
        "project",
        "projects",
        {"name": openstack_config.SERVICE_PROJECT},
        {"name": openstack_config.SERVICE_PROJECT, "domain_id": "default"},
    )
    # admin, and service: the role keystonemiddleware requires of a service token (nova's
    # calls to neutron carry one), as deployment tools give every service user since 2023.2
    roles = [api_call("GET", f"{url}/roles?name={name}", token=token)[1]["roles"][0]["id"]
             for name in ("admin", "service")]  # fmt: skip
    for s in _placed(lab):
        if s in _CATALOG_ENTRIES:
            _register_service(lab, url, token, s, project, roles)
    write_clouds_yaml(lab)
    say(
        f"keystone catalog: {', '.join(_placed(lab))}; "
        f"clouds.yaml for 'openstack --os-cloud {lab.spec.name}'"
    )


def _first_token(lab: Lab, timeout: float) -> str:
    """An admin token, asked for until keystone issues one through the VIP."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            return admin_token(lab)
        except (urllib.error.URLError, OSError, KeyError) as exc:
            if time.monotonic() > deadline:
                raise RuntimeError(
                    f"keystone did not issue a token through the VIP in {timeout:.0f} s "
                    f"(last answer: {exc})" + service_log_tails(lab, "keystone")
                ) from None
            time.sleep(0.5)


def service_log_tails(lab: Lab, service: str, lines: int = 12) -> str:
    """The last lines of a real service's own logs on its nodes (keystone-manage and uwsgi
    log there, not to the lab's unit logs): what a failed lab up shows after it is gone."""
    out = []
    for node in lab.nodes():
        if service not in lab.node(node).services:
            continue
        log = openstack_config.paths(lab, node, service)["log"]
        for f in (log, log.with_suffix(".uwsgi.log")):
            try:
                tail = f.read_text(errors="replace").splitlines()[-lines:]
            except OSError:
                continue
            out.append(f"\n--- {node}: {f} (last lines)\n" + "\n".join(tail))
    return "".join(out)


def _register_service(
    lab: Lab, url: str, token: str, service: str, project: str, roles: list[str]
) -> None:
    """One service's user (admin and service in the service project), its catalog service and
    its public, internal and admin endpoints at the service's VIP."""
    user, kind, description, path = _CATALOG_ENTRIES[service]
    uid = _find_or_create(
        url,
        token,
        "user",
        "users",
        {"name": user},
        {"name": user, "domain_id": "default", "password": openstack_config.secret(lab)},
    )
    for role in roles:
        api_call("PUT", f"{url}/projects/{project}/users/{uid}/roles/{role}", token=token)
    sid = _find_or_create(
        url,
        token,
        "service",
        "services",
        {"type": kind},
        {"name": user, "type": kind, "description": description},
    )
    endpoint = f"http://{lab.spec.vip}:{lab.spec.vips[service].port}{path}"
    for iface in ("public", "internal", "admin"):
        _find_or_create(
            url,
            token,
            "endpoint",
            "endpoints",
            {"service_id": sid, "interface": iface},
            {
                "service_id": sid,
                "interface": iface,
                "url": endpoint,
                "region_id": openstack_config.REGION,
            },
        )


def clouds_yaml_path(lab: Lab) -> Path:
    return lab.dir / "clouds.yaml"


def write_clouds_yaml(lab: Lab) -> Path:
    """A clouds.yaml (0600: it holds the password) naming the lab's cloud after the deployment."""
    import yaml

    doc = {
        "clouds": {
            lab.spec.name: {
                "auth": {
                    "auth_url": openstack_config.keystone_url(lab) + "/v3",
                    "username": openstack_config.ADMIN_USER,
                    "password": openstack_config.secret(lab),
                    "project_name": openstack_config.ADMIN_PROJECT,
                    "user_domain_name": "Default",
                    "project_domain_name": "Default",
                },
                "region_name": openstack_config.REGION,
                "interface": "public",
                "identity_api_version": 3,
            }
        }
    }
    path = clouds_yaml_path(lab)
    openstack_config._write_private(path, yaml.safe_dump(doc, sort_keys=False))
    return path
