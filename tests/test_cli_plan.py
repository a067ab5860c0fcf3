"""`stepwise validate` / `stepwise plan` as an operator meets them: exit codes, messages, JSON."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from stepwise.cli.main import _register, app

ROOT = Path(__file__).resolve().parent.parent
CLASSIC = str(ROOT / "examples" / "classic.yaml")
COMPOSED = str(ROOT / "examples" / "composed.yaml")
_register()


def run(*args: str):
    return CliRunner().invoke(app, list(args), catch_exceptions=False)


def test_validate_ok_and_json():
    r = run("validate", "-d", CLASSIC, "--json")
    assert r.exit_code == 0
    data = json.loads(r.stdout)
    assert data["valid"] and data["nodes"] == 8


def test_plan_json_contract():
    r = run("plan", "update", "-d", CLASSIC, "--json")
    assert r.exit_code == 0, r.output
    data = json.loads(r.stdout)
    assert (
        data["workflow"] == "update"
        and data["estimate"]["duration_s"] >= data["estimate"]["lower_bound_s"] > 0
    )
    unit = data["units"][3]
    assert {
        "id",
        "after",
        "step",
        "nodes",
        "services",
        "stops",
        "starts",
        "start_s",
        "end_s",
        "why",
    } <= set(unit)


def test_plan_tree_shows_windows_and_why():
    # expand/contract services (keystone, glance, nova, neutron, cinder) roll without a window;
    # heat's schema is offline, so it keeps the seed's window
    r = run("plan", "upgrade", "-d", COMPOSED)
    assert r.exit_code == 0, r.output
    windows = r.stdout.split("Downtime windows", 1)[1]
    assert "heat_api" in windows and "nova_api" not in windows and "keystone" not in windows
    assert (
        "why:" in r.stdout
        and "prepare" in r.stdout
        and "converge" in r.stdout
        and "contract" in r.stdout
    )
    r = run("plan", "upgrade", "-d", CLASSIC)
    assert r.exit_code == 0 and "No downtime window" in r.stdout


@pytest.mark.parametrize(
    "args, message, code",
    [
        (
            ("plan", "system-upgrade", "-d", COMPOSED, "--tags", "system_upgrade_prepare"),
            "refuses to run without --limit",
            2,
        ),
        (
            (
                "plan",
                "system-upgrade",
                "-d",
                COMPOSED,
                "--tags",
                "system_upgrade_run",
                "--limit",
                "Compute",
            ),
            "covers the whole role Compute",
            3,
        ),
        (
            ("plan", "update", "-d", CLASSIC, "--limit", "controler-0"),
            "did you mean controller-0",
            2,
        ),
        (("plan", "upgrades", "-d", CLASSIC), "unknown workflow", 2),
        (("plan", "update", "-d", "/nonexistent/deployment.yaml"), "file not found", 2),
    ],
)
def test_bad_input_is_a_clear_error_not_a_traceback(args, message, code):
    """Bad input (a missing or wrong option, a missing file) exits 2; a plan that would break a
    safety rule exits 3."""
    r = run(*args)
    assert r.exit_code == code, r.output
    assert message in r.stderr
    assert "Traceback" not in r.output + r.stderr


def test_unknown_service_names_file_line_and_field(tmp_path):
    dep = tmp_path / "d.yaml"
    dep.write_text(
        "name: x\nroles:\n  - name: A\n"
        "    services: [keystone, novaa_api]\n    nodes: [{name: a-0}]\n"
    )
    r = run("validate", "-d", str(dep))
    assert r.exit_code == 2
    assert f"{dep}:4: roles[0].services[1]: unknown service 'novaa_api'" in r.stderr
    assert "did you mean nova_api" in r.stderr


def test_help_answers():
    r = run("plan", "--help")
    assert r.exit_code == 0 and "--limit" in r.stdout and "system-upgrade" in r.stdout


def test_the_management_node_upgrade_has_one_name_in_every_command():
    for name in ("management-upgrade", "undercloud-upgrade"):
        r = run(
            "plan",
            name,
            "-d",
            str(Path(__file__).resolve().parent.parent / "examples" / "undercloud.yaml"),
        )
        assert r.exit_code == 0, r.output
        assert r.stdout.startswith("management-upgrade of undercloud:")
    r = run("plan", "management-upgrade", "-d", CLASSIC)
    assert r.exit_code == 2 and "no management node" in r.stderr


@pytest.mark.parametrize(
    "tag, assumed",
    [
        ("system_upgrade_prepare", "'repos' of database-0"),
        ("system_upgrade_run", "'prepared' of database-0"),
        ("system_upgrade_transfer_data", "'new os' of database-0"),
    ],
)
def test_each_seed_step_is_previewable_on_a_fresh_cloud(tag, assumed):
    """`stepwise plan` shows one step of the OS upgrade before the window: what earlier commands
    do is assumed, and said, with the earliest command still to run (a run still refuses)."""
    r = run("plan", "system-upgrade", "-d", COMPOSED, "--tags", tag, "--limit", "database-0")
    assert r.exit_code == 0, r.output
    assert f"preview: assumes {assumed}" in r.stdout and "done by earlier commands" in r.stdout
    assert "stepwise upgrade prepare -d" in r.stdout
    r = run(
        "plan", "system-upgrade", "-d", COMPOSED, "--tags", tag, "--limit", "database-0", "--json"
    )
    assert json.loads(r.stdout)["params"]["assumed"][0]["needs"] == assumed
