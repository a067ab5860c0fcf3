"""Issue #34, readers that took a shape for granted: stored facts, `lab.json`, importers'
lists, `--count`, `--start`; and the environment and standard output: each is a clear error
(exit 2 naming the file and field, or a short message on a full stdout), never exit 70."""

from __future__ import annotations

import json
import os
import shutil
import sqlite3
import subprocess
from pathlib import Path

import pytest

from tests.security.helpers import STEPWISE, cli, no_traceback, write_cloud


def _refused(r, *words: str) -> None:
    assert r.code == 2 and no_traceback(r.text), r.text[-2000:]
    for w in words:
        assert w in r.err, (w, r.err)


# -- stored facts: a rollback reads what the run recorded -------------------------------------


@pytest.fixture(scope="module")
def updated(tmp_path_factory) -> Path:
    """A cloud whose store holds a finished update run with the facts it was planned from."""
    from stepwise.model import load_deployment
    from stepwise.model.facts import facts_from_dict, facts_to_dict
    from stepwise.model.vocab import RunState, UnitState, Workflow
    from stepwise.plan import selection_for
    from stepwise.run.resume import run_key
    from stepwise.run.store.store import RunOrigin, open_store
    from stepwise.verify import plan_verified

    root = tmp_path_factory.mktemp("updated")
    dep = load_deployment(write_cloud(root, computes=1))

    def facts(version: str) -> dict:
        return {
            "nodes": {
                n.name: {
                    "packages": {
                        p: {"installed": version, "available": "1.1"}
                        for s in dep.role_of(n).services
                        for p in dep.catalog[s].packages
                    }
                }
                for n in dep.nodes
            }
        }

    st = open_store(f"sqlite:///{root / '.stepwise' / 'testcloud.sqlite'}")
    before = facts_from_dict(facts("1.0"), dep)
    sel = selection_for(Workflow.UPDATE)
    plan = plan_verified(Workflow.UPDATE, dep, before, sel)
    rid = st.create_run(
        dep.name,
        "update",
        run_key(Workflow.UPDATE, sel),
        RunOrigin("stepwise update run"),
        dict(plan.params),
        plan.to_json(),
        [u.to_json() for u in plan.units],
        facts=facts_to_dict(before),
    )
    st.set_units(rid, [u.id for u in plan.units], UnitState.DONE)
    st.finish_run(rid, RunState.DONE)
    st.save_facts(dep.name, facts("1.1"))
    st.close()
    return root


PKG = '$.nodes."ctl-0".packages."openstack-api"'
RECORDED = {
    "nodes a list": "json_set(facts, '$.nodes', json('[1]'))",
    "nodes a string": "json_set(facts, '$.nodes', 'x')",
    "node a list": "json_set(facts, '$.nodes.\"ctl-0\"', json('[1]'))",
    "packages a string": "json_set(facts, '$.nodes.\"ctl-0\".packages', 'x')",
    "package a list": f"json_set(facts, '{PKG}', json('[1]'))",
    "package a string": f"json_set(facts, '{PKG}', 'x')",
}


@pytest.mark.parametrize("case", list(RECORDED))
def test_recorded_facts_of_the_wrong_shape_are_refused_by_a_rollback(
    updated: Path, tmp_path: Path, case: str
):
    root = tmp_path / "c"
    shutil.copytree(updated, root)
    dep = root / "deployment.yaml"
    dep.write_text(dep.read_text().replace(str(updated), str(root)))
    assert cli("plan", "rollback", "--run", "1", "-d", dep).code == 0
    db = sqlite3.connect(root / ".stepwise" / "testcloud.sqlite")
    db.execute(f"UPDATE runs SET facts = {RECORDED[case]}")
    db.commit()
    db.close()
    r = cli("plan", "rollback", "--run", "1", "-d", dep)
    _refused(r, "the facts run 1 recorded in the store", "nodes", "changed outside stepwise")


# -- lab.json: a directory given on the command line ------------------------------------------


@pytest.mark.parametrize("text", ["[1, 2]\n", "not json\n", '{"nodes": [1]}\n'])
def test_a_lab_json_of_the_wrong_shape_is_refused(tmp_path: Path, text: str):
    dep = write_cloud(tmp_path / "c", computes=1)
    lab = tmp_path / "lab"
    lab.mkdir()
    (lab / "lab.json").write_text(text)
    for args in (
        ["preflight", "update", "-d", dep, "--lab", lab],
        ["export", "update", "-d", dep, "--lab", lab, "-o", tmp_path / "out"],
        ["lab", "status", "--dir", lab],
    ):
        _refused(cli(*args), str(lab / "lab.json"))
    assert not (tmp_path / "out").exists()


# -- importers: lists of service names, --count ------------------------------------------------

INVENTORY = """all:
  children:
    ctl:
      hosts:
        c1: {{}}
      vars:
        stepwise_services: {services}
"""


@pytest.mark.parametrize("services", ["[{a: 1}]", "[keystone, [a]]"])
def test_an_inventory_services_item_not_a_name_is_refused(tmp_path: Path, services: str):
    inv = tmp_path / "inv.yaml"
    inv.write_text(INVENTORY.format(services=services))
    r = cli("import", "inventory", inv, "-o", tmp_path / "d.yaml")
    _refused(r, f"{inv}:3", "ctl.vars.stepwise_services[", "must be a string")
    assert not (tmp_path / "d.yaml").exists()


@pytest.mark.parametrize("item", ["[a, b]", "{a: 1}"])
def test_a_tripleo_services_item_not_a_name_is_refused(tmp_path: Path, item: str):
    roles = tmp_path / "roles_data.yaml"
    roles.write_text(
        "- name: Controller\n  CountDefault: 1\n  ServicesDefault:\n"
        f"    - OS::TripleO::Services::Keystone\n    - {item}\n"
    )
    r = cli("import", "tripleo", "-r", roles, "-o", tmp_path / "d.yaml")
    _refused(r, f"{roles}:5", "Controller.ServicesDefault[1]", "must be a string")
    assert not (tmp_path / "d.yaml").exists()


@pytest.mark.parametrize("count", ["Controller=²", "Controller=٣", "Controller=1000000000"])
def test_a_count_that_is_no_ascii_number_of_nodes_is_refused(tmp_path: Path, count: str):
    roles = tmp_path / "roles_data.yaml"
    roles.write_text(
        "- name: Controller\n  CountDefault: 1\n  ServicesDefault:\n"
        "    - OS::TripleO::Services::Keystone\n"
    )
    r = cli("import", "tripleo", "-r", roles, "--count", count, "-o", tmp_path / "d.yaml")
    _refused(r, "--count", "not a number of nodes")


# -- --start: a time the report can add a plan's length to ------------------------------------


@pytest.mark.parametrize("start", ["9999-12-31T23:59:59", "0001-01-01T00:00+01:00"])
def test_a_start_out_of_range_is_refused_as_json_too(tmp_path: Path, start: str):
    dep = write_cloud(tmp_path / "c", computes=1)
    html = tmp_path / "p.html"
    for args in (
        ["plan", "update", "-d", dep, "--html", "-", "--start", start],
        ["report", "-d", dep, "--plan", "update", "-o", html, "--start", start],
    ):
        _refused(cli(*args), "--start", "between 1970-01-01 and 3000-01-01")
    for args in (
        ["plan", "update", "-d", dep, "--html", html, "--json", "--start", start],
        ["report", "-d", dep, "--plan", "update", "-o", html, "--json", "--start", start],
    ):
        r = cli(*args)
        assert r.code == 2 and no_traceback(r.text), r.text
        assert json.loads(r.out)["error"]["problems"][0]["field"] == "--start"
    assert not html.exists()


# -- standard output and the environment --------------------------------------------------------


def _process(*args, stdout, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    """`stepwise ARGS` as its own process with `stdout` as its standard output."""
    return subprocess.run(
        [str(STEPWISE), *map(str, args)],
        stdout=stdout,
        stderr=subprocess.PIPE,
        text=True,
        timeout=120,
        # the terminal size only as the test gives it: another test of the worker may have
        # left $COLUMNS in this process's environment (click's runner sets it)
        env={
            **{k: v for k, v in os.environ.items() if k not in ("COLUMNS", "LINES")},
            **(env or {}),
        },
    )


@pytest.mark.parametrize("out", [["--html", "-"], ["--json"], []])
def test_a_full_or_closed_stdout_is_a_clean_error(tmp_path: Path, out: list[str]):
    dep = write_cloud(tmp_path / "c", computes=1)
    with open("/dev/full", "w") as full:
        r = _process("plan", "update", "-d", dep, *out, stdout=full)
    assert r.returncode == 74 and no_traceback(r.stderr), r.stderr
    assert "No space left on device" in r.stderr and len(r.stderr.splitlines()) == 1, r.stderr
    if out:  # rich drops what it prints to a closed stdout: the text view exits 0
        r = _process("plan", "update", "-d", dep, *out, stdout=subprocess.DEVNULL)
        assert r.returncode == 0, r.stderr
        closed = subprocess.run(
            ["sh", "-c", '"$0" "$@" >&-', str(STEPWISE), "plan", "update", "-d", dep, *out],
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert closed.returncode == 74 and no_traceback(closed.stderr), closed.stderr
        assert "standard output: it is closed" in closed.stderr


def test_the_report_prints_to_stdout_with_o_dash(tmp_path: Path, monkeypatch):
    dep = write_cloud(tmp_path / "c", computes=1)
    monkeypatch.chdir(tmp_path)
    r = cli("report", "-d", dep, "--plan", "update", "-o", "-")
    assert r.code == 0 and r.out.startswith("<!DOCTYPE html>"), r.text
    assert r.out.rstrip().endswith("</html>"), r.out[-200:]
    assert not (tmp_path / "-").exists()
    r = cli("report", "-d", dep, "--plan", "update", "-o", "-", "--json")
    _refused(r, "both print to standard output")
    assert json.loads(r.out)["error"]["problems"][0]["field"] == "--output"
    assert not (tmp_path / "-").exists()


@pytest.mark.parametrize("columns", ["²", "0", "-5", "abc", "99999999"])
def test_a_columns_that_is_no_width_falls_back(tmp_path: Path, columns: str):
    dep = write_cloud(tmp_path / "c", computes=1)
    unset = {k: v for k, v in os.environ.items() if k != "COLUMNS"}
    with open(tmp_path / "plain.txt", "w") as plain:
        assert _process("plan", "update", "-d", dep, stdout=plain, env=unset).returncode == 0
    with open(tmp_path / "out.txt", "w") as out:
        r = _process("plan", "update", "-d", dep, stdout=out, env={"COLUMNS": columns})
    assert r.returncode == 0 and no_traceback(r.stderr), r.stderr
    # as if unset: a file is never wrapped (nor left empty)
    assert (tmp_path / "out.txt").read_text() == (tmp_path / "plain.txt").read_text()
    assert max(len(line) for line in (tmp_path / "plain.txt").read_text().splitlines()) > 80
