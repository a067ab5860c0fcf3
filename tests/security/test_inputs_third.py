"""Bad input of issue #34's third round is refused (exit 2, what and where) instead of being
accepted, read loosely or ignored; the -e variables the plans read reach the plan that runs."""

from __future__ import annotations

import os
from pathlib import Path
from types import SimpleNamespace

import pytest

from stepwise.errors import InputError, Problem
from tests.security.helpers import EXAMPLES, ROOT, cli, no_traceback, write_cloud

CONTAINERS = EXAMPLES / "tripleo-containers.yaml"
ROLES = ROOT / "tests" / "fixtures" / "tripleo" / "roles_data_classic.yaml"


@pytest.mark.parametrize(
    "value",
    [
        "{\"target_namespace\": \"{{ lookup('pipe', 'id') }}\"}",
        'target_namespace=\'{{ lookup("pipe", "id") }}\'',
        "target_namespace=$(id)",
        '{"target_namespace": {"a": 1}}',
        "target_namespace=" + "a" * ((1 << 20) - 100),
        "target_namespace=Upper/Case",
        "system_upgrade_mode=sideways",
    ],
)
def test_plan_variables_are_checked_like_the_deployments_fields(tmp_path: Path, value: str):
    for cmd in (["plan", "upgrade"], ["upgrade", "prepare"], ["discover"]):
        r = cli(
            *cmd,
            "-d",
            CONTAINERS,
            "-e",
            "target_release=R2",
            "-e",
            value,
            "--store",
            f"sqlite:///{tmp_path}/s.db",
        )
        assert r.code == 2 and no_traceback(r.text), (cmd, r.text)
        assert "target_namespace" in r.text or "system_upgrade_mode" in r.text, r.text
        assert "a" * 1000 not in r.text  # a huge value is not printed back whole
    assert not (tmp_path / "s.db").exists()  # refused before anything is opened


def test_target_namespace_reaches_the_plan_a_run_executes(tmp_path: Path, monkeypatch):
    """`upgrade prepare -e target_namespace=X` runs a plan whose images are X's and which
    records X, so a resumed run plans with it again (it was dropped on the way to the run)."""
    import stepwise.run.resume as resume

    seen = {}

    def captured(req):
        seen["plan"] = req.plan
        raise InputError(Problem("captured before anything runs"))

    monkeypatch.setattr(resume, "run_plan", captured)
    args = ["-d", CONTAINERS, "-e", "target_release=R2", "-e", "target_namespace=other-ns"]
    r = cli("upgrade", "prepare", *args, "--store", f"sqlite:///{tmp_path}/s.db", "--yes")
    assert "captured" in r.text, r.text
    params = seen["plan"].params
    assert params["target_namespace"] == "other-ns"
    refs = [i["ref"] for node in params["images"].values() for i in node.values()]
    assert refs and all("/other-ns/" in ref for ref in refs), refs
    # what a resume plans with, read back from the recorded params
    assert resume._plan_variables(SimpleNamespace(params=dict(params)))["target_namespace"] == (
        "other-ns"
    )


def _prepare(tmp: Path, text: str) -> Path:
    f = tmp / "containers-prepare-parameter.yaml"
    f.write_text("parameter_defaults:\n  ContainerImagePrepare:\n" + text)
    return f


def _import(prepare: Path) -> tuple:
    out = prepare.parent / "out.yaml"
    r = cli("import", "tripleo", "-r", ROLES, "--containers-prepare", prepare, "-o", out)
    return r, out


@pytest.mark.parametrize(
    "text, line, field, message",
    [
        # TripleO tests push_destination for truth: 0 pushes nowhere, 1 to a registry "1"
        (
            "  - push_destination: 0\n    set: {namespace: q.io/ns, tag: t}\n",
            3,
            "push_destination",
            "push_destination 0 is not",
        ),
        (
            "  - push_destination: 1\n    set: {namespace: q.io/ns, tag: t}\n",
            3,
            "push_destination",
            "push_destination 1 is not",
        ),
        (
            "  - push_destination: r.example:99999\n    set: {namespace: q.io/ns, tag: t}\n",
            3,
            "push_destination",
            "port 99999",
        ),
        (
            "  - push_destination: r.example:8787\n    set:\n      namespace: q.io/ns\n"
            "      tag: 'a b'\n",
            6,
            "set.tag",
            "containers.tag",
        ),
    ],
)
def test_container_image_prepare_faults_name_its_file_line_and_field(
    tmp_path: Path, text: str, line: int, field: str, message: str
):
    f = _prepare(tmp_path, text)
    r, out = _import(f)
    assert r.code == 2 and no_traceback(r.text), r.text
    where = f"{f}:{line}: parameter_defaults.ContainerImagePrepare[0].{field}"
    assert where in r.text and message in r.text, r.text
    assert not out.exists()


def test_a_registry_port_is_a_tcp_port(tmp_path: Path):
    for port, ok in (("99999", False), ("0", False), ("65535", True), ("8787", True)):
        dep = tmp_path / f"d{port}.yaml"
        dep.write_text(
            CONTAINERS.read_text().replace('registry: "127.0.0.1:8787"', f"registry: x:{port}")
        )
        r = cli("validate", "-d", dep)
        assert (r.code == 0) == ok, r.text
        if not ok:
            assert "containers.registry" in r.text and f"port {port}" in r.text, r.text


def test_two_preflight_checks_with_one_name_are_refused_with_both_lines(tmp_path: Path):
    checks = [
        {"name": "ready", "command": "true"},
        {"name": "other", "command": "true"},
        {"name": "ready", "command": "false"},
    ]
    dep = write_cloud(
        tmp_path, computes=1, extra_services={"chk": {"plane": "control", "preflight": checks}}
    )
    cat = tmp_path / "catalog" / "chk.yaml"
    lines = cat.read_text().splitlines()
    first, second = (i + 1 for i, t in enumerate(lines) if '"ready"' in t)
    for args in (["validate", "-d", dep], ["preflight", "update", "-d", dep]):
        r = cli(*args)
        assert r.code == 2 and no_traceback(r.text), r.text
        assert f"{cat}:{second}: preflight[2].name" in r.text, r.text
        assert f"preflight[0], line {first}" in r.text, r.text


@pytest.mark.parametrize("store", ["sqlite://", "sqlite:///:memory:", "sqlite:///{tmp}/no/x.db"])
def test_an_unusable_store_url_is_an_error_naming_it(tmp_path: Path, store: str):
    url = store.format(tmp=tmp_path)
    for args in (["status"], ["history"], ["report", "-o", tmp_path / "r.html"]):
        r = cli(*args, "-d", EXAMPLES / "classic.yaml", env={"STEPWISE_STORE": url})
        assert r.code == 2 and no_traceback(r.text), (args, r.text)
        assert f"$STEPWISE_STORE: the state store {url}" in r.text, r.text
        assert "no run recorded" not in r.text
    assert not (tmp_path / "no").exists()


@pytest.mark.parametrize("where", ["{tmp}/missing/facts.yaml", "{tmp}/ro/facts.yaml"])
def test_discover_checks_its_output_before_contacting_any_node(
    tmp_path: Path, monkeypatch, where: str
):
    import stepwise.run.discover as discover_mod

    dep = write_cloud(tmp_path, computes=1)
    ro = tmp_path / "ro"
    ro.mkdir()
    ro.chmod(0o500)
    # root writes into a 0500 directory: a read-only one is emulated there by a file in the
    # way of the probe (any directory that takes no new file is refused the same way)
    contacted = []
    monkeypatch.setattr(discover_mod, "discover", lambda *a, **k: contacted.append(a) or {})
    out = where.format(tmp=tmp_path)
    if os.geteuid() == 0 and "ro" in where:
        ro.chmod(0o700)
        ro.rmdir()
        ro.write_text("")  # ro/facts.yaml: its directory is a file
    r = cli("discover", "-d", dep, "-o", out)
    assert r.code == 2 and no_traceback(r.text), r.text
    assert "--output" in r.text and out in r.text, r.text
    assert contacted == []


def _store_with_images(tmp: Path, rows: list[tuple[str, str]]) -> tuple[Path, str]:
    """A copy of the containers example and a store holding only image rows (node, service)."""
    import sqlite3

    from stepwise.run.store import open_store

    dep = tmp / "tripleo-containers.yaml"
    dep.write_text(CONTAINERS.read_text())
    url = f"sqlite:///{tmp}/s.sqlite"
    open_store(url).engine.dispose()
    db = sqlite3.connect(tmp / "s.sqlite")
    for node, service in rows:
        db.execute(
            "INSERT INTO node_images (cloud, node, service, ref, running, target, updated_at) "
            "VALUES ('tripleo-containers', ?, ?, NULL, ?, ?, '2026-01-01')",
            (node, service, "sha256:" + "a" * 64, "sha256:" + "b" * 64),
        )
    db.commit()
    db.close()
    return dep, url


def test_stored_image_rows_of_an_unknown_node_are_refused(tmp_path: Path):
    dep, url = _store_with_images(
        tmp_path, [("controller-openstack-0", "keystone"), ("ghost-9", "keystone")]
    )
    r = cli("plan", "update", "-d", dep, "--store", url)
    assert r.code == 2 and no_traceback(r.text), r.text
    assert "store:tripleo-containers: nodes.ghost-9" in r.text and "discover" in r.text, r.text


def test_stored_image_rows_are_read_when_the_store_has_no_package_rows(tmp_path: Path):
    # an unknown service is refused (as it always was when package rows were there too):
    # the refusal shows the image rows were read
    dep, url = _store_with_images(tmp_path, [("controller-openstack-0", "no_such_service")])
    r = cli("plan", "update", "-d", dep, "--store", url)
    assert r.code == 2 and no_traceback(r.text), r.text
    assert "no_such_service" in r.text, r.text
