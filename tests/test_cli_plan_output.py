"""`stepwise plan` output at any size: the JSON document is the one the contract describes
(written fast, same content), a level of many batches folds per role, `plan` stays light."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from stepwise.cli.main import _register, app
from stepwise.model import load_deployment
from stepwise.plan import make_plan
from stepwise.verify import verify_plan
from tests.plan.test_os_upgrade import FIRST, Cloud

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = sorted((ROOT / "examples").glob("*.yaml"))
_register()

WIDE = (
    "name: wide\n"
    "roles:\n"
    "  - name: Controller\n"
    "    tags: [controlplane]\n"
    "    services: [pacemaker, haproxy, galera, rabbitmq, keystone, nova_api, nova_conductor,"
    " nova_scheduler, neutron_server]\n"
    '    nodes: {count: 3, name: "controller-{index}"}\n'
    "  - name: Compute\n"
    "    services: [nova_compute, neutron_ovs_agent, openvswitch]\n"
    '    nodes: {count: 45, name: "compute-{index}"}\n'
)


def run(*args: str):
    return CliRunner().invoke(app, list(args), catch_exceptions=False)


def no_store(tmp_path: Path) -> str:
    """A store that does not exist: the plan starts from nothing recorded, as make_plan's
    default."""
    return f"sqlite:///{tmp_path / 'none.sqlite'}"


def stdlib_document(plan) -> object:
    """The plan as `stepwise plan --json` printed it before orjson: json.dumps(indent=2)."""
    return json.loads(json.dumps(plan.to_json(), indent=2))


@pytest.mark.parametrize("workflow", ["update", "upgrade"])
@pytest.mark.parametrize(
    "example", [p for p in EXAMPLES if p.stem != "undercloud"], ids=lambda p: p.stem
)
def test_plan_json_is_the_same_document_as_before(example: Path, workflow: str, tmp_path: Path):
    r = run(
        "plan",
        workflow,
        "-d",
        str(example),
        "--json",
        "--no-prestage",
        "--store",
        no_store(tmp_path),
    )
    assert r.exit_code == 0, r.output
    dep = load_deployment(example)
    assert json.loads(r.stdout_bytes) == stdlib_document(verify_plan(make_plan(workflow, dep), dep))


def test_undercloud_plan_json_is_the_same_document_as_before(tmp_path: Path):
    example = ROOT / "examples" / "undercloud.yaml"
    r = run(
        "plan",
        "undercloud-upgrade",
        "-d",
        str(example),
        "--json",
        "--no-prestage",
        "--store",
        no_store(tmp_path),
    )
    assert r.exit_code == 0, r.output
    dep = load_deployment(example)
    assert json.loads(r.stdout_bytes) == stdlib_document(
        verify_plan(make_plan("undercloud-upgrade", dep), dep)
    )


def test_an_open_window_has_no_end_in_json():
    # the data transfer leaves the control plane down for the next command: windows without an end
    c = Cloud()
    c.run("upgrade prepare")
    c.run("upgrade run", tags="system_upgrade_prepare", limit=FIRST)
    c.run("external-upgrade run", tags="system_upgrade_prepare", limit=FIRST)
    c.run("upgrade run", tags="system_upgrade_run", limit=FIRST)
    plan = c.run(
        "external-upgrade run",
        tags="system_upgrade_transfer_data",
        limit="ControllerOpenstack,Database,Messaging",
    )
    assert any(math.isinf(w.end_s) for w in plan.windows)
    written = plan.to_json_bytes()
    assert json.loads(written) == stdlib_document(plan)
    assert any(w["end_s"] is None for w in json.loads(written)["windows"]), "JSON has no Infinity"
    assert b"Infinity" not in written


def test_a_level_of_many_batches_folds_per_role_and_expand_shows_every_batch(tmp_path: Path):
    dep = tmp_path / "wide.yaml"
    dep.write_text(WIDE)
    folded = run("plan", "update", "-d", str(dep))
    assert folded.exit_code == 0, folded.output
    assert "Compute: 45 batches of 1 node(s)" in folded.stdout and "--expand" in folded.stdout
    assert "Compute#2 compute-1" not in folded.stdout
    expanded = run("plan", "update", "-d", str(dep), "--expand")
    assert expanded.exit_code == 0, expanded.output
    assert "batches of" not in expanded.stdout and "more batch(es)" not in expanded.stdout
    assert all(f"Compute#{i + 1} compute-{i} " in expanded.stdout for i in range(45))


def test_a_small_plan_is_not_folded():
    r = run("plan", "update", "-d", str(ROOT / "examples" / "classic.yaml"))
    assert r.exit_code == 0, r.output
    assert "batches of" not in r.stdout and "--expand" not in r.stdout
    assert "Controller#1 controller-0" in r.stdout
    # a short level is shown whole: all three ceph nodes' batches, no "more batch(es)"
    assert "more batch(es)" not in r.stdout
    assert all(f"CephStorage#{i + 1} ceph-{i} " in r.stdout for i in range(3))


def test_a_level_of_ten_to_forty_batches_shows_its_first_ones_and_names_expand(tmp_path: Path):
    dep = tmp_path / "twelve.yaml"
    dep.write_text(WIDE.replace("count: 45", "count: 12"))
    r = run("plan", "update", "-d", str(dep))
    assert r.exit_code == 0, r.output
    assert "Compute#4 compute-3 " in r.stdout and "Compute#5 compute-4 " not in r.stdout
    assert "8 more batch(es) on 8 node(s)" in r.stdout and "(--expand shows all)" in r.stdout


def test_plan_imports_neither_the_run_layer_nor_its_libraries(tmp_path: Path):
    args = [
        "plan",
        "upgrade",
        "-d",
        str(ROOT / "examples" / "classic.yaml"),
        "--store",
        no_store(tmp_path),
    ]
    code = (
        "import sys\n"
        "from typer.testing import CliRunner\n"
        "from stepwise.cli.main import _register, app\n"
        "_register()\n"
        "for extra in ([], ['--json']):\n"
        f"    r = CliRunner().invoke(app, {args!r} + extra)\n"
        "    assert r.exit_code == 0, r.output\n"
        "heavy = ('sqlalchemy', 'alembic', 'ansible', 'ansible_runner', 'ruamel')\n"
        "light = ('stepwise.run', 'stepwise.run.store', 'stepwise.run.store.location')\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] in heavy\n"
        "             or m.startswith('stepwise.run') and m not in light))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, check=True
    )
    assert out.stdout.strip() == "[]", out.stdout


def test_plan_html_says_what_it_wrote(tmp_path: Path):
    out = tmp_path / "plan.html"
    r = run("plan", "update", "-d", str(ROOT / "examples" / "classic.yaml"), "--html", str(out))
    assert r.exit_code == 0, r.output
    assert out.is_file() and f"wrote {out} (" in r.stdout
    r = run(
        "plan",
        "update",
        "-d",
        str(ROOT / "examples" / "classic.yaml"),
        "--html",
        str(out),
        "--json",
    )
    assert (
        r.exit_code == 0 and json.loads(r.stdout)["workflow"] == "update"
    )  # stdout stays the plan


def test_plan_html_dash_prints_the_report(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """`--html -` prints the report on stdout (no file named "-"); with --json, which also
    prints there, it is refused before anything is written."""
    monkeypatch.chdir(tmp_path)
    classic = str(ROOT / "examples" / "classic.yaml")
    r = run("plan", "update", "-d", classic, "--html", "-")
    assert r.exit_code == 0, r.output
    assert r.stdout.startswith("<!DOCTYPE html>") and r.stdout.rstrip().endswith("</html>")
    assert "stepwise plan: update of classic" in r.stdout
    assert not (tmp_path / "-").exists()
    r = run("plan", "update", "-d", classic, "--html", "-", "--json")
    assert r.exit_code == 2 and "both print to standard output" in r.output
    assert not (tmp_path / "-").exists()


def test_exported_plays_and_files_say_what_they_do(tmp_path: Path):
    import yaml

    out = tmp_path / "playbooks"
    r = run("export", "update", "-d", str(ROOT / "examples" / "classic.yaml"), "-o", str(out))
    assert r.exit_code == 0, r.output
    files = sorted(p.name for p in (out / "units").iterdir())
    assert "0003-u4-stop-Controller_1.yml" in files
    (play,) = yaml.safe_load(
        (out / "units" / "0003-u4-stop-Controller_1.yml").read_text().replace("!unsafe", "")
    )
    # named after its batch and step (#22), then what, where and the unit
    assert play["name"].startswith("Batch Controller#1, step stop: ") and play["name"].endswith(
        " on controller-0 (unit u4)"
    )
    tasks = [t for b in play["tasks"] for t in b.get("block", [b])]
    assert tasks and all(t["name"][0].isupper() for t in tasks)


def test_the_os_upgrade_parts_are_named_by_the_seed_steps_alike_in_tree_json_and_report(
    tmp_path: Path,
):
    from stepwise.observe.report import model as report_model
    from stepwise.plan.units import parts

    dep = load_deployment(ROOT / "examples" / "composed.yaml")
    plan = verify_plan(make_plan("system-upgrade", dep), dep)
    names = [p.name for p in parts(plan)]
    assert names == ["steps 1-8", "step 9", "steps 10-12"]
    # every unit but the level gates is in exactly one part
    ids = [u for p in parts(plan) for u in (x.id for x in p.units)]
    gates = [u.id for u in plan.units if u.step == "gate"]
    assert sorted(ids + gates) == sorted(u.id for u in plan.units) and len(set(ids)) == len(ids)
    tree = run("plan", "system-upgrade", "-d", str(ROOT / "examples" / "composed.yaml")).output
    top = [line[4:].strip() for line in tree.splitlines() if line.startswith(("├── ", "└── "))]
    assert top == names
    assert f"{len(ids)} units (+{len(gates)} level gates)" in tree.splitlines()[0]
    doc = json.loads(
        run(
            "plan", "system-upgrade", "-d", str(ROOT / "examples" / "composed.yaml"), "--json"
        ).output
    )
    assert [p["name"] for p in doc["parts"]] == names
    section = report_model.plan_section(plan, dep)
    assert [label for _, label, starts in section.boundaries if starts] == names
    # an upgrade's parts are its stages, in the same three places
    classic = load_deployment(ROOT / "examples" / "classic.yaml")
    up = verify_plan(make_plan("upgrade", classic), classic)
    assert [p.name for p in parts(up)][0] == "prepare" and [p.name for p in parts(up)][
        -1
    ] == "converge"
