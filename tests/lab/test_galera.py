"""The lab's database is a real Galera cluster: replication, quorum, crash and rejoin are
MariaDB's and galera-4's own, and HAProxy's clustercheck sees what a real one reports."""

from __future__ import annotations

import os
import signal

import pymysql
import pytest

from stepwise.lab import galera, haproxy, mariadb
from stepwise.lab.faults import inject
from tests.lab.helpers import wait_for

pytestmark = pytest.mark.lab
DBS = ("db-0", "db-1", "db-2")


@pytest.fixture
def lab(make_lab):
    return make_lab("galera3.yaml")


def addr(lab, node: str) -> tuple[str, int]:
    return lab.node(node).address, lab.service("galera").db_port


def status(lab, node: str) -> dict[str, str]:
    try:
        return galera.local_status(lab.node_root(node))
    except Exception:  # noqa: BLE001 - down or joining
        return {}


def synced(lab, node: str) -> bool:
    st = status(lab, node)
    return (
        st.get("wsrep_cluster_status") == "Primary"
        and st.get("wsrep_local_state_comment") == "Synced"
    )


def rows(lab, node: str) -> list[tuple]:
    """The rows as `node` has them once it has applied every write the cluster committed before
    the read: Galera certifies a write everywhere at its commit but the others apply it after
    (under load a read on another member right after a commit missed it), and the lab keeps
    wsrep_sync_wait at 0 as MariaDB ships it; a causal read (1) is Galera's own answer."""
    conn = mariadb.connect(*addr(lab, node), timeout=10.0)
    try:
        with conn.cursor() as cur:
            cur.execute("SET SESSION wsrep_sync_wait = 1")
            cur.execute("SELECT k, v FROM data")
            return sorted(cur.fetchall())
    finally:
        conn.close()


def write(lab, node: str, k: str) -> None:
    mariadb.execute(*addr(lab, node), "REPLACE INTO data VALUES (%s, %s)", (k, f"via {node}"))


def write_soon(lab, node: str, k: str) -> None:
    """Right after a member dies, commits wait until the others declare it gone (Galera's
    evs.suspect_timeout, 5 s): retry the (idempotent) write until it goes through."""

    def attempt() -> bool:
        try:
            write(lab, node, k)
            return True
        except Exception:  # noqa: BLE001
            return False

    wait_for(attempt, timeout=30)


def haproxy_state(lab, node: str) -> str:
    """HAProxy's view of a database backend (UP, DOWN, ...): its clustercheck verdict."""
    for line in haproxy.command(lab, "show stat").splitlines():
        f = line.split(",")
        if f[:2] == ["galera", node]:
            return f[17]
    raise KeyError(node)


def test_rows_replicate_and_a_killed_member_rejoins_by_ist(lab):
    st = galera.galera_status(lab)
    assert st["real"] and st["status"] == "Primary" and st["cluster_size"] == 3, st
    assert "galera-4" in st["software"] and "MariaDB 10.11" in st["software"]
    assert all(status(lab, n)["wsrep_provider_name"] == "Galera" for n in DBS)

    # One write through one member; Galera puts it on the others (nothing else copies it).
    write(lab, "db-0", "one")
    for n in ("db-1", "db-2"):
        wait_for(lambda n=n: ("one", "via db-0") in rows(lab, n), timeout=5)

    # kill -9 of one member's mariadbd: the other two stay a primary component and take writes.
    inject(lab, "crash", "db-2")
    wait_for(lambda: status(lab, "db-0").get("wsrep_cluster_size") == "2", timeout=20)
    assert synced(lab, "db-0") and synced(lab, "db-1")
    for i in range(5):
        write(lab, "db-1", f"while-away-{i}")
    assert haproxy_state(lab, "db-0") == "UP"
    # It comes back with the position it crashed at (recovered from InnoDB) and gets the
    # writes it missed by IST from a donor's gcache, not a full copy.
    inject(lab, "recover", "db-2")
    wait_for(lambda: synced(lab, "db-2"), timeout=60)
    assert rows(lab, "db-2") == rows(lab, "db-0") and len(rows(lab, "db-2")) == 6
    log = (lab.node_root("db-2") / "var/log/mariadb/mariadb.log").read_text()
    assert "IST received" in log.split("Recovered position", 1)[-1], log[-3000:]
    assert galera.clustercheck(lab.node_root("db-2"))[0]

    # mariadbd alone killed (not its node): the supervisor restarts the unit, it rejoins.
    pid = int((lab.node_root("db-1") / "run/mysqld/mysqld.pid").read_text())
    os.kill(pid, signal.SIGKILL)
    write_soon(lab, "db-0", "after-kill")
    wait_for(
        lambda: (
            synced(lab, "db-1")
            and int((lab.node_root("db-1") / "run/mysqld/mysqld.pid").read_text()) != pid
        ),
        timeout=60,
    )
    assert ("after-kill", "via db-0") in rows(lab, "db-1")
    assert galera.galera_status(lab)["cluster_size"] == 3


def test_two_of_three_crash_the_survivor_goes_non_primary_until_they_return(lab):
    write(lab, "db-0", "before")
    inject(lab, "crash", "db-1")
    inject(lab, "crash", "db-2")
    # Galera's quorum: 1 of 3 is no majority; the survivor refuses service, clustercheck fails
    # it and HAProxy takes it out, so the database VIP serves nothing.
    wait_for(lambda: status(lab, "db-0").get("wsrep_cluster_status") == "non-Primary", timeout=20)
    ok, why = galera.clustercheck(lab.node_root("db-0"))
    assert not ok and "non-Primary" in why
    wait_for(lambda: haproxy_state(lab, "db-0") == "DOWN", timeout=5)
    vip = lab.spec.vips["galera"]
    # HAProxy drops the connection (lost during the handshake); the survivor answers
    # ER_UNKNOWN_COM_ERROR (1047, "WSREP has not yet prepared node"): both OperationalError
    with pytest.raises(pymysql.err.OperationalError):
        mariadb.execute(vip.address, vip.port, "SELECT k FROM data")
    with pytest.raises(pymysql.err.OperationalError):
        write(lab, "db-0", "refused")
    assert galera.galera_status(lab)["status"] == "non-Primary"

    # Recovery is Galera's own (pc.recovery): once every member of the last primary component
    # is back, it re-forms; nobody bootstraps by hand.
    inject(lab, "recover", "db-1")
    assert not synced(lab, "db-0")  # 2 of the 3 last members: still waiting for the third
    inject(lab, "recover", "db-2")
    for n in DBS:
        wait_for(lambda n=n: synced(lab, n), timeout=60)
    wait_for(lambda: haproxy_state(lab, "db-0") == "UP", timeout=5)
    assert mariadb.execute(vip.address, vip.port, "SELECT k FROM data") == [("before",)]
    write(lab, "db-2", "after")
    assert [k for k, _ in rows(lab, "db-0")] == ["after", "before"]


def test_a_cluster_stopped_whole_forms_again_only_by_galera_new_cluster(lab, node):
    """What the OS upgrade's form_cluster relies on: a member finding no other running forms
    no cluster by itself; `galera_new_cluster` bootstraps one, and MariaDB itself refuses it
    from a member that was not the last to leave until its grastate.dat is marked safe."""
    write(lab, "db-0", "kept")
    for n in DBS:  # db-2 stops last: only its datadir is safe to bootstrap from
        assert lab.call("stop", node=n, unit="galera")["ok"]
    assert galera.grastate(lab.node_root("db-2"))["safe_to_bootstrap"] == "1"
    assert galera.grastate(lab.node_root("db-0"))["safe_to_bootstrap"] == "0"

    r = node("db-0").run("systemctl start galera", check=False)
    assert r.returncode != 0 and "forms no cluster by itself" in r.stdout + r.stderr, r
    r = node("db-0").run("galera_new_cluster", check=False)
    assert r.returncode == 1, r
    log = mariadb.error_log(lab.node_root("db-0")).read_text()
    assert "may not be safe to bootstrap the cluster from this node" in log

    node("db-2").run("galera_new_cluster")
    wait_for(lambda: synced(lab, "db-2"), timeout=60)
    for n in ("db-0", "db-1"):  # the others join it by their start, one state transfer at a time
        node(n).run("systemctl start galera")
        wait_for(lambda n=n: synced(lab, n), timeout=180)
    assert all(("kept", "via db-0") in rows(lab, n) for n in DBS)
    # a new cluster beside running members would split it: refused
    assert lab.call("stop", node="db-1", unit="galera")["ok"]
    r = node("db-1").run("galera_new_cluster", check=False)
    assert r.returncode == 1 and "split the cluster" in r.stdout + r.stderr, r
