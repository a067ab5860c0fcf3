"""The schemas a real project's own sync made, kept per release on this machine.

A new lab's databases are empty and every project's sync (`keystone-manage db_sync`,
`neutron-db-manage upgrade heads`, nova's `api_db sync` and `db sync`, ...) builds the same
schema from them for the same code: ~20 s of the 2 cores at every `lab up` (neutron alone
runs a few hundred migrations). The first lab up of a release venv runs the real tool and
keeps what it made (`mariadb-dump` of its databases, right after the sync, before anything
lab-specific is written); later ones load that dump with Debian's `mariadb` client (~1 s).
The schema is the tool's own output, byte for byte what it would make again, and everything
after it (keystone's keys and bootstrap, nova's cell mappings, the upgrades' migrations) runs
the real tools as before. The cache is keyed by the venv's identity (its lock's pins and the
interpreter, `venvs.venv_path`), so new code makes a new entry; `STEPWISE_LAB_SCHEMA_CACHE=0`
runs every sync.
"""

from __future__ import annotations

import os
import subprocess
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from stepwise.lab import mariadb
from stepwise.lab.openstack import config as openstack_config
from stepwise.lab.openstack import venvs

if TYPE_CHECKING:
    from stepwise.lab.nodes import Lab

#: bumped when what a cache entry holds changes (its files are then made again)
FORMAT = "1"
#: `0` turns the cache off: every lab up runs every project's sync
SWITCH = "STEPWISE_LAB_SCHEMA_CACHE"


def enabled() -> bool:
    """Whether lab up may load kept schemas (on unless STEPWISE_LAB_SCHEMA_CACHE=0)."""
    return os.environ.get(SWITCH, "1") != "0"


def entry(lab: Lab, node: str, service: str) -> Path:
    """The directory that keeps the schemas `service`'s installed code makes on `node`."""
    release = openstack_config.release_on(lab, node, service)
    if release is None:
        raise RuntimeError(f"{service} is not installed on {node}")
    return venvs.cache_root() / "schemas" / f"{venvs.venv_path(release.lock).name}-v{FORMAT}"


def synced(
    lab: Lab, node: str, service: str, databases: tuple[str, ...], sync: Callable[[], None]
) -> bool:
    """Bring `databases` to what `sync` (the project's own tool) makes of them: loaded from
    this machine's cache when it has them for this code (True), else by running `sync` and
    keeping the result (False). A dump that does not load is removed and the tool runs."""
    where = entry(lab, node, service)
    files = [where / f"{db}.sql" for db in databases]
    if enabled() and all(f.is_file() for f in files):
        try:
            for db, f in zip(databases, files, strict=True):
                _load(lab, db, f)
            return True
        except RuntimeError:
            for db, f in zip(databases, files, strict=True):
                f.unlink(missing_ok=True)
                _recreate(lab, db)
    sync()
    if enabled():
        where.mkdir(parents=True, exist_ok=True)
        for db, f in zip(databases, files, strict=True):
            _keep(lab, db, f)
    return False


def _client_args(lab: Lab, program: str) -> list[str]:
    """A MariaDB program of the system on the database VIP, as the lab's administrator (the
    credentials in a private defaults file, not on the command line)."""
    cnf = lab.dir / "openstack" / "mariadb-client.cnf"
    if not cnf.exists():
        cnf.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        fd = os.open(cnf, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as fh:
            fh.write(f"[client]\nuser={mariadb.USER}\npassword={mariadb.PASSWORD}\n")
    vip = lab.spec.vips[lab.spec.db_service]
    return [
        mariadb.binaries()[program],
        f"--defaults-extra-file={cnf}",
        f"--host={vip.address}",
        f"--port={vip.port}",
    ]


def _load(lab: Lab, db: str, dump: Path) -> None:
    with open(dump, "rb") as fh:
        r = subprocess.run(
            [*_client_args(lab, "mariadb"), db], stdin=fh, capture_output=True, timeout=300
        )
    if r.returncode != 0:
        raise RuntimeError(f"loading {dump} into {db}: {r.stderr.decode(errors='replace')[-300:]}")


def _recreate(lab: Lab, db: str) -> None:
    vip = lab.spec.vips[lab.spec.db_service]
    mariadb.execute(vip.address, vip.port, f"DROP DATABASE IF EXISTS {db}")
    mariadb.execute(vip.address, vip.port, f"CREATE DATABASE {db}")


def _keep(lab: Lab, db: str, dump: Path) -> None:
    """Dump `db` as the tool left it; written whole or not at all (another lab up on this
    machine may keep the same entry at the same time: both write the same schema)."""
    fd, tmp = tempfile.mkstemp(dir=dump.parent, prefix=f".{db}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as out:
            r = subprocess.run(
                [
                    *_client_args(lab, "mariadb-dump"),
                    "--skip-comments",
                    "--single-transaction",
                    "--routines",
                    "--triggers",
                    db,
                ],
                stdout=out,
                stderr=subprocess.PIPE,
                timeout=300,
            )
        if r.returncode != 0:
            return  # nothing kept: the next lab up runs the tool again
        os.replace(tmp, dump)
    finally:
        Path(tmp).unlink(missing_ok=True)
