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
    r = cli("plan", "system-upgrade", "-d", EXAMPLES / "composed.yaml", "--tags", "system_upgrade_run",
            "--limit", "Compute", "--json")
    assert r.code == 3
    error = json.loads(r.out)["error"]
    assert error["kind"] == "refused" and error["problems"][0]["field"] == "--limit"


def test_without_json_an_error_prints_no_json():
    r = cli("plan", "update", "-d", EXAMPLES / "no-such.yaml")
    assert r.code == 2 and r.out == "" and "file not found" in r.err
