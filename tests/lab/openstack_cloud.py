"""A small real cloud for the client probe and tempest tests: one MariaDB, keystone, placement
and glance from the 2025.1.0 venv under Debian's uWSGI, each on its own 127.0.0.1 port.

It stands in for a lab that runs real OpenStack until the lab's own services are used for these
tests (then `real_cloud` in test_openstack_client.py is the one thing to change). It is the
same code and the same steps as the lab's deployment, without nodes, VIPs or HAProxy:
databases, `keystone-manage db_sync/fernet_setup/credential_setup/bootstrap`, `placement-manage
db sync`, `glance-manage db_sync`, the catalog entries of placement and glance, a clouds.yaml.
Starting it takes ~40 s on 2 cores once the venv is built.
"""

from __future__ import annotations

import grp
import json
import os
import pwd
import random
import shutil
import signal
import socket
import subprocess
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

from stepwise.lab import mariadb
from stepwise.lab.openstack.client import write_clouds_yaml
from stepwise.lab.openstack.venvs import ensure_venv

RELEASE = "2025.1.0"
PASSWORD = "probe-secret-7"  # a throwaway cloud's; tests check it never reaches the records
REGION = "RegionOne"
CLOUD = "testcloud"
SERVICES = ("keystone", "placement", "glance")
# 127.0.0.1 ports are shared with the lab prototype (33306, 35000, 38778, 39292) and other
# engineers' labs (5000...): a block of 4 free ones is chosen from this range
PORT_RANGE = (42000, 44000)


def _free_block(n: int) -> int:
    bases = list(range(PORT_RANGE[0], PORT_RANGE[1], 10))
    random.shuffle(bases)
    for base in bases[:50]:
        socks = []
        try:
            for p in range(base, base + n):
                s = socket.socket()
                socks.append(s)
                s.bind(("127.0.0.1", p))
            return base
        except OSError:
            continue
        finally:
            for s in socks:
                s.close()
    raise RuntimeError(f"no {n} free consecutive ports in {PORT_RANGE}")


def _run(
    cmd: list[str], what: str, env: dict[str, str] | None = None, timeout: float = 300
) -> None:
    r = subprocess.run(
        cmd, capture_output=True, text=True, timeout=timeout, env=env, stdin=subprocess.DEVNULL
    )
    if r.returncode != 0:
        raise RuntimeError(f"{what} failed: {(r.stderr or r.stdout).strip()[-600:]}")


def _call(
    method: str, url: str, body: object = None, token: str | None = None
) -> tuple[dict, dict]:
    req = urllib.request.Request(
        url,
        data=json.dumps(body).encode() if body is not None else None,
        method=method,
        headers={"Content-Type": "application/json"},
    )
    if token:
        req.add_header("X-Auth-Token", token)
    with urllib.request.urlopen(req, timeout=30) as r:
        raw = r.read()
        return dict(r.headers), (json.loads(raw) if raw else {})


def _wait_http(url: str, timeout: float, proc: subprocess.Popen, log: Path) -> None:
    deadline = time.monotonic() + timeout
    while True:
        if proc.poll() is not None:  # e.g. its port was taken meanwhile: say so at once
            tail = log.read_text(errors="replace").strip().splitlines()[-2:]
            raise RuntimeError(f"{url}: uwsgi exited {proc.returncode}: {' | '.join(tail)}")
        try:
            with urllib.request.urlopen(url, timeout=2) as r:
                if r.status < 400:
                    return
        except urllib.error.HTTPError as e:
            if e.code < 500:
                return
        except OSError:
            pass
        if time.monotonic() > deadline:
            raise RuntimeError(f"{url} did not answer within {timeout:.0f}s")
        time.sleep(0.3)


def _stop(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)


@dataclass
class TestCloud:
    """A running cloud; `stop()` ends every process it started."""

    dir: Path
    base_port: int
    venv: Path = field(init=False)
    procs: dict[str, subprocess.Popen] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.venv = ensure_venv(RELEASE)

    # --- addresses -----------------------------------------------------------------------
    @property
    def db_port(self) -> int:
        return self.base_port

    def port(self, service: str) -> int:
        return self.base_port + 1 + SERVICES.index(service)

    def url(self, service: str) -> str:
        return f"http://127.0.0.1:{self.port(service)}" + ("/v3" if service == "keystone" else "")

    @property
    def auth_url(self) -> str:
        return self.url("keystone")

    @property
    def clouds_yaml(self) -> Path:
        return self.dir / "clouds.yaml"

    @property
    def password(self) -> str:
        return PASSWORD

    # --- processes -----------------------------------------------------------------------
    def _db_url(self, name: str) -> str:
        return f"mysql+pymysql://{mariadb.USER}:{mariadb.PASSWORD}@127.0.0.1:{self.db_port}/{name}"

    def start_db(self) -> None:
        root = self.dir / "db"
        mariadb.write_cnf(root, "127.0.0.1", self.db_port)
        mariadb.init_datadir(root, "test")
        log = open(self.dir / "mariadb.out", "w")
        self.procs["mariadb"] = subprocess.Popen(
            mariadb.server_command(root),
            stdout=log,
            stderr=log,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )
        deadline = time.monotonic() + 60
        while True:
            try:
                mariadb.execute("127.0.0.1", self.db_port, "SELECT 1")
                break
            except Exception as err:
                if time.monotonic() > deadline or self.procs["mariadb"].poll() is not None:
                    log = root / "var/log/mariadb/mariadb.log"
                    tail = (
                        log.read_text(errors="replace").strip().splitlines()[-3:]
                        if log.exists()
                        else []
                    )
                    raise RuntimeError(f"mariadbd did not start: {' | '.join(tail)}") from err
                time.sleep(0.2)
        for name in SERVICES:
            mariadb.execute("127.0.0.1", self.db_port, f"CREATE DATABASE {name}")

    def write_configs(self) -> None:
        keys = self.dir / "keystone"
        auth = (
            f"[keystone_authtoken]\nwww_authenticate_uri = http://127.0.0.1:{self.port('keystone')}\n"
            f"auth_url = http://127.0.0.1:{self.port('keystone')}\nauth_type = password\n"
            "project_domain_name = Default\nuser_domain_name = Default\nproject_name = admin\n"
            f"username = admin\npassword = {PASSWORD}\n"
        )
        files = {
            "keystone/keystone.conf": "[DEFAULT]\n"
            f"log_file = {keys}/keystone.log\n"
            f"[database]\nconnection = {self._db_url('keystone')}\n"
            f"[fernet_tokens]\nkey_repository = {keys}/fernet\n"
            f"[credential]\nkey_repository = {keys}/cred\n"
            "[identity]\npassword_hash_rounds = 4\n[token]\nprovider = fernet\n",
            "placement/placement.conf": "[DEFAULT]\n"
            f"log_file = {self.dir}/placement/placement.log\n"
            f"[placement_database]\nconnection = {self._db_url('placement')}\n"
            "[api]\nauth_strategy = keystone\n" + auth,
            "glance/glance-api.conf": "[DEFAULT]\n"
            f"log_file = {self.dir}/glance/glance.log\nenabled_backends = fs:file\n"
            f"[database]\nconnection = {self._db_url('glance')}\n"
            + auth
            + "[paste_deploy]\nflavor = keystone\n[glance_store]\ndefault_backend = fs\n"
            f"[fs]\nfilesystem_store_datadir = {self.dir}/glance/images\n"
            f"[os_glance_staging_store]\nfilesystem_store_datadir = {self.dir}/glance/staging\n"
            f"[os_glance_tasks_store]\nfilesystem_store_datadir = {self.dir}/glance/tasks\n",
        }
        for rel, text in files.items():
            p = self.dir / rel
            p.parent.mkdir(parents=True, exist_ok=True)
            p.write_text(text)
            p.chmod(0o600)
        shutil.copyfile(
            self.venv / "etc/glance/glance-api-paste.ini", self.dir / "glance/glance-api-paste.ini"
        )

    def sync(self) -> None:
        bin_ = self.venv / "bin"
        ks = ["--config-file", str(self.dir / "keystone/keystone.conf")]
        user, group = pwd.getpwuid(os.getuid()).pw_name, grp.getgrgid(os.getgid()).gr_name
        _run([str(bin_ / "keystone-manage"), *ks, "db_sync"], "keystone-manage db_sync")
        for what in ("fernet_setup", "credential_setup"):
            _run(
                [
                    str(bin_ / "keystone-manage"),
                    *ks,
                    what,
                    "--keystone-user",
                    user,
                    "--keystone-group",
                    group,
                ],
                f"keystone-manage {what}",
            )
        _run(
            [
                str(bin_ / "keystone-manage"),
                *ks,
                "bootstrap",
                "--bootstrap-password",
                PASSWORD,
                "--bootstrap-admin-url",
                self.auth_url,
                "--bootstrap-internal-url",
                self.auth_url,
                "--bootstrap-public-url",
                self.auth_url,
                "--bootstrap-region-id",
                REGION,
            ],
            "keystone-manage bootstrap",
        )
        _run(
            [
                str(bin_ / "placement-manage"),
                "--config-file",
                str(self.dir / "placement/placement.conf"),
                "db",
                "sync",
            ],
            "placement-manage db sync",
        )
        _run(
            [
                str(bin_ / "glance-manage"),
                "--config-file",
                str(self.dir / "glance/glance-api.conf"),
                "db_sync",
            ],
            "glance-manage db_sync",
        )

    def uwsgi_ini(self, service: str) -> Path:
        module, env = {
            "keystone": (
                "keystone.wsgi.api:application",
                f"OS_KEYSTONE_CONFIG_FILES={self.dir}/keystone/keystone.conf",
            ),
            "placement": (
                "placement.wsgi.api:application",
                f"OS_PLACEMENT_CONFIG_DIR={self.dir}/placement",
            ),
            "glance": ("glance.wsgi.api:application", f"OS_GLANCE_CONFIG_DIR={self.dir}/glance"),
        }[service]
        path = self.dir / service / "uwsgi.ini"
        path.write_text(
            "\n".join(
                [
                    "[uwsgi]",
                    "plugins = python3",
                    f"virtualenv = {self.venv}",
                    f"http-socket = 127.0.0.1:{self.port(service)}",
                    f"module = {module}",
                    f"env = {env}",
                    "master = true",
                    "lazy-apps = true",
                    "die-on-term = true",
                    # keystone mixes up concurrent requests' roles across threads of one process
                    # (tempest's application credential tests catch it): processes, not threads
                    *(
                        ["processes = 2", "threads = 1"]
                        if service == "keystone"
                        else ["processes = 1", "threads = 4"]
                    ),
                    "buffer-size = 65535",
                    "disable-logging = true",
                    # no HAProxy in front here: http-socket closes every connection after its
                    # response without saying so, and tempest's urllib3 would race that close on a
                    # reused one
                    "add-header = Connection: close",
                    "",
                ]
            )
        )
        return path

    def start_service(self, service: str, timeout: float = 90) -> None:
        log = self.dir / service / "uwsgi.log"
        with open(log, "a") as fh:
            proc = subprocess.Popen(
                ["uwsgi", "--ini", str(self.uwsgi_ini(service))],
                stdout=fh,
                stderr=fh,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
            )
        self.procs[service] = proc
        _wait_http(
            self.url(service) + ("/healthcheck" if service == "glance" else ""), timeout, proc, log
        )

    def stop_service(self, service: str) -> None:
        proc = self.procs.pop(service, None)
        if proc is not None:
            _stop(proc)

    def register(self) -> None:
        """Catalog entries of placement and image (public and internal: keystonemiddleware in
        placement and glance looks keystone up by its internal endpoint); the clouds.yaml."""
        auth = {
            "auth": {
                "identity": {
                    "methods": ["password"],
                    "password": {
                        "user": {"name": "admin", "domain": {"id": "default"}, "password": PASSWORD}
                    },
                },
                "scope": {"project": {"name": "admin", "domain": {"id": "default"}}},
            }
        }
        headers, _ = _call("POST", self.auth_url + "/auth/tokens", auth)
        token = headers.get("X-Subject-Token") or headers["x-subject-token"]
        for name, kind, service in (
            ("placement", "placement", "placement"),
            ("glance", "image", "glance"),
        ):
            _, made = _call(
                "POST",
                self.auth_url + "/services",
                {"service": {"name": name, "type": kind}},
                token,
            )
            for iface in ("public", "internal"):
                _call(
                    "POST",
                    self.auth_url + "/endpoints",
                    {
                        "endpoint": {
                            "service_id": made["service"]["id"],
                            "interface": iface,
                            "url": self.url(service),
                            "region_id": REGION,
                        }
                    },
                    token,
                )
        write_clouds_yaml(
            self.clouds_yaml, CLOUD, self.auth_url, "admin", PASSWORD, "admin", REGION
        )

    def start(self) -> TestCloud:
        self.dir.mkdir(parents=True, exist_ok=True)
        try:
            self.start_db()
            self.write_configs()
            self.sync()
            for s in SERVICES:
                self.start_service(s)
            self.register()
        except BaseException:
            self.stop()
            raise
        return self

    def stop(self) -> None:
        for name in [*SERVICES, "mariadb"]:
            self.stop_service(name)


def start_cloud(directory: Path, tries: int = 3) -> TestCloud:
    """A new running cloud in `directory` (call `stop()` on it). Its ports are chosen once the
    venv is there (a first build takes minutes, and others' labs take ports meanwhile); if one
    is taken before a service binds it, the cloud starts afresh on other ports."""
    ensure_venv(RELEASE)
    for attempt in range(tries):
        shutil.rmtree(directory, ignore_errors=True)
        try:
            return TestCloud(directory, _free_block(1 + len(SERVICES))).start()
        except RuntimeError as e:  # start() stopped what it had started
            if "Address already in use" not in str(e) or attempt == tries - 1:
                raise
    raise AssertionError("unreachable")
