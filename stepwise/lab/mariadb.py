"""Real MariaDB (Debian's mariadbd) for the lab's service databases.

One mariadbd per node that runs the database service, with tiny buffers (~85 MiB each). The
Galera replication between them is emulated: writes (schema changes) go to every running
member, and a member that starts copies the state of a running one (an SST). The data format
of a datadir follows the installed `mariadb-server` major (10.3 on OS 8, 10.5 on OS 9): a
server refuses a datadir of another major until it is dumped and restored, as real MariaDB
upgrades require.
"""

from __future__ import annotations

import getpass
import os
import shutil
import subprocess
import time
from pathlib import Path

META_DB = "stepwise_meta"
USER = "stepwise"
PASSWORD = "stepwise"
FORMAT_FILE = "stepwise_format"


def binaries() -> dict[str, str]:
    """Paths of the MariaDB programs, or a clear error naming the Debian package."""
    out = {}
    for name in ("mariadbd", "mariadb-install-db", "mariadb", "mariadb-dump"):
        path = shutil.which(name) or (f"/usr/sbin/{name}" if os.path.exists(f"/usr/sbin/{name}") else None)
        if not path:
            raise RuntimeError(f"'{name}' not found: install the Debian packages mariadb-server and mariadb-client")
        out[name] = path
    return out


def socket_path(root: Path) -> Path:
    """The node's server socket: under its root, unless that path is longer than a Unix
    socket may be (107 bytes; deep test directories reach it), then a short private one."""
    sock = root / "run" / "mysqld" / "mysqld.sock"
    if len(str(sock)) <= 100:
        return sock
    import hashlib
    import tempfile

    short = Path(tempfile.gettempdir()) / f"stepwise-sock-{os.getuid()}"
    short.mkdir(mode=0o700, exist_ok=True)
    return short / (hashlib.sha1(str(root).encode()).hexdigest()[:16] + ".sock")


def my_cnf(root: Path, address: str, port: int) -> str:
    run = root / "run" / "mysqld"
    return f"""[mysqld]
datadir={root}/var/lib/mysql
socket={socket_path(root)}
pid-file={run}/mysqld.pid
bind-address={address}
port={port}
log-error={root}/var/log/mariadb/mariadb.log
skip-name-resolve
skip-log-bin
performance_schema=OFF
innodb_buffer_pool_size=8M
innodb_log_file_size=4M
innodb_data_file_path=ibdata1:4M:autoextend
innodb_use_native_aio=0
key_buffer_size=1M
table_open_cache=64
max_connections=60
thread_cache_size=4
"""


def write_cnf(root: Path, address: str, port: int) -> Path:
    path = root / "etc" / "my.cnf"
    path.parent.mkdir(parents=True, exist_ok=True)
    (root / "run" / "mysqld").mkdir(parents=True, exist_ok=True)
    (root / "var" / "log" / "mariadb").mkdir(parents=True, exist_ok=True)
    path.write_text(my_cnf(root, address, port))
    return path


def server_command(root: Path) -> list[str]:
    # Running as root needs --user=root; as anyone else mariadbd keeps its own user anyway.
    return [binaries()["mariadbd"], f"--defaults-file={root}/etc/my.cnf", f"--user={getpass.getuser()}"]


def template_dir() -> Path:
    base = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "stepwise" / "lab"
    return base / "mariadb-datadir-v1"


def ensure_template() -> Path:
    """An initialised datadir with the lab's user, made once and copied per node (fast up)."""
    tpl = template_dir()
    if (tpl / "ready").is_file():
        return tpl / "data"
    work = tpl.with_name(tpl.name + f".tmp{os.getpid()}")
    shutil.rmtree(work, ignore_errors=True)
    root = work
    (root / "var" / "lib").mkdir(parents=True)
    cnf = write_cnf(root, "127.0.0.1", 0)
    cnf.write_text(cnf.read_text().replace("bind-address=127.0.0.1\nport=0\n", "skip-networking\n"))
    b = binaries()
    subprocess.run([b["mariadb-install-db"], f"--defaults-file={cnf}", f"--user={getpass.getuser()}",
                    "--skip-test-db", "--auth-root-authentication-method=normal"],
                   check=True, capture_output=True, timeout=120)
    proc = subprocess.Popen(server_command(root), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    sock = socket_path(root)
    try:
        sql = (f"CREATE USER '{USER}'@'%' IDENTIFIED BY '{PASSWORD}'; GRANT ALL ON *.* TO '{USER}'@'%';"
               f"CREATE DATABASE {META_DB}; CREATE TABLE {META_DB}.schema_versions "
               "(project VARCHAR(64) PRIMARY KEY, version INT NOT NULL, online INT NOT NULL DEFAULT 0);"
               f"CREATE TABLE {META_DB}.data (k VARCHAR(128) PRIMARY KEY, v TEXT);")
        for _ in range(200):
            if sock.exists():
                r = subprocess.run([b["mariadb"], "-S", str(sock), "-uroot", "-e", sql], capture_output=True)
                if r.returncode == 0:
                    break
            time.sleep(0.05)
        else:
            raise RuntimeError("could not initialise the MariaDB template datadir")
    finally:
        proc.terminate()
        proc.wait(30)
    shutil.rmtree(tpl, ignore_errors=True)
    tpl.mkdir(parents=True, exist_ok=True)
    os.replace(root / "var" / "lib" / "mysql", tpl / "data")
    shutil.rmtree(work, ignore_errors=True)
    (tpl / "ready").write_text("ok")
    return tpl / "data"


def init_datadir(root: Path, fmt: str) -> None:
    """Give a node a fresh datadir (from the template) in data format `fmt` (e.g. 10.3)."""
    dst = root / "var" / "lib" / "mysql"
    shutil.rmtree(dst, ignore_errors=True)
    dst.parent.mkdir(parents=True, exist_ok=True)
    shutil.copytree(ensure_template(), dst)
    (dst / FORMAT_FILE).write_text(fmt)


def data_format(root: Path) -> str | None:
    try:
        return (root / "var" / "lib" / "mysql" / FORMAT_FILE).read_text().strip()
    except FileNotFoundError:
        return None


def connect(host: str, port: int, timeout: float = 1.0):
    import pymysql

    return pymysql.connect(host=host, port=port, user=USER, password=PASSWORD, database=META_DB,
                           connect_timeout=timeout, read_timeout=timeout, write_timeout=timeout, autocommit=True)


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


def copy_state(src: tuple[str, int], dst: tuple[str, int]) -> None:
    """The emulated SST: a joining member takes the state of a running one."""
    rows = execute(*src, "SELECT project, version, online FROM schema_versions")
    data = execute(*src, "SELECT k, v FROM data")
    conn = connect(*dst, timeout=3.0)
    try:
        with conn.cursor() as cur:
            cur.execute("DELETE FROM schema_versions")
            cur.execute("DELETE FROM data")
            if rows:
                cur.executemany("INSERT INTO schema_versions VALUES (%s,%s,%s)", rows)
            if data:
                cur.executemany("INSERT INTO data VALUES (%s,%s)", data)
    finally:
        conn.close()


def dump(root: Path, out: Path) -> None:
    """Dump every lab database of a running server (for a major-version change)."""
    sock = socket_path(root)
    out.parent.mkdir(parents=True, exist_ok=True)
    with open(out, "w") as fh:
        subprocess.run([binaries()["mariadb-dump"], "-S", str(sock), "-uroot", "--databases", META_DB],
                       check=True, stdout=fh, stderr=subprocess.PIPE, timeout=60)


def restore(root: Path, dump_file: Path) -> None:
    sock = socket_path(root)
    with open(dump_file) as fh:
        subprocess.run([binaries()["mariadb"], "-S", str(sock), "-uroot"], check=True, stdin=fh,
                       capture_output=True, timeout=60)


def installed_format(packages: dict) -> str:
    """Data format a node's installed MariaDB writes: its major.minor version."""
    for name in ("mariadb-server", "mariadb-server-galera", "mariadb"):
        if name in packages:
            return ".".join(packages[name]["version"].split(".")[:2])
    return "10.3"
