"""The store: safe schema creation under concurrency, read commands create nothing, a refused
run records nothing, a foreign or newer database is refused untouched. Export: a new
directory (or --force over its own), never through links, atomic."""

from __future__ import annotations

import hashlib
import json
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from tests.security.helpers import EXAMPLES, cli, no_traceback, write_cloud

CLASSIC = EXAMPLES / "classic.yaml"


def _digest(p: Path) -> str:
    return hashlib.sha256(p.read_bytes()).hexdigest()


def test_concurrent_first_opens_of_a_store_all_succeed(tmp_path: Path):
    url = f"sqlite:///{tmp_path / 'new' / 's.sqlite'}"
    code = (
        "import sys; from stepwise.run.store import open_store; "
        "print(len(open_store(sys.argv[1]).runs('c')))"
    )
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", code, url],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(8)
    ]
    outs = [p.communicate(timeout=120) for p in procs]
    assert all(p.returncode == 0 for p in procs), [e for _o, e in outs]
    assert all(o.strip() == "0" for o, _e in outs)


def test_read_commands_never_create_a_store(tmp_path: Path):
    dep = tmp_path / "classic.yaml"
    dep.write_text(CLASSIC.read_text())
    for args in (["status"], ["history"], ["plan", "update"], ["history", "--json"]):
        r = cli(*args, "-d", dep)
        assert r.code == 0, r.text
    assert not (tmp_path / ".stepwise").exists()
    r = cli("history", "-d", dep, "--run", "3")
    assert r.code == 2 and not (tmp_path / ".stepwise").exists()


def test_a_foreign_database_is_refused_untouched(tmp_path: Path):
    f = tmp_path / "foreign.sqlite"
    db = sqlite3.connect(f)
    db.execute("CREATE TABLE accounts (id INTEGER)")
    db.commit()
    db.close()
    before = _digest(f)
    for args in (["status"], ["plan", "update"], ["update", "run", "--lab", tmp_path]):
        r = cli(*args, "-d", CLASSIC, "--store", f"sqlite:///{f}")
        assert r.code == 2 and no_traceback(r.text), r.text
    assert (
        "not a stepwise state store"
        in cli("status", "-d", CLASSIC, "--store", f"sqlite:///{f}").text
    )
    assert _digest(f) == before and sorted(p.name for p in tmp_path.iterdir()) == ["foreign.sqlite"]


def test_a_store_of_a_newer_stepwise_is_refused_untouched(tmp_path: Path):
    from stepwise.run.store import open_store

    f = tmp_path / "s.sqlite"
    open_store(f"sqlite:///{f}").close()
    db = sqlite3.connect(f)
    db.execute("UPDATE stepwise_alembic_version SET version_num = '9999_future'")
    db.commit()
    db.close()
    before = _digest(f)
    r = cli("status", "-d", CLASSIC, "--store", f"sqlite:///{f}")
    assert r.code == 2 and "newer stepwise" in r.text and no_traceback(r.text)
    assert _digest(f) == before


def test_a_damaged_store_is_a_clear_error(tmp_path: Path):
    f = tmp_path / "s.sqlite"
    f.write_bytes(b"\x00garbage" * 600)
    r = cli("status", "-d", CLASSIC, "--store", f"sqlite:///{f}")
    assert r.code == 2 and no_traceback(r.text) and "not a database" in r.text


def test_a_run_refused_while_preparing_leaves_nothing_to_resume(tmp_path: Path, monkeypatch):
    import stepwise.run.engine as engine
    from stepwise.errors import InputError, Problem

    def refuse(*_a, **_k):
        raise InputError(Problem("cannot render"))

    dep = write_cloud(tmp_path, computes=1)
    monkeypatch.setattr(engine, "render_unit", refuse)
    r = cli("update", "run", "-d", dep, "--limit", "Controller", "--json")
    assert r.code == 2 and "cannot render" in r.text
    monkeypatch.undo()
    r = cli("history", "-d", dep, "--json")
    assert r.code == 0 and json.loads(r.out)["runs"] == []


def test_export_writes_a_new_directory_and_replaces_only_its_own(tmp_path: Path):
    out = tmp_path / "out"
    assert cli("export", "upgrade", "-d", CLASSIC, "-o", out).code == 0
    upgrade_plays = {p.name for p in (out / "units").iterdir()}
    r = cli("export", "update", "-d", CLASSIC, "-o", out)
    assert r.code == 2 and "exists" in r.text
    assert cli("export", "update", "-d", CLASSIC, "-o", out, "--force").code == 0
    update_plays = {p.name for p in (out / "units").iterdir()}
    assert len(update_plays) != len(upgrade_plays) or update_plays != upgrade_plays
    assert not any(".old." in p.name or p.name.startswith(".out.") for p in tmp_path.iterdir())
    other = tmp_path / "mine"
    other.mkdir()
    (other / "notes.txt").write_text("keep")
    r = cli("export", "update", "-d", CLASSIC, "-o", other, "--force")
    assert r.code == 2 and (other / "notes.txt").read_text() == "keep"


def test_export_never_writes_through_links(tmp_path: Path):
    outside = tmp_path / "outside"
    outside.mkdir()
    link = tmp_path / "link"
    link.symlink_to(outside)
    for extra in ([], ["--force"]):
        r = cli("export", "update", "-d", CLASSIC, "-o", link, *extra)
        assert r.code == 2 and "link" in r.text
    assert not any(outside.iterdir())


def test_a_failed_export_leaves_nothing_half_written(tmp_path: Path, monkeypatch):
    import stepwise.run.export as export

    calls = {"n": 0}
    real = export.to_yaml

    def failing(data):
        calls["n"] += 1
        if calls["n"] == 5:
            raise OSError(28, "No space left on device")
        return real(data)

    monkeypatch.setattr(export, "to_yaml", failing)
    out = tmp_path / "out"
    r = cli("export", "update", "-d", CLASSIC, "-o", out)
    assert r.code == 2 and "No space left" in r.text and no_traceback(r.text)
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("target", ["file", "/dev/full/x", "/proc/x"])
def test_export_to_an_unusable_place_is_an_input_error(tmp_path: Path, target: str):
    if target == "file":
        (tmp_path / "file").write_text("")
        target = str(tmp_path / "file")
    r = cli("export", "update", "-d", CLASSIC, "-o", target)
    assert r.code == 2 and no_traceback(r.text), r.text
