"""The schemas a project's sync made, kept per release and loaded by the next lab up instead of
running the tool again (stepwise/lab/openstack/schema_cache.py), on the lab's real MariaDB."""

from __future__ import annotations

from pathlib import Path

import pytest

from stepwise.lab import mariadb
from stepwise.lab.openstack import schema_cache

pytestmark = pytest.mark.lab


@pytest.fixture
def lab(make_lab, tmp_path: Path, monkeypatch):
    lab = make_lab("tiny.yaml")
    # the entry of a release venv: here a directory of the test's own
    monkeypatch.setattr(schema_cache, "entry", lambda *_a: tmp_path / "kept")
    return lab


def _sql(lab, sql: str) -> list[tuple]:
    vip = lab.spec.vips[lab.spec.db_service]
    return mariadb.execute(vip.address, vip.port, sql)


def _fresh(lab, db: str) -> None:
    _sql(lab, f"DROP DATABASE IF EXISTS {db}")
    _sql(lab, f"CREATE DATABASE {db}")


def _tool(lab, db: str, calls: list[str]):
    """A project's sync: a schema, its version table and a row the sync itself writes."""

    def sync() -> None:
        calls.append(db)
        _sql(lab, f"CREATE TABLE {db}.things (id INT PRIMARY KEY, name VARCHAR(40))")
        _sql(lab, f"CREATE TABLE {db}.alembic_version (version_num VARCHAR(32) PRIMARY KEY)")
        _sql(lab, f"INSERT INTO {db}.alembic_version VALUES ('head-1')")

    return sync


def test_the_first_lab_up_runs_the_tool_and_keeps_its_schema_the_next_loads_it(lab, tmp_path: Path):
    calls: list[str] = []
    _fresh(lab, "one")
    _fresh(lab, "two")

    def both() -> None:
        _tool(lab, "one", calls)()
        _tool(lab, "two", calls)()

    assert not schema_cache.synced(lab, "ctl-0", "keystone", ("one", "two"), both)
    assert calls == ["one", "two"]
    kept = sorted(p.name for p in (tmp_path / "kept").iterdir())
    assert kept == ["one.sql", "two.sql"]  # nothing half-written left beside them

    # a new lab's empty databases: loaded from what was kept, the tool not run
    _fresh(lab, "one")
    _fresh(lab, "two")
    assert schema_cache.synced(lab, "ctl-0", "keystone", ("one", "two"), lambda: calls.append("x"))
    assert calls == ["one", "two"]
    for db in ("one", "two"):
        assert _sql(lab, f"SELECT version_num FROM {db}.alembic_version") == [("head-1",)]
        assert _sql(lab, f"SHOW TABLES FROM {db}") == [("alembic_version",), ("things",)]


def test_a_dump_that_does_not_load_is_dropped_and_the_tool_runs(lab, tmp_path: Path):
    calls: list[str] = []
    _fresh(lab, "one")
    schema_cache.synced(lab, "ctl-0", "keystone", ("one",), _tool(lab, "one", calls))
    dump = tmp_path / "kept" / "one.sql"
    dump.write_text("CREATE TABLE half (\n")  # cut short
    _fresh(lab, "one")
    assert not schema_cache.synced(lab, "ctl-0", "keystone", ("one",), _tool(lab, "one", calls))
    assert calls == ["one", "one"]
    assert "alembic_version" in dump.read_text()  # kept again, whole


def test_switched_off_every_lab_up_runs_the_tool(lab, tmp_path: Path, monkeypatch):
    monkeypatch.setenv(schema_cache.SWITCH, "0")
    calls: list[str] = []
    _fresh(lab, "one")
    assert not schema_cache.synced(lab, "ctl-0", "keystone", ("one",), _tool(lab, "one", calls))
    assert not (tmp_path / "kept").exists()
