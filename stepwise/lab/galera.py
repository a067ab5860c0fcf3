"""Galera for the lab's database: every member is a real MariaDB 10.11 with galera-4.

Replication, quorum (the primary component), the non-primary state after members crash,
state transfers (IST from the gcache, SST by mariabackup) and the automatic re-forming of
the primary component when the crashed members come back (`pc.recovery`) are Galera's own.
The lab adds only what an init system and a resource agent add around it, in the wrapper
the supervisor runs (the `galera` kind's `start` -> `start`): recover the position after a crash
(as `galera_recovery` does for systemd), bootstrap a new cluster when asked to
(`galera_new_cluster`, the node command) or when the member is alone or back from a crash,
otherwise join the members that run (a cleanly stopped member finding none refuses, as
mariadbd fails to reach a primary view); and the clustercheck HAProxy asks on port 9200
(`clustercheck`).

Ports: each node has its own loopback address, so the standard ports (group 4567, IST 4568,
SST 4444) are bound on that address only and never collide between nodes or labs. The SST
listener (socat) would listen on every address by default; `[sst] sockopt=bind=` keeps it
on the node's own.
"""

from __future__ import annotations

import functools
import re
import socket
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from stepwise.lab.nodes import Lab, file_lock, read_unit
from stepwise.lab.wsrep import GCOMM_PORT, SST_METHOD, wsrep_cnf

#: A donor of a mariabackup SST keeps serving: clustercheck keeps it in the balancer
#: (clustercheck's AVAILABLE_WHEN_DONOR=1, as set up for non-blocking SST methods).
AVAILABLE_WHEN_DONOR = True
#: How long a joiner may take to reach Synced before its unit counts as started anyway (it
#: keeps joining: an SST, or waiting for the primary component to re-form; clustercheck and
#: the rejoin step report the rest).
JOIN_WAIT = 12.0
BOOTSTRAP_WAIT = 30.0


class StartError(RuntimeError):
    """The member cannot start (the wrapper exits with this message, as mysqld_safe would)."""


def cluster_name(lab: Lab) -> str:
    return f"stepwise-lab{lab.index}"


def member_cnf(lab: Lab, node: str, service: str) -> str:
    svc = lab.service(service)
    return wsrep_cnf(
        cluster_name(lab),
        node,
        lab.node(node).address,
        [lab.node(n).address for n in svc.instances],
    )


# --- the local server's state --------------------------------------------------------------
def local_status(root: Path, timeout: float = 1.0) -> dict[str, str]:
    """`SHOW GLOBAL STATUS LIKE 'wsrep_%'` of the node's server, over its Unix socket."""
    import pymysql

    from stepwise.lab.mariadb import socket_path

    conn = pymysql.connect(
        unix_socket=str(socket_path(root)),
        user="root",
        password="",
        connect_timeout=timeout,
        read_timeout=timeout,
        write_timeout=timeout,
    )
    try:
        with conn.cursor() as cur:
            cur.execute("SHOW GLOBAL STATUS LIKE 'wsrep\\_%'")
            return {k: str(v) for k, v in cur.fetchall()}
    finally:
        conn.close()


def clustercheck(root: Path) -> tuple[bool, str]:
    """What clustercheck answers HAProxy: available when the local member is Synced (or a
    donor, see AVAILABLE_WHEN_DONOR) in the primary component."""
    try:
        st = local_status(root)
    except Exception as exc:  # noqa: BLE001 - not up yet, joining (no SQL before the SST ends), gone
        return False, f"galera: the local server does not answer ({str(exc)[:80]})"
    return verdict(st)


def verdict(st: dict[str, str]) -> tuple[bool, str]:
    state = st.get("wsrep_local_state_comment", "?")
    status = st.get("wsrep_cluster_status", "?")
    size = st.get("wsrep_cluster_size", "?")
    where = f"{state}, {status} component of {size}"
    if status != "Primary":
        return False, f"galera: {where} (no quorum)"
    if state == "Synced" or (AVAILABLE_WHEN_DONOR and state.startswith("Donor")):
        return True, f"galera: {where}"
    return False, f"galera: {where} (not synced)"


def gcomm_listening(address: str) -> bool:
    """Whether a Galera member runs on `address` (its group communication port answers)."""
    try:
        with socket.create_connection((address, GCOMM_PORT), timeout=0.5):
            return True
    except OSError:
        return False


def running_members(lab: Lab, service: str, but: str | None = None) -> list[str]:
    return [
        n
        for n in lab.service(service).instances
        if n != but and gcomm_listening(lab.node(n).address)
    ]


# --- position: grastate.dat and recovery ---------------------------------------------------
def datadir(root: Path) -> Path:
    return root / "var" / "lib" / "mysql"


def grastate(root: Path) -> dict[str, str]:
    """Galera's saved state of a datadir (uuid, seqno, safe_to_bootstrap); {} when none."""
    try:
        text = (datadir(root) / "grastate.dat").read_text()
    except FileNotFoundError:
        return {}
    return {
        k.strip(): v.strip() for k, _, v in (ln.partition(":") for ln in text.splitlines()) if v
    }


def allow_bootstrap(root: Path) -> None:
    """Mark this datadir safe to bootstrap from, as the resource agent does for the member
    it chooses (Galera refuses a bootstrap from a member that was not the last to leave)."""
    path = datadir(root) / "grastate.dat"
    if path.exists():
        path.write_text(
            re.sub(r"(?m)^safe_to_bootstrap:.*$", "safe_to_bootstrap: 1", path.read_text())
        )


def recover_position(command: list[str]) -> str | None:
    """After a crash (seqno -1): the last committed position from InnoDB, as galera_recovery
    finds it for systemd (`mariadbd --wsrep-recover`), to start from (then IST suffices)."""
    r = subprocess.run(
        command + ["--wsrep-recover", "--disable-log-error"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    m = re.search(r"WSREP: Recovered position: *(\S+)", r.stderr + r.stdout)
    return m.group(1) if m and not m.group(1).endswith(":-1") else None


def _major(fmt: str) -> tuple[int, ...]:
    return tuple(int(x) for x in fmt.split(".") if x.isdigit())


def start_lock(lab: Lab) -> Any:
    """One member at a time decides bootstrap-or-join and comes up (a resource agent's
    ordering): two members starting at once must not both bootstrap a cluster."""
    return file_lock(lab.run_dir / "galera-start.lock")


def start(
    lab: Lab,
    node: str,
    service: str,
    want_format: str,
    on_spawn: Callable[[subprocess.Popen], None] = lambda _p: None,
) -> subprocess.Popen:
    """Start this node's member: join the members that run (IST/SST), or bootstrap a new
    cluster when asked to (`request_new_cluster`), alone, or back first from a crash.

    Returns the running mariadbd (also given to `on_spawn` as soon as it exists, so a stop
    during the join ends it); raises StartError when it cannot start.
    """
    from stepwise.lab import mariadb

    root = lab.node_root(node)
    with start_lock(lab):
        peers = running_members(lab, service, but=node)
        asked = _take_new_cluster_request(lab, node)
        _refuse_other_os_major(lab, node, service, peers)
        if asked and peers:
            raise StartError(
                f"a new cluster while {', '.join(peers)} run would split the cluster in two: "
                "start this member without galera_new_cluster (it joins them)"
            )
        if not peers and not asked:
            _refuse_forming_alone(lab, node, service)
        _prepare_datadir(root, want_format, joining=bool(peers))
        cmd = _configure_member(lab, node, service, bootstrap=not peers, asked=asked)
        log = mariadb.error_log(root)
        seen = log.stat().st_size if log.exists() else 0
        # Own process group is the wrapper's: a node crash (killpg) takes mariadbd and any
        # SST script with it.
        child = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        on_spawn(child)
        if not peers:
            ok, why = _wait(child, root, BOOTSTRAP_WAIT)
            if child.poll() is None and not ok:
                child.kill()
            if not ok:
                raise StartError(f"the new cluster did not become primary: {why}; see {log}")
            return child
        # The next member may start once this one is in the group's view (two members
        # negotiating their entry at once take seconds longer); the state transfers overlap.
        _in_group(child, log, seen, JOIN_WAIT)
    ok, why = _wait(child, root, JOIN_WAIT)
    if child.poll() is not None:
        raise StartError(f"mariadbd exited while joining: {why}; see {log}")
    return child


def request_new_cluster(lab: Lab, node: str, on: bool = True) -> None:
    """The member's next start bootstraps a new cluster (`galera_new_cluster`, or `lab up`
    forming the cloud's cluster on its first member)."""
    with lab.node_lock(node):
        lab.write_state(node, "galera.json", {"new_cluster": on})


def _take_new_cluster_request(lab: Lab, node: str) -> bool:
    with lab.node_lock(node):
        asked = bool((lab.read_state(node, "galera.json", {}) or {}).get("new_cluster"))
        if asked:
            lab.write_state(node, "galera.json", {"new_cluster": False})
    return asked


def _refuse_forming_alone(lab: Lab, node: str, service: str) -> None:
    """A member that finds no other one running does not form a cluster by itself: it looks
    for the members its configuration names and gives up (what mariadbd does). Two cases
    start anyway: a lone member (a one-node cluster), and a member back from a crash (its
    saved view lets Galera's `pc.recovery` re-form the primary component; the lab starts the
    first one back as that component, where a real cluster waits for every member of the
    view)."""
    if len(lab.service(service).instances) == 1:
        return
    if grastate(lab.node_root(node)).get("seqno") == "-1":
        return
    others = [n for n in lab.service(service).instances if n != node]
    raise StartError(
        f"no other member of the cluster runs ({', '.join(others)} stopped) and this one was "
        "stopped cleanly: Galera forms no cluster by itself (failed to reach primary view); "
        "bootstrap a new cluster with galera_new_cluster on the member that stopped last "
        "(safe_to_bootstrap: 1 in its grastate.dat), then start the others"
    )


def _refuse_other_os_major(lab: Lab, node: str, service: str, peers: list[str]) -> None:
    """Stand-in: on this machine every member runs the same MariaDB and galera, so Galera would
    happily join across OS majors; on real nodes 10.3 (OS 8) and 10.5 (OS 9) members cannot
    form one cluster. The joiner refuses, as it fails there."""
    if not (peers and lab.service(service).os_bound):
        return
    other = sorted({lab.os_major(p) for p in peers} - {lab.os_major(node)})
    if other:
        raise StartError(
            f"galera cannot form a cluster: members on OS {lab.os_major(node)} and OS "
            f"{', '.join(map(str, other))} cannot talk to each other "
            f"(running: {', '.join(peers)})"
        )


def _prepare_datadir(root: Path, want_format: str, joining: bool) -> None:
    """Make the datadir one this server opens: a joiner's is replaced (the state transfer
    replaces whatever it held anyway); a newer major's is refused (no downgrade in place)."""
    from stepwise.lab import mariadb

    have = mariadb.data_format(root)
    if have == want_format:
        return
    if joining:
        mariadb.init_datadir(root, want_format)
    elif have is not None and _major(have) > _major(want_format):
        raise StartError(
            f"mariadbd {want_format}: "
            f"datadir was written by MariaDB {have}, a newer major: "
            "a downgrade in place is not supported; restore a dump taken before the upgrade"
        )
    # an older major's datadir opens (as MariaDB's in-place upgrade does); mariadb-upgrade
    # then brings its system tables, and the format marker, to this server's major


def _configure_member(
    lab: Lab, node: str, service: str, bootstrap: bool, asked: bool = False
) -> list[str]:
    """Write the member's my.cnf and return its mariadbd command: at the position recovered
    from InnoDB after a crash, with a new cluster when it bootstraps. Asked to bootstrap
    (`galera_new_cluster`), MariaDB judges the datadir itself (it refuses one not marked safe
    to bootstrap from); the lab's own bootstraps (a lone member, the first back from a
    crash) mark it safe as the resource agent does for the member it chooses."""
    from stepwise.lab import mariadb

    root = lab.node_root(node)
    mariadb.write_cnf(
        root,
        lab.node(node).address,
        lab.service(service).db_port,
        galera=member_cnf(lab, node, service),
    )
    cmd = mariadb.server_command(root)
    if grastate(root).get("seqno") == "-1":
        pos = recover_position(cmd)
        if pos:
            cmd.append(f"--wsrep_start_position={pos}")
    if bootstrap:
        if not asked:
            allow_bootstrap(root)
        cmd.append("--wsrep-new-cluster")
    return cmd


def _in_group(child: subprocess.Popen, log: Path, offset: int, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while child.poll() is None and time.monotonic() < deadline:
        try:
            with open(log, "rb") as fh:
                fh.seek(offset)
                if b"WSREP: gcomm: connected" in fh.read():
                    return
        except FileNotFoundError:
            pass
        time.sleep(0.1)


def _wait(child: subprocess.Popen, root: Path, timeout: float) -> tuple[bool, str]:
    deadline = time.monotonic() + timeout
    why = "starting"
    while child.poll() is None and time.monotonic() < deadline:
        ok, why = clustercheck(root)
        if ok:
            return True, why
        time.sleep(0.2)
    return False, why


# --- what `lab status` says ----------------------------------------------------------------
@functools.lru_cache(maxsize=1)
def versions() -> str:
    """'MariaDB 10.11.x + galera-4 26.4.x' as installed on this machine."""
    out = []
    for cmd, pat, label in (
        (["mariadbd", "--version"], r"Ver (\d+\.\d+\.\d+)", "MariaDB"),
        (["dpkg-query", "-W", "-f=${Version}", "galera-4"], r"(\d+\.\d+\.\d+)", "galera-4"),
    ):
        try:
            m = re.search(
                pat, subprocess.run(cmd, capture_output=True, text=True, timeout=10).stdout
            )
        except (OSError, subprocess.SubprocessError):
            m = None
        out.append(f"{label} {m.group(1) if m else '?'}")
    return " + ".join(out)


def quorum(lab: Lab, service: str) -> tuple[bool, str]:
    """Whether the cluster has a primary component, as its running members report it."""

    seen = []
    for n in lab.service(service).instances:
        if not read_unit(lab, n, service):
            continue
        try:
            st = local_status(lab.node_root(n), timeout=0.5)
        except Exception:  # noqa: BLE001 - starting, joining (no SQL yet) or gone
            continue
        seen.append(n)
        if st.get("wsrep_cluster_status") == "Primary":
            return (
                True,
                f"primary component of {st.get('wsrep_cluster_size')} member(s) ({n}: "
                f"{st.get('wsrep_local_state_comment')})",
            )
    return False, "no primary component" + (
        f" (non-primary: {', '.join(seen)})" if seen else ": no member running"
    )


def galera_status(lab: Lab) -> dict[str, Any]:
    """The database service as it really is: a Galera cluster (real MariaDB + galera-4),
    its size and status, and each member's state (for `lab status`)."""

    service = lab.spec.db_service
    if not service:
        return {}
    members: dict[str, dict[str, str]] = {}
    for n in lab.service(service).instances:
        st: dict[str, str] = {}
        if read_unit(lab, n, service):
            try:
                st = local_status(lab.node_root(n), timeout=0.5)
            except Exception:  # noqa: BLE001
                st = {}
        members[n] = {
            "state": st.get("wsrep_local_state_comment", "down" if not st else "?"),
            "cluster_status": st.get("wsrep_cluster_status", "-"),
            "cluster_size": st.get("wsrep_cluster_size", "0"),
        }
    primary = [m for m in members.values() if m["cluster_status"] == "Primary"]
    return {
        "service": service,
        "real": True,
        "software": versions(),
        "sst_method": SST_METHOD,
        "status": "Primary" if primary else "non-Primary",
        "cluster_size": max((int(m["cluster_size"]) for m in primary), default=0),
        "members": members,
    }
