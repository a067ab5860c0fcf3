"""The operator's commands: refusals before anything runs, then a real run, status, history,
export, discover (local hosts, no lab)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from stepwise.cli.main import _register

_register()
from conftest import trace_lines, write_cloud

from stepwise.cli.main import app
from stepwise.run.store import open_store

runner = CliRunner()


def _store(root: Path):
    return open_store(f"sqlite:///{root / '.stepwise' / 'testcloud.sqlite'}")


def _nothing_ran(root: Path) -> bool:
    return not any((root / "trace").iterdir()) and (
        not (root / ".stepwise" / "testcloud.sqlite").exists() or not _store(root).runs("testcloud")
    )


@pytest.mark.parametrize(
    "args, exit_code, message",
    [
        (["update", "run", "--limit", "cmp-9"], 2, "matches no node or role"),
        (["update", "run", "--tags", "pakages"], 2, "did you mean packages"),
        (["update", "run", "--skip-tags", "nope"], 2, "matches no unit"),
        (["update", "run", "-e", "novalue"], 2, "not key=value"),
        (["upgrade", "run", "--tags", "system_upgrade_run"], 2, "without --limit"),
        (
            ["upgrade", "run", "--tags", "system_upgrade_run", "--limit", "Compute", "--yes"],
            3,
            "covers the whole role",
        ),
        (["upgrade", "prepare", "-e", "target_release=R2"], 2, "confirmation"),
        (["upgrade", "prepare"], 2, "target_release"),
    ],
)
def test_refused_before_anything_runs(tmp_path: Path, args, exit_code, message):
    dep = write_cloud(tmp_path, computes=3)
    r = runner.invoke(app, args + ["-d", str(dep)])
    assert r.exit_code == exit_code, r.output
    assert message in r.output.replace("\n", " ")
    assert "Traceback" not in r.output
    assert _nothing_ran(tmp_path)


def test_update_run_status_history_export(tmp_path: Path):
    dep = write_cloud(tmp_path)
    r = runner.invoke(
        app, ["update", "run", "-d", str(dep), "--json", "--limit", "Controller", "--no-prestage"]
    )
    assert r.exit_code == 0, r.output
    res = json.loads(r.output)
    assert res["status"] == "done" and res["units"]["failed"] == []
    assert trace_lines(tmp_path, "ctl-0") and not trace_lines(tmp_path, "cmp-0")
    r = runner.invoke(app, ["status", "-d", str(dep), "--json"])
    st = json.loads(r.output)
    assert (
        st["run"]["status"] == "done"
        and st["nodes"]["ctl-0"]["services"]["api"]["state"] == "running"
    )
    r = runner.invoke(app, ["history", "-d", str(dep), "--json", "--run", str(res["run_id"])])
    h = json.loads(r.output)
    assert all(u["state"] == "done" for u in h["units"])
    r = runner.invoke(app, ["status", "-d", str(dep)])
    assert r.exit_code == 0 and "ctl-0" in r.output
    out = tmp_path / "export"
    r = runner.invoke(app, ["export", "upgrade", "-d", str(dep), "-o", str(out)])
    assert r.exit_code == 0, r.output
    assert (
        (out / "site.yml").exists()
        and (out / "inventory.yml").exists()
        and list((out / "units").iterdir())
    )


def test_discover_stores_facts_and_writes_a_facts_file(tmp_path: Path):
    dep = write_cloud(tmp_path, computes=1)
    script = tmp_path / "facts.sh"
    script.write_text(
        '#!/bin/sh\nfor p in "$@"; do :; done\n'
        'echo \'{"packages": {"openstack-api": {"installed": "1.0", "available": "1.1"},'
        ' "openstack-worker": {"installed": "1.0", "available": "1.0"}}, "os": {"major": 8}}\'\n'
    )
    script.chmod(0o755)
    out = tmp_path / "facts.yaml"
    r = runner.invoke(
        app,
        ["discover", "-d", str(dep), "-e", f"stepwise_discover_command={script}", "-o", str(out)],
    )
    assert r.exit_code == 0, r.output
    from stepwise.model import load_deployment, load_facts

    d = load_deployment(dep)
    facts = load_facts(out, d)
    assert facts.changes("ctl-0", ("openstack-api",)) and not facts.changes(
        "cmp-0", ("openstack-worker",)
    )
    assert _store(tmp_path).facts("testcloud")["nodes"]["ctl-0"]["os"] == {"major": 8}
