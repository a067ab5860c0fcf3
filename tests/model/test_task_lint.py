"""The catalog loader's task checks (ansible-lint's main rules, with file and line), and
`stepwise catalog lint` that prints them (errors with --strict)."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from stepwise.cli.main import _register, app
from stepwise.model import load_catalog
from stepwise.model.task_lint import check_task

_register()

SERVICE = """\
name: svc
plane: control
packages: [svc]
update:
  stop:
    - name: stop svc
      ansible.builtin.command: systemctl stop svc
  packages:
    - ansible.builtin.command: dnf -y update svc
      changed_when: true
  config:
    - name: Configure svc
      ansible.builtin.shell: os-apply-config
      changed_when: true
  start:
    - name: Start svc
      ansible.builtin.shell: dnf list installed svc | awk '{print $2}'
      changed_when: false
    - name: Start svc for real
      ansible.builtin.systemd_service:
        name: svc
        state: started
"""


def rules(task: dict) -> list[str]:
    return [m.split(":")[0] for m, _ in check_task(task)]


@pytest.mark.parametrize(
    ("task", "expected"),
    [
        ({"name": "Stop x", "ansible.builtin.systemd_service": {"name": "x"}}, []),
        (
            {
                "name": "Query x",
                "ansible.builtin.command": "systemctl status x",
                "changed_when": False,
            },
            [],
        ),
        (
            {
                "name": "Stop x",
                "ansible.builtin.command": "/usr/bin/systemctl stop x",
                "changed_when": True,
            },
            ["command-instead-of-module"],
        ),
        (
            {
                "name": "Get",
                "ansible.builtin.command": {"argv": ["wget", "u"]},
                "changed_when": True,
            },
            ["command-instead-of-module"],
        ),
        ({"name": "Make", "ansible.builtin.command": {"cmd": "touch /x", "creates": "/x"}}, []),
        ({"ansible.builtin.command": "true", "changed_when": False}, ["name[missing]"]),
        (
            {"name": "lower", "ansible.builtin.command": "true", "changed_when": False},
            ["name[casing]"],
        ),
        (
            {
                "name": "Pipe",
                "ansible.builtin.shell": {
                    "cmd": "set -o pipefail\na | b",
                    "executable": "/bin/bash",
                },
                "changed_when": False,
            },
            [],
        ),
        (
            {"name": "Pipe", "ansible.builtin.shell": "a | b", "changed_when": False},
            ["risky-shell-pipe"],
        ),
        ({"name": "Or", "ansible.builtin.shell": "a || b", "changed_when": False}, []),
        (
            {
                "name": "Plain",
                "ansible.builtin.shell": "crudini --get /f s k {{ x }}",
                "changed_when": False,
            },
            ["command-instead-of-shell"],
        ),
        ({"name": "Block", "block": [{"name": "Inner", "ansible.builtin.command": "x"}]}, []),
    ],
)
def test_rules(task, expected):
    assert rules(task) == expected


def test_the_loader_reports_each_finding_with_file_line_and_field(tmp_path: Path):
    (tmp_path / "svc.yaml").write_text(SERVICE)
    cat = load_catalog(tmp_path)  # warnings: the catalog loads
    found = [(p.line, p.field, p.message.split(":")[0]) for p in cat.lint]
    assert found == [
        (6, "update.stop[0]", "name[casing]"),
        (6, "update.stop[0]", "no-changed-when"),
        (6, "update.stop[0]", "command-instead-of-module"),
        (9, "update.packages[0]", "name[missing]"),
        (12, "update.config[0]", "command-instead-of-shell"),
        (16, "update.start[0]", "risky-shell-pipe"),
    ]
    assert all(p.file == str(tmp_path / "svc.yaml") and p.hint for p in cat.lint)


def test_catalog_lint_warns_and_with_strict_fails(tmp_path: Path):
    (tmp_path / "svc.yaml").write_text(SERVICE)
    runner = CliRunner()
    r = runner.invoke(app, ["catalog", "lint", "--catalog", str(tmp_path)])
    assert r.exit_code == 0, r.output
    assert f"warning: {tmp_path / 'svc.yaml'}:6: update.stop[0]: name[casing]" in r.output
    assert "6 finding(s) in 1 services" in r.output
    r = runner.invoke(app, ["catalog", "lint", "--catalog", str(tmp_path), "--strict"])
    assert r.exit_code == 2
    assert f"error: {tmp_path / 'svc.yaml'}:16: update.start[0]: risky-shell-pipe" in r.output
    assert "Traceback" not in r.output


def test_the_builtin_catalog_is_clean():
    """Every built-in task passes the checks."""
    assert [str(p) for p in load_catalog().lint] == []
