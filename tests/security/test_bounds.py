"""Issue #19, resource bounds and the smaller classes: totals are bounded as well as parts
(an inventory's hosts in all, a plan's duration), numbers are finite however they are
written, names match whole (no trailing newline), and an import names no group it lacks."""

from __future__ import annotations

import json
from pathlib import Path

import yaml

from tests.security.helpers import EXAMPLES, cli, cli_process, no_traceback

CLASSIC = EXAMPLES / "classic.yaml"


def test_ini_host_ranges_are_bounded_in_total(tmp_path: Path):
    inv = tmp_path / "inv.ini"
    inv.write_text(
        "".join(f"[g{i}]\nh{i}-[00000:99999]\n" for i in range(40))
    )  # ~700 bytes, 4 million hosts
    assert inv.stat().st_size < 1000
    r = cli_process("import", "inventory", inv, "-o", "-", timeout=60, memory_mb=1024)
    assert r.returncode == 2 and no_traceback(r.stderr) and "100,000 hosts in all" in r.stderr, (
        r.stderr
    )


def test_yaml_inventory_hosts_are_bounded_in_total(tmp_path: Path):
    from stepwise.errors import InputError
    from stepwise.model import limits
    from stepwise.model.inventory import load_inventory

    inv = tmp_path / "inv.yaml"
    inv.write_text(
        yaml.safe_dump({"all": {"children": {"a": {"hosts": {f"h{i}": None for i in range(30)}}}}})
    )
    old = limits.MAX_NODES
    limits.MAX_NODES = 20
    try:
        load_inventory(inv)
        raise AssertionError("not refused")
    except InputError as exc:
        assert "20 hosts in all" in str(exc)
    finally:
        limits.MAX_NODES = old


def _cloud(tmp_path: Path, seconds: float, count: int = 2) -> Path:
    cat = tmp_path / "cat"
    cat.mkdir()
    for f in (EXAMPLES / "catalog").glob("*.yaml"):
        doc = yaml.safe_load(f.read_text())
        doc["durations"] = {"packages": seconds, "stop": seconds, "start": seconds}
        (cat / f.name).write_text(yaml.safe_dump(doc))
    doc = yaml.safe_load(CLASSIC.read_text())
    doc["catalog"] = "cat"
    for role in doc["roles"]:
        if role["name"] == "Compute":
            role["nodes"] = {"count": count, "name": "cmp-{index}"}
            role["update_serial"] = 1
    dep = tmp_path / "d.yaml"
    dep.write_text(yaml.safe_dump(doc))
    return dep


def test_a_step_duration_is_bounded(tmp_path: Path):
    r = cli("plan", "update", "-d", _cloud(tmp_path, 1e300), "--json")
    assert r.code == 2 and "more than a week" in r.text and no_traceback(r.text), r.text
    assert set(json.loads(r.out)) == {"error"}  # under --json: the error, and no half a plan


def test_durations_that_add_up_to_too_much_are_refused_whole(tmp_path: Path):
    dep = _cloud(tmp_path, 7 * 24 * 3600, count=2000)
    for extra in (["--json"], ["--html", str(tmp_path / "p.html")], []):
        r = cli("plan", "update", "-d", dep, *extra)
        assert r.code == 2 and "more than a century" in r.text and no_traceback(r.text), r.text
        assert "nan" not in r.text
        # nothing of a plan on stdout: under --json the error alone, else nothing
        assert (set(json.loads(r.out)) == {"error"}) if extra == ["--json"] else r.out == ""
    assert not (tmp_path / "p.html").exists()


def test_extra_vars_numbers_are_finite_however_written():
    for value in (
        '{"x": 1e400}',
        '{"x": -1e400}',
        '{"x": [1, {"y": 1E999}]}',
        '{"x": Infinity}',
        '{"x": NaN}',
    ):
        r = cli("plan", "update", "-d", CLASSIC, "-e", value)
        assert r.code == 2 and "finite" in r.text and no_traceback(r.text), (value, r.text)


def test_names_with_a_trailing_newline_are_refused(tmp_path: Path):
    assert cli("plan", "update", "-d", CLASSIC, "-e", json.dumps({"x\n": 1})).code == 2
    assert cli("plan", "update", "-d", CLASSIC, "-e", "target_release=R2\n").code in (
        0,
        2,
    )  # stripped: ok
    assert (
        cli("plan", "update", "-d", CLASSIC, "-e", json.dumps({"target_release": "R2\n"})).code == 2
    )
    inv = tmp_path / "inv.ini"
    inv.write_text("[Controller]\nctl-0\n[Controller:vars]\nstepwise_services=keystone\n")
    r = cli("import", "inventory", inv, "--name", "cloud\n", "-o", "-")
    assert r.code == 2 and "not a valid name" in r.text, r.text
    r = cli(
        "import",
        "tripleo",
        "-r",
        EXAMPLES.parent / "tests/fixtures/tripleo/roles_data_classic.yaml",
        "--stack",
        "overcloud\n",
        "-o",
        "-",
    )
    assert r.code == 2 and "not a valid name" in r.text, r.text


def test_an_unknown_controlplane_group_is_an_error(tmp_path: Path):
    inv = tmp_path / "inv.ini"
    inv.write_text("[Controller]\nctl-[0:2]\n[Controller:vars]\nstepwise_services=keystone\n")
    r = cli("import", "inventory", inv, "--controlplane", "Controler", "-o", "-")
    assert (
        r.code == 2
        and "--controlplane" in r.text
        and "Controller" in r.text
        and no_traceback(r.text)
    ), r.text
    assert cli("import", "inventory", inv, "--controlplane", "Controller", "-o", "-").code == 0
