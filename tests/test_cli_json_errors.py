"""Under --json, an error is JSON too (on stdout, where a script reads), with the same exit
code and the same problems (file, line, field, message, hint) as the text on stderr."""

from __future__ import annotations

import json

from tests.security.helpers import EXAMPLES, cli


def test_bad_input_under_json_is_a_json_error():
    r = cli("plan", "update", "-d", EXAMPLES / "no-such.yaml", "--json")
    assert r.code == 2
    error = json.loads(r.out)["error"]
    assert error["kind"] == "error" and error["exit_code"] == 2
    (problem,) = error["problems"]
    assert problem["message"] == "file not found" and problem["file"].endswith("no-such.yaml")
    assert problem["hint"] and "file not found" in r.err


def test_a_refused_plan_under_json_names_the_field():
    r = cli(
        "plan",
        "system-upgrade",
        "-d",
        EXAMPLES / "composed.yaml",
        "--tags",
        "system_upgrade_run",
        "--limit",
        "Compute",
        "--json",
    )
    assert r.code == 3
    error = json.loads(r.out)["error"]
    assert error["kind"] == "refused" and error["problems"][0]["field"] == "--limit"


def test_without_json_an_error_prints_no_json():
    r = cli("plan", "update", "-d", EXAMPLES / "no-such.yaml")
    assert r.code == 2 and r.out == "" and "file not found" in r.err


def test_export_report_and_import_print_what_they_wrote_as_json(tmp_path):
    fixtures = EXAMPLES.parent / "tests" / "fixtures" / "tripleo"
    r = cli("export", "update", "-d", EXAMPLES / "classic.yaml", "-o", tmp_path / "pb", "--json")
    assert r.code == 0, r.text
    doc = json.loads(r.out)
    assert (
        doc["wrote"] == str(tmp_path / "pb") and str(tmp_path / "pb" / "site.yml") in doc["files"]
    )
    assert doc["units"] > 0
    r = cli(
        "report",
        "-d",
        EXAMPLES / "classic.yaml",
        "--plan",
        "update",
        "-o",
        tmp_path / "r.html",
        "--json",
    )
    assert r.code == 0, r.text
    assert json.loads(r.out) == {
        "wrote": str(tmp_path / "r.html"),
        "bytes": (tmp_path / "r.html").stat().st_size,
    }
    r = cli(
        "import",
        "tripleo",
        "-r",
        fixtures / "roles_data_classic.yaml",
        "-o",
        tmp_path / "d.yaml",
        "--json",
    )
    assert r.code == 0, r.text
    doc = json.loads(r.out)
    assert doc["wrote"] == str(tmp_path / "d.yaml") and doc["roles"] >= 2 and doc["nodes"] > 0
    # --json with the deployment on stdout cannot be: refused before anything is printed
    r = cli("import", "tripleo", "-r", fixtures / "roles_data_classic.yaml", "-o", "-", "--json")
    assert r.code == 2 and "-o FILE" in r.err and "error" in json.loads(r.out)


def test_ctrl_c_while_a_run_plans_under_json_is_a_json_error(monkeypatch):
    """A Ctrl-C before the nodes are asked (planning) ends the command with 130; a script that
    asked for JSON reads that as JSON, as it reads a Ctrl-C held during the preflight."""
    import stepwise.cli.run_cmd as run_cmd

    def pressed(*_args, **_kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(run_cmd, "load_deployment", pressed)
    r = cli("update", "run", "-d", EXAMPLES / "classic.yaml", "--json")
    assert r.code == 130, r.text
    error = json.loads(r.out)["error"]
    assert error["kind"] == "interrupted" and error["exit_code"] == 130
    assert "interrupted" in r.err
    r = cli("update", "run", "-d", EXAMPLES / "classic.yaml")
    assert r.code == 130 and r.out == "" and "interrupted" in r.err


def test_ctrl_c_before_a_command_reports_anything_is_still_said(monkeypatch):
    """A Ctrl-C that comes while the command imports what it needs, before its errors are
    reported (typer answers it with a silent exit 130), is said too: CI once read an empty
    output from an interrupted `update run --json`."""
    import stepwise.cli.run_cmd as run_cmd

    def pressed(*_args, **_kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(run_cmd, "_run", pressed)
    r = cli("update", "run", "-d", EXAMPLES / "classic.yaml", "--json")
    assert r.code == 130, r.text
    assert json.loads(r.out)["error"]["kind"] == "interrupted"
    assert "interrupted" in r.err
    r = cli("update", "run", "-d", EXAMPLES / "classic.yaml")
    assert r.code == 130 and r.out == "" and "interrupted" in r.err
