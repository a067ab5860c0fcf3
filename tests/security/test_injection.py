"""Data is never template code: a Jinja payload in every data field either is refused at load
time (names, packages, addresses) or reaches Ansible as `!unsafe` text, and the canary file the
payload would create never appears, while a real run goes through."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.security.helpers import cli, no_traceback, write_cloud


def _payload(canary: Path) -> str:
    return "{{ lookup('pipe', 'touch " + str(canary) + "') }}"


def test_template_payloads_in_data_are_never_executed(tmp_path: Path, monkeypatch):
    canary = tmp_path / "CANARY"
    bad = _payload(canary)
    dep = write_cloud(
        tmp_path,
        computes=1,
        extra_services={
            "echoer": {
                "plane": "control",
                "availability": {"max_unavailable": 1},
                "packages": ["openstack-echo"],
                # the catalog author's task (trusted code) uses variables whose *values* are data
                "update": {
                    "packages": [
                        {
                            "name": "echo data",
                            "ansible.builtin.shell": "printf '%s|%s|%s|%s|%s|%s\\n' "
                            "'{{ dep_var }}' '{{ role_var }}' '{{ node_var }}' "
                            "'{{ extra_var }}' '{{ vault_key }}' '{{ stepwise_node_address }}' "
                            ">> {{ trace }}/echo.log",
                        }
                    ]
                },
            }
        },
    )
    data = json.loads(dep.read_text())
    data["vars"]["dep_var"] = bad
    data["roles"][0]["vars"] = {"role_var": bad}
    data["roles"][0]["services"].append("echoer")
    data["roles"][0]["nodes"][0]["vars"]["node_var"] = bad
    dep.write_text(json.dumps(data))
    (tmp_path / "vault").write_text(bad)
    facts = tmp_path / "facts.yaml"
    facts.write_text(
        json.dumps(
            {
                "nodes": {
                    "ctl-0": {
                        "packages": {
                            "openstack-api": {"installed": bad[:150], "available": "2"},
                            "openstack-echo": {"installed": "1", "available": "2"},
                        }
                    }
                }
            }
        )
    )
    r = cli(
        "update",
        "run",
        "-d",
        dep,
        "--limit",
        "Controller",
        "--json",
        "--no-prestage",
        "--facts",
        facts,
        "-e",
        json.dumps({"extra_var": bad}),
        "--secret",
        f"vault_key=@{tmp_path / 'vault'}",
    )
    assert r.code == 0, r.text
    assert not canary.exists(), "a template in data ran on the controller"
    echoed = (tmp_path / "trace" / "echo.log").read_text()
    # the five values arrived as text (the shell ate their quotes: the catalog task's own quoting)
    assert echoed.count("{{ lookup(pipe, touch") == 5, echoed
    # exported playbooks carry the same payloads as unsafe text
    out = tmp_path / "export"
    assert cli("export", "update", "-d", dep, "-o", out).code == 0
    inv = (out / "inventory.yml").read_text()
    assert "!unsafe '{{ lookup(''pipe''" in inv and not canary.exists()


@pytest.mark.parametrize(
    "field, value",
    [
        ("address", "{{ lookup('pipe', 'touch CANARY') }}"),
        ("address", "10.0.0.1; touch CANARY"),
        ("address", "$(touch CANARY)"),
        ("address", "300.1.2.3"),
        ("name", "ctl-{{ x }}"),
        ("name", "ctl,cmp-0"),
        ("name", "ctl[/]"),
    ],
)
def test_bad_node_fields_are_refused(tmp_path: Path, field: str, value: str):
    dep = write_cloud(tmp_path, computes=1)
    data = json.loads(dep.read_text())
    data["roles"][0]["nodes"][0][field] = value
    dep.write_text(json.dumps(data))
    r = cli("validate", "-d", dep)
    assert r.code == 2 and no_traceback(r.text) and f"nodes[0].{field}" in r.text, r.text
    if field == "address":
        assert value in r.text  # quoted as it is


@pytest.mark.parametrize(
    "template, start, count",
    [
        ("c{index}{index:,}", 999, 2),  # the format spec made 'c10001,000'
        ("c{index!r}", 0, 1),
        ("c{0}{index}", 0, 1),
        ("c{index.real}", 0, 1),
    ],
)
def test_counted_names_are_plain_index_templates(
    tmp_path: Path, template: str, start: int, count: int
):
    dep = tmp_path / "d.yaml"
    dep.write_text(
        json.dumps(
            {
                "name": "x",
                "roles": [
                    {
                        "name": "C",
                        "services": ["nova_compute"],
                        "nodes": {"count": count, "name": template, "start": start},
                    }
                ],
            }
        )
    )
    r = cli("plan", "update", "-d", dep, "--json")
    assert r.code == 2 and no_traceback(r.text) and "'{index}'" in r.text, r.text


def test_every_counted_address_is_checked(tmp_path: Path):
    dep = tmp_path / "d.yaml"
    dep.write_text(
        json.dumps(
            {
                "name": "x",
                "roles": [
                    {
                        "name": "C",
                        "services": ["nova_compute"],
                        "nodes": {"count": 8, "name": "c{index}", "address": "10.0.0.25{index}"},
                    }
                ],
            }
        )
    )
    r = cli("validate", "-d", dep)
    assert r.code == 2 and "10.0.0.256" in r.text, r.text


@pytest.mark.parametrize(
    "package", ["{{ lookup('pipe','id') }}", "pkg; rm -rf /", "$(id)", "-y", "a b", "x[/]"]
)
def test_package_names_follow_the_documented_pattern(tmp_path: Path, package: str):
    root = tmp_path
    dep = write_cloud(
        root, computes=1, extra_services={"bad": {"plane": "control", "packages": [package]}}
    )
    r = cli("validate", "-d", dep)
    assert r.code == 2 and no_traceback(r.text) and "packages[0]" in r.text, r.text
