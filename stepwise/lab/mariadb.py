"""Real MariaDB (Debian's mariadbd) for the lab's service databases.

One mariadbd per node that runs the database service, with tiny buffers (~110 MiB each),
each a member of a real Galera cluster (`galera.py`: replication, quorum, IST/SST are
Galera's). The data format of a datadir follows the installed `mariadb-server` major (10.3
on OS 8, 10.5 on OS 9): as real MariaDB, a server opens a datadir of an older major (and
`mariadb-upgrade` then brings it to the server's) but refuses a newer one. That marker is a
stand-in: one MariaDB (10.11) runs here whatever the node's OS, so a real major change
cannot happen.
"""

from __future__ import annotations

import getpass
import os
import shutil
import subprocess
import time
from pathlib import Path

from stepwise.lab import wsrep

META_DB = "stepwise_meta"
USER = "stepwise"
PASSWORD = "stepwise"
#: The datadir format marker (beside the datadir: an SST replaces the datadir's content).
FORMAT_FILE = "/var/lib/stepwise/mariadb_format"


SYSTEM_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"


def binaries() -> dict[str, str]:
    """Paths of the MariaDB programs, or a clear error naming the Debian package."""
    out = {}
    for name in ("mariadbd", "mariadb-install-db", "mariadb", "mariadb-dump", "mariadb-upgrade"):
        # the system's programs, never the lab's node commands of the same name on a node's PATH
        path = shutil.which(name, path=SYSTEM_PATH)
        if not path:
            raise RuntimeError(
                f"'{name}' not found: install the Debian packages mariadb-server and mariadb-client"
            )
        out[name] = path
    return out


def check_installed() -> None:
    """Everything the lab's Galera members need, or a clear error naming the Debian package."""
    binaries()
    wsrep.provider()
    for name, pkg in (("mariabackup", "mariadb-backup"), ("socat", "socat")):
        if not shutil.which(name):
            raise RuntimeError(
                f"'{name}' not found (Galera's state transfers use it): "
                f"install the Debian package {pkg}"
            )


def socket_path(root: Path, name: str = "mysqld") -> Path:
    """The node's server socket: under its root, unless that path is longer than a Unix
    socket may be (107 bytes; deep test directories reach it), then a short private one."""
    sock = root / "run" / "mysqld" / f"{name}.sock"
    if len(str(sock)) <= 100:
        return sock
    import hashlib
    import tempfile

    short = Path(tempfile.gettempdir()) / f"stepwise-sock-{os.getuid()}"
    short.mkdir(mode=0o700, exist_ok=True)
    return short / (hashlib.sha1(f"{root}/{name}".encode()).hexdigest()[:16] + ".sock")


def error_log(root: Path, name: str = "mysqld") -> Path:
    """Where a server of this root logs (my.cnf's log-error): what a failed start or a stuck
    join says."""
    return root / "var" / "log" / "mariadb" / f"{'mariadb' if name == 'mysqld' else name}.log"


def my_cnf(
    root: Path, address: str | None, port: int, galera: str = "", name: str = "mysqld"
) -> str:
    """A server's my.cnf: tiny buffers; `galera` is the member's wsrep part (wsrep.wsrep_cnf),
    empty for a server without replication (the template, dump and restore); no address
    means no network (Unix socket only)."""
    run = root / "run" / "mysqld"
    net = f"bind-address={address}\nport={port}" if address else "skip-networking"
    return f"""[mysqld]
datadir={root}/var/lib/mysql
socket={socket_path(root, name)}
pid-file={run}/{name}.pid
{net}
log-error={error_log(root, name)}
tmpdir={root}/tmp
skip-name-resolve
skip-log-bin
performance_schema=OFF
innodb_buffer_pool_size=8M
innodb_log_file_size=4M
innodb_data_file_path=ibdata1:4M:autoextend
innodb_autoextend_increment=4
innodb_use_native_aio=0
key_buffer_size=1M
table_open_cache=64
# real services (~3 per node x 3 nodes x ~5 pooled connections) reach every member
max_connections=200
thread_cache_size=4
{galera if galera else "wsrep_on=OFF"}
"""


def write_cnf(
    root: Path, address: str | None, port: int, galera: str = "", name: str = "mysqld"
) -> Path:
    """Write the server's my.cnf (`etc/NAME.cnf`) and the directories it names."""
    path = root / "etc" / ("my.cnf" if name == "mysqld" else f"{name}.cnf")
    path.parent.mkdir(parents=True, exist_ok=True)
    for d in ("run/mysqld", "var/log/mariadb", "tmp"):
        (root / d).mkdir(parents=True, exist_ok=True)
    path.write_text(my_cnf(root, address, port, galera, name))
    return path


def server_command(root: Path, cnf: Path | None = None) -> list[str]:
    # Running as root needs --user=root; as anyone else mariadbd keeps its own user anyway.
    return [
        binaries()["mariadbd"],
        f"--defaults-file={cnf or root / 'etc' / 'my.cnf'}",
        f"--user={getpass.getuser()}",
    ]


def template_dir() -> Path:
    base = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "stepwise" / "lab"
    return base / "mariadb-galera-v2"


def _sql(sock: Path, sql: str, proc: subprocess.Popen, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    err = b""
    while time.monotonic() < deadline and proc.poll() is None:
        if sock.exists():
            r = subprocess.run(
                [binaries()["mariadb"], "-S", str(sock), "-uroot", "-e", sql], capture_output=True
            )
            if r.returncode == 0:
                return
            err = r.stderr
        time.sleep(0.05)
    raise RuntimeError(
        f"could not initialise the MariaDB template datadir: {err.decode(errors='replace')[:300]}"
    )


def ensure_template() -> Path:
    """The datadir every lab copies, made once per machine (a fast `lab up`): initialised, with
    the lab's user and tables, written by a one-member Galera cluster, so it carries a cluster
    position (uuid:seqno). Every member of a new lab starts from this identical copy: the first
    bootstraps at that position, the others join by IST of what happened since (seconds)
    instead of a full SST.
    """
    tpl = template_dir()
    if (tpl / "ready").is_file():
        return tpl
    work = tpl.with_name(tpl.name + f".tmp{os.getpid()}")
    shutil.rmtree(work, ignore_errors=True)
    (work / "var" / "lib").mkdir(parents=True)
    _install_db(work)
    # Real services (keystone, placement, glance) create their databases and users with it.
    _run_server_once(
        work,
        f"CREATE USER '{USER}'@'%' IDENTIFIED BY '{PASSWORD}'; "
        f"GRANT ALL PRIVILEGES ON *.* TO '{USER}'@'%' WITH GRANT OPTION;",
    )
    _write_tables_as_one_member_cluster(work)
    _keep_only_the_datadir(work)
    (work / "ready").write_text("ok")
    if tpl.exists() and not (tpl / "ready").is_file():
        shutil.rmtree(tpl, ignore_errors=True)  # left half-made by an interrupted run
    try:
        os.rename(work, tpl)
    except OSError:  # another process made it first
        shutil.rmtree(work, ignore_errors=True)
    return tpl


def _install_db(root: Path) -> None:
    """`mariadb-install-db` into a node root of its own (no test database)."""
    cnf = write_cnf(root, None, 0)
    subprocess.run(
        [
            binaries()["mariadb-install-db"],
            f"--defaults-file={cnf}",
            f"--user={getpass.getuser()}",
            "--skip-test-db",
            "--auth-root-authentication-method=normal",
        ],
        check=True,
        capture_output=True,
        timeout=120,
    )


def _run_server_once(root: Path, sql: str, extra: tuple[str, ...] = ()) -> None:
    """Start mariadbd on `root`, run `sql` as root once it answers, stop it."""
    proc = subprocess.Popen(
        server_command(root) + list(extra), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    try:
        _sql(socket_path(root), sql, proc)
    finally:
        proc.terminate()
        proc.wait(60)


def _write_tables_as_one_member_cluster(root: Path) -> None:
    """The lab's tables, written by a one-member Galera cluster so the datadir carries a cluster
    position; it must shut down cleanly (a crashed member's position is unknown)."""
    # A one-member cluster on a private port (tcp://127.0.0.1:0: any free one) writes the tables.
    one = wsrep.wsrep_cnf("stepwise-template", "template", "127.0.0.1", ["127.0.0.1"])
    one = one.replace(f"127.0.0.1:{wsrep.GCOMM_PORT}", "127.0.0.1:0").replace(
        f"127.0.0.1:{wsrep.IST_PORT}", "127.0.0.1:0"
    )
    write_cnf(root, None, 0, galera=one)
    _run_server_once(
        root,
        f"CREATE DATABASE {META_DB}; CREATE TABLE {META_DB}.schema_versions "
        "(project VARCHAR(64) PRIMARY KEY, version INT NOT NULL, "
        "online INT NOT NULL DEFAULT 0);"
        f"CREATE TABLE {META_DB}.data (k VARCHAR(128) PRIMARY KEY, v TEXT);",
        ("--wsrep-new-cluster",),
    )
    if "seqno:   -1" in (root / "var" / "lib" / "mysql" / "grastate.dat").read_text():
        raise RuntimeError("the MariaDB template's Galera member did not shut down cleanly")


def _keep_only_the_datadir(work: Path) -> None:
    """The datadir becomes `galera`; the rest of the node root the server ran in goes."""
    seed = work / "var" / "lib" / "mysql"
    for f in (
        "galera.cache",
        "gvwstate.dat",
    ):  # a ring buffer each member makes its own; no view to restore
        (seed / f).unlink(missing_ok=True)
    os.replace(seed, work / "galera")
    shutil.rmtree(work / "var", ignore_errors=True)
    shutil.rmtree(work / "etc", ignore_errors=True)
    shutil.rmtree(work / "run", ignore_errors=True)
    shutil.rmtree(work / "tmp", ignore_errors=True)


def init_datadir(root: Path, fmt: str) -> None:
    """Give a new lab member a fresh datadir in data format `fmt` (e.g. 10.3), at the lab's
    cluster position."""
    dst = root / "var" / "lib" / "mysql"
    shutil.rmtree(dst, ignore_errors=True)
    dst.parent.mkdir(parents=True, exist_ok=True)
    shutil.copytree(ensure_template() / "galera", dst)
    set_data_format(root, fmt)


def set_data_format(root: Path, fmt: str) -> None:
    path = root / FORMAT_FILE.lstrip("/")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(fmt)


def data_format(root: Path) -> str | None:
    try:
        return (root / FORMAT_FILE.lstrip("/")).read_text().strip()
    except FileNotFoundError:
        return None


def connect(host: str, port: int, timeout: float = 1.0):
    import pymysql

    return pymysql.connect(
        host=host,
        port=port,
        user=USER,
        password=PASSWORD,
        database=META_DB,
        connect_timeout=timeout,
        read_timeout=timeout,
        write_timeout=timeout,
        autocommit=True,
    )


def get_schema(host: str, port: int, project: str) -> int | None:
    """The schema version of `project` (None when the project has no schema yet)."""
    conn = connect(host, port)
    try:
        with conn.cursor() as cur:
            cur.execute("SELECT version FROM schema_versions WHERE project=%s", (project,))
            row = cur.fetchone()
            return int(row[0]) if row else 0
    finally:
        conn.close()


def execute(host: str, port: int, sql: str, args: tuple = ()) -> list[tuple]:
    conn = connect(host, port, timeout=3.0)
    try:
        with conn.cursor() as cur:
            cur.execute(sql, args)
            return list(cur.fetchall())
    finally:
        conn.close()


def installed_format(packages: dict) -> str:
    """Data format a node's installed MariaDB writes: its major.minor version."""
    for name in ("mariadb-server", "mariadb-server-galera", "mariadb"):
        if name in packages:
            return ".".join(packages[name]["version"].split(".")[:2])
    return "10.3"
