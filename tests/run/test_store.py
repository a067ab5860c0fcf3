"""The state store on SQLite and on a real PostgreSQL server; its Alembic schema; the lock."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
from pathlib import Path

import pytest
from sqlalchemy import inspect

from stepwise.model.vocab import MarkerState, RunState, Step, TaskStatus, UnitState
from stepwise.run.lock import LockedError, RunLock, read_holder
from stepwise.run.store.models import Base
from stepwise.run.store.store import RunOrigin, open_store

PG_BIN = Path("/usr/lib/postgresql/15/bin")


def _exercise(url: str) -> None:
    st = open_store(url)
    rid = st.create_run(
        "c",
        "update",
        "k",
        RunOrigin("stepwise update run"),
        {"limit": None},
        {"units": []},
        [{"id": "u1", "step": "stop", "nodes": ["n1"]}, {"id": "u2", "step": "start"}],
    )
    st.set_unit(rid, "u1", "running", started=True, count_attempt=True)
    st.set_unit(rid, "u1", "done", ended=True)
    assert st.unit_states(rid) == {"u1": "done", "u2": "pending"}
    # read back as the vocabulary's members (the database keeps the strings)
    assert [type(s) for s in st.unit_states(rid).values()] == [UnitState, UnitState]
    assert st.units(rid)[0].step is Step.STOP
    from stepwise.run.store.store import now

    st.add_task_results(
        [
            {
                "run_id": rid,
                "unit_id": "u1",
                "host": "n1",
                "task": "t",
                "status": "ok",
                "duration_s": 0.1,
                "message": "",
                "at": now(),
            }
        ]
    )
    assert st.task_counts(rid) == {"ok": 1}
    assert st.task_results(rid)[0].status is TaskStatus.OK
    assert st.resumable("c", "k").id == rid
    st.finish_run(rid, "done")
    assert st.resumable("c", "k") is None
    assert st.run(rid).status is RunState.DONE
    facts = {
        "nodes": {
            "n1": {
                "os": {"major": 8, "target": 9},
                "packages": {"p": {"installed": "1", "available": "2"}},
            }
        }
    }
    st.save_facts("c", facts)
    assert st.facts("c") == facts
    # a container node's images are kept too (the plan from the store knows what changes)
    image = {"running": "sha256:" + "1" * 64, "target": "sha256:" + "2" * 64, "ref": "r/ns/i:t"}
    with_images = {"nodes": {"n1": {**facts["nodes"]["n1"], "images": {"svc": image}}}}
    st.save_facts("c", with_images)
    assert st.facts("c") == with_images
    st.save_facts("c", facts)  # discover again: what it saw replaces what was known
    assert st.facts("c") == facts
    st.mark_installed("c", "n1", ["p"])
    assert st.installed_version("c", "n1", "p") == "2"
    st.set_services("c", [("n1", "svc")], version="2", state="running", run_id=rid)
    assert [(r.node, r.version, r.state) for r in st.node_services("c")] == [("n1", "2", "running")]
    # what a probe measured is kept with the run (per target per second)
    assert (
        st.add_probe_samples(
            rid, [{"target": "vip:api", "t": 1.0e9, "requests": 5, "failed": 1, "max_ms": 2.5}]
        )
        == 1
    )
    assert st.probe_samples(rid) == [
        {"target": "vip:api", "t": 1.0e9, "requests": 5, "failed": 1, "max_ms": 2.5}
    ]
    st.set_marker("c", "xfer@n1", rid, "u1", "done")
    assert st.marker("c", "xfer@n1").state is MarkerState.DONE
    st.close()
    # reopening runs the migrations again: a no-op
    assert open_store(url).runs("c")[0].id == rid


def test_sqlite_store(tmp_path: Path):
    _exercise(f"sqlite:///{tmp_path / 'sub' / 's.sqlite'}")


def test_models_match_the_alembic_schema(tmp_path: Path):
    st = open_store(f"sqlite:///{tmp_path / 's.sqlite'}")
    insp = inspect(st.engine)
    for table in Base.metadata.sorted_tables:
        cols = {c["name"] for c in insp.get_columns(table.name)}
        assert cols == {c.name for c in table.columns}, table.name


def test_a_store_of_the_previous_schema_is_migrated_and_keeps_its_runs(tmp_path: Path):
    """A store written before probe samples were kept (revision 0002) opens: it gains the
    table and keeps its runs."""
    from alembic import command
    from sqlalchemy import create_engine

    from stepwise.run.store import schema

    url = f"sqlite:///{tmp_path / 'old.sqlite'}"
    engine = create_engine(url)
    with engine.begin() as conn:
        cfg = schema._config()
        cfg.attributes["connection"] = conn
        command.upgrade(cfg, "0002")
    engine.dispose()
    assert "probe_samples" not in inspect(create_engine(url)).get_table_names()
    st = open_store(url)
    rid = st.create_run("c", "update", "k", RunOrigin("stepwise update run"), {}, {"units": []}, [])
    st.add_probe_samples(rid, [{"target": "workload:vm", "t": 2.0, "requests": 1, "failed": 0}])
    st.discard_run(rid)  # a discarded run leaves no sample behind
    assert st.probe_samples(rid) == [] and st.run(rid) is None


def test_bad_store_url_is_a_clear_error(tmp_path: Path):
    from stepwise.errors import StepwiseError

    with pytest.raises(StepwiseError, match="store"):
        open_store("nosuchdb://x")
    with pytest.raises(StepwiseError, match="cannot open the state store"):
        open_store("postgresql+psycopg://u:secret@127.0.0.1:1/db")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def pg_url(tmp_path_factory):
    """A real PostgreSQL: $STEPWISE_TEST_PG_URL (CI), else one started here from the Debian
    binaries. In CI a missing server is a failure, not a skip."""
    url = os.environ.get("STEPWISE_TEST_PG_URL")
    if url:
        yield url
        return
    if not (PG_BIN / "initdb").exists():
        if os.environ.get("CI"):
            pytest.fail(
                "PostgreSQL is needed in CI: set STEPWISE_TEST_PG_URL or install postgresql-15"
            )
        pytest.skip("no PostgreSQL binaries (apt-get install postgresql-15)")
    import tempfile

    # not under pytest's 0700 tmp: the postgres user must reach it
    d = Path(tempfile.mkdtemp(prefix="stepwise-pg-"))
    data = d / "data"
    run_as: list[str] = []
    if os.geteuid() == 0:  # postgres refuses to run as root
        shutil.chown(d, "postgres")
        run_as = ["runuser", "-u", "postgres", "--"]
    subprocess.run(
        run_as + [str(PG_BIN / "initdb"), "-D", str(data), "-A", "trust", "-U", "stepwise"],
        check=True,
        capture_output=True,
    )
    port = _free_port()
    subprocess.run(
        run_as
        + [
            str(PG_BIN / "pg_ctl"),
            "-D",
            str(data),
            "-l",
            str(d / "log"),
            "-w",
            "-o",
            f"-p {port} -k {d} -c listen_addresses=127.0.0.1",
            "start",
        ],
        check=True,
        capture_output=True,
    )
    try:
        yield f"postgresql+psycopg://stepwise@127.0.0.1:{port}/postgres"
    finally:
        subprocess.run(
            run_as + [str(PG_BIN / "pg_ctl"), "-D", str(data), "-m", "immediate", "stop"],
            capture_output=True,
        )
        shutil.rmtree(d, ignore_errors=True)


def test_postgresql_store(pg_url: str):
    import uuid

    from sqlalchemy import create_engine, text

    # a fresh database per test run so the migration runs from scratch
    name = "stepwise_" + uuid.uuid4().hex[:8]
    admin = create_engine(
        pg_url.replace("postgresql://", "postgresql+psycopg://"), isolation_level="AUTOCOMMIT"
    )
    with admin.connect() as c:
        c.execute(text(f"CREATE DATABASE {name}"))
    base = pg_url.rsplit("/", 1)[0]
    try:
        _exercise(f"{base}/{name}")
        # teams on several machines: the database holds the cloud's lock too
        from stepwise.run.lock import DbLock

        st1, st2 = open_store(f"{base}/{name}"), open_store(f"{base}/{name}")
        held = DbLock(st1.engine, "c").acquire(lambda: "first")
        with pytest.raises(LockedError, match="another stepwise run"):
            DbLock(st2.engine, "c").acquire(lambda: "first")
        held.release()
        DbLock(st2.engine, "c").acquire(lambda: "x").release()
        st1.close()
        st2.close()
    finally:
        with admin.connect() as c:
            c.execute(text(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)"))
        admin.dispose()


def test_lock_refuses_a_second_run_and_says_who(tmp_path: Path):
    path = tmp_path / "c.lock"
    with RunLock.acquire(path, "c", "stepwise update run -d d.yaml"):
        assert read_holder(path)["pid"] == os.getpid()
        with pytest.raises(LockedError, match=r"update run -d d.yaml") as exc:
            RunLock.acquire(path, "c")
        assert "pid" in str(exc.value)
    assert read_holder(path) is None


def test_stale_lock_of_a_dead_process_is_taken_over(tmp_path: Path):
    path = tmp_path / "c.lock"
    code = (
        f"import sys, os, signal; sys.path[:0] = {sys_path()!r}; "
        "from stepwise.run.lock import RunLock; "
        f"l = RunLock.acquire({str(path)!r}, 'c', 'killed run'); "
        "os.kill(os.getpid(), signal.SIGKILL)"
    )
    subprocess.run([os.sys.executable, "-c", code])
    lock = RunLock.acquire(path, "c")
    assert lock.stale is not None and lock.stale["command"] == "killed run"
    lock.release()


def sys_path() -> list[str]:
    import sys

    return list(sys.path)
