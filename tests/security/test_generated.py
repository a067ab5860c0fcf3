"""Issue #19, what stepwise writes: generated YAML carries data only through the YAML library
(a file name with a newline starts no YAML of its own), crash logs and exports keep secrets
out (every argv form, nested lists; the exported inventory 0600), the report's CSP allows its
one script by hash, and data printed in the terminal is never an emoji code."""

from __future__ import annotations

import base64
import hashlib
import json
import re
import stat
from pathlib import Path

import pytest
import yaml

from tests.security.helpers import EXAMPLES, ROOT, cli, no_traceback

CLASSIC = EXAMPLES / "classic.yaml"
ROLES = ROOT / "tests" / "fixtures" / "tripleo" / "roles_data_classic.yaml"
INJECTED = "roles\ncatalog: evil\nroles: []\n# x.yaml"


# ------------------------------------------------------------------------------ YAML injection
def test_a_file_name_with_newlines_starts_no_yaml_in_an_import(tmp_path: Path):
    roles = tmp_path / INJECTED
    roles.write_bytes(ROLES.read_bytes())
    inv = tmp_path / ("inv\ncatalog: evil\n#")
    inv.write_text(
        "[Controller]\nctl-[0:2] ansible_host=10.0.0.1\n"
        "[Controller:vars]\nstepwise_services=keystone\n"
    )
    for args in (["import", "tripleo", "-r", roles], ["import", "inventory", inv]):
        out = tmp_path / "out.yaml"
        r = cli(*args, "-o", out, "--force")
        assert r.code == 0, r.text
        doc = yaml.safe_load(out.read_text())
        assert "catalog" not in doc and doc["roles"], doc
        assert "catalog: evil" not in out.read_text().split("\n", 1)[0]
        assert "catalog: evil" in doc["description"]  # the name is data, quoted by the YAML library
        assert cli("validate", "-d", out).code == 0


# ------------------------------------------------------------------------ secrets in crash logs
@pytest.mark.parametrize(
    "argv, secret",
    [
        (["-ve", "db_password=S3cretOne"], "S3cretOne"),
        (["-vedb_password=S3cretTwo"], "S3cretTwo"),
        (["-e", '{"users": [{"name": "a", "password": "N3stedList"}]}'], "N3stedList"),
        (["--extra-vars", '{"a": {"b": [[{"api_token": "D33pT0ken"}]]}}'], "D33pT0ken"),
        (["--extra-vars=vault_key=Eq5ecret"], "Eq5ecret"),
    ],
)
def test_the_crash_log_holds_no_secret(tmp_path: Path, monkeypatch, argv: list, secret: str):
    import stepwise.cli.render as render

    def boom(*_a, **_k):
        raise RuntimeError(f"a bug that quotes {secret}")

    monkeypatch.setattr(render, "render_plan", boom)
    monkeypatch.setenv("STEPWISE_LOG_DIR", str(tmp_path / "logs"))
    r = cli("plan", "update", "-d", CLASSIC, *argv)
    assert r.code == 70 and secret not in r.text, r.text
    (log,) = (tmp_path / "logs").iterdir()
    text = log.read_text()
    assert "RuntimeError" in text and secret not in text and "****" in text


@pytest.mark.parametrize(
    "argv",
    [
        ["update", "run", "-ye", "db_password=Y3sSecret"],
        ["update", "run", "-yedb_password=Y3sSecret"],
        ["plan", "-e", "x=1 db_password=Y3sSecret"],
        ["status", "--store", "postgresql+psycopg://u:Y3sSecret@h/db"],
        ["plan", "-e", '[{"password": "Y3sSecret"}]'],
        ["plan", "-e", "{not json Y3sSecret"],
    ],
)
def test_every_argv_form_is_masked(argv: list):
    from stepwise.secrets import argv_secrets, mask_argv

    assert "Y3sSecret" not in " ".join(mask_argv(argv))
    assert any("Y3sSecret" in v for v in argv_secrets(argv))
    assert mask_argv(["plan", "-d", "deep/e/path.yaml", "-l", "a=b"]) == [
        "plan",
        "-d",
        "deep/e/path.yaml",
        "-l",
        "a=b",
    ]


# ------------------------------------------------------------------------------ export secrets
def test_export_keeps_secrets_out_of_world_readable_files(tmp_path: Path):
    dep = tmp_path / "d.yaml"
    doc = yaml.safe_load(CLASSIC.read_text())
    doc["catalog"] = str(EXAMPLES / "catalog")
    doc["vars"] = {**doc.get("vars", {}), "db_password": "DeplSecret1"}
    dep.write_text(yaml.safe_dump(doc))
    inv = tmp_path / "inv.yaml"
    inv.write_text(
        yaml.safe_dump(
            {
                "all": {
                    "vars": {
                        "ansible_password": "SshSecret22",
                        "ansible_become_password": "BecomeSecret3",
                    }
                }
            }
        )
    )
    out = tmp_path / "out"
    r = cli("export", "update", "-d", dep, "-o", out, "-i", inv)
    assert r.code == 0, r.text
    assert stat.S_IMODE((out / "inventory.yml").stat().st_mode) == 0o600
    holding = []
    for p in out.rglob("*"):
        if p.is_file():
            data = p.read_bytes()
            if any(s in data for s in (b"DeplSecret1", b"SshSecret22", b"BecomeSecret3")):
                holding.append(p.name)
                assert stat.S_IMODE(p.stat().st_mode) & 0o077 == 0, p
    assert "inventory.yml" in holding


# ------------------------------------------------------------------------------ report and terminal
def test_the_report_csp_allows_its_one_script_by_hash(tmp_path: Path):
    from stepwise.observe.report.html import SELF_CHECK

    out = tmp_path / "p.html"
    assert cli("plan", "update", "-d", CLASSIC, "--html", out).code == 0
    doc = out.read_text()
    csp = re.search(r'http-equiv="Content-Security-Policy" content="([^"]+)"', doc).group(1)
    rules = dict((d.split(" ", 1) + [""])[:2] for d in (x.strip() for x in csp.split(";")))
    digest = base64.b64encode(hashlib.sha256(SELF_CHECK.encode()).digest()).decode()
    assert rules["script-src"] == f"'sha256-{digest}'" and "unsafe" not in rules["script-src"]
    assert (
        rules["base-uri"] == "'none'"
        and rules["form-action"] == "'none'"
        and rules["default-src"] == "'none'"
    )
    assert doc.count("<script>") == 1 and f"<script>{SELF_CHECK}</script>" in doc


def test_emoji_codes_from_data_print_as_text():
    r = cli("plan", ":skull:", "-d", CLASSIC)
    assert r.code == 2 and ":skull:" in r.text and "\U0001f480" not in r.text, r.text


def test_json_output_is_whole_or_nothing(tmp_path: Path):
    r = cli("plan", "update", "-d", CLASSIC, "--json")
    assert r.code == 0 and json.loads(r.out)["units"] and no_traceback(r.text)
