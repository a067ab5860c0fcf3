"""Issue #19, the store as input: everything read back from it is validated like a file (a
tampered value is exit 2 naming table, column and row, never exit 70), and a store that is
refused is untouched: no chmod before stepwise knows the file is its own, never through a
link, never in a read-only command."""

from __future__ import annotations

import hashlib
import shutil
import sqlite3
import stat
from pathlib import Path

import pytest

from tests.security.helpers import cli, no_traceback, write_cloud


def _digest(p: Path) -> str:
    return hashlib.sha256(p.read_bytes()).hexdigest()


@pytest.fixture(scope="module")
def template(tmp_path_factory) -> Path:
    """A cloud with a store holding one recorded run (units, a failed task, probe samples),
    services and facts, as a lab run would leave it."""
    from datetime import timedelta

    from stepwise.model import load_deployment
    from stepwise.plan import make_plan
    from stepwise.run.store.models import UnitRow
    from stepwise.run.store.store import RunOrigin, open_store
    from stepwise.verify import verify_plan

    root = tmp_path_factory.mktemp("stored")
    dep = load_deployment(write_cloud(root, computes=2))
    plan = verify_plan(make_plan("update", dep), dep)
    st = open_store(f"sqlite:///{root / '.stepwise' / 'testcloud.sqlite'}")
    rid = st.create_run(
        dep.name,
        "update",
        "k",
        RunOrigin("stepwise update run", user="ops", host="bastion"),
        {"limit": None},
        plan.to_json(),
        [u.to_json() for u in plan.units],
    )
    t0 = st.run(rid).started_at
    with st.session() as s:
        for i, u in enumerate(plan.units):
            row = s.get(UnitRow, (rid, u.id))
            row.started_at, row.ended_at, row.state = (
                t0 + timedelta(seconds=i),
                t0 + timedelta(seconds=i + 1),
                "done",
            )
    st.add_task_results(
        [
            {
                "run_id": rid,
                "unit_id": plan.units[1].id,
                "host": "cmp-0",
                "task": "t",
                "status": "failed",
                "message": "m",
                "at": t0,
            }
        ]
    )
    st.add_probe_samples(
        rid, [{"target": "vip:api", "t": 1.0, "requests": 5, "failed": 0, "max_ms": 1.0}]
    )
    st.set_services(dep.name, [("ctl-0", "api")], version="1.0", state="running", run_id=rid)
    st.save_facts(
        dep.name,
        {
            "nodes": {
                "ctl-0": {
                    "os": {"major": 8},
                    "packages": {"openstack-api": {"installed": "1.0", "available": "1.1"}},
                }
            }
        },
    )
    st.finish_run(rid, "failed", "unit failed")
    st.close()
    return root


@pytest.fixture
def cloud(template: Path, tmp_path: Path) -> Path:
    root = tmp_path / "c"
    shutil.copytree(template, root, symlinks=True)
    text = (root / "deployment.yaml").read_text().replace(str(template), str(root))
    (root / "deployment.yaml").write_text(text)
    return root


READERS = [
    ["history"],
    ["history", "--json"],
    ["history", "--run", "1"],
    ["status", "--json"],
    ["status"],
    ["report", "-o", "REPORT"],
    ["plan", "update"],
    ["plan", "update", "--json"],
]
TAMPERED = {
    "plan not JSON": "UPDATE runs SET plan = 'not json {'",
    "plan a list": "UPDATE runs SET plan = '[1, 2]'",
    "plan unit unknown step": "UPDATE runs SET plan = json_set(plan, '$.units[0].step', 'rm -rf')",
    "plan duration infinite": "UPDATE runs SET plan = "
    "json_set(plan, '$.units[0].duration_s', 9e999)",
    "plan units not a list": "UPDATE runs SET plan = json_set(plan, '$.units', 'x')",
    "bad timestamp": "UPDATE runs SET started_at = 'yesterday'",
    "timestamp a number": "UPDATE units SET ended_at = 12",
    "unit unknown step": "UPDATE units SET step = 'nosuchstep' WHERE seq = 0",
    "unit state": "UPDATE units SET state = 'weird' WHERE seq = 1",
    "nodes not a list": "UPDATE units SET nodes = '\"ctl-0\"'",
    "nodes of numbers": "UPDATE units SET nodes = '[1, 2]'",
    "params a list": "UPDATE runs SET params = '[1, 2]'",
    "params not JSON": "UPDATE runs SET params = '{'",
    "probe t text": "UPDATE probe_samples SET t = 'abc'",
    "probe requests float": "UPDATE probe_samples SET requests = 1.5",
    "task status": "UPDATE task_results SET status = 42",
    "attempts text": "UPDATE runs SET attempts = 'many'",
    "facts over limits": "UPDATE node_packages SET available = printf('%.500c', 'x')",
    "facts os major text": "UPDATE node_os SET major = 'eight'",
    "facts unknown node name": "UPDATE node_os SET node = '../../x'",
    "marker state": "INSERT INTO markers VALUES "
    "('testcloud', 'progress:x', 1, 'u', 'weird', '2024-01-01 00:00:00')",
    "service version long": "UPDATE node_services SET version = printf('%.900c', 'v')",
}

#: tampering that every reader survives as it is (facts of a node the deployment does not
#: have are left out of plans; status prints the name, a long version, as text)
HARMLESS = {"facts unknown node name", "service version long"}


@pytest.mark.parametrize("case", list(TAMPERED))
def test_a_tampered_store_is_a_clear_error_for_every_reader(cloud: Path, case: str):
    store = cloud / ".stepwise" / "testcloud.sqlite"
    db = sqlite3.connect(store)
    db.execute(TAMPERED[case])
    db.commit()
    db.close()
    before = _digest(store)
    refused = 0
    for args in READERS:
        args = [str(cloud / "r.html") if a == "REPORT" else a for a in args]
        r = cli(*args, "-d", cloud / "deployment.yaml")
        assert r.code in (0, 2) and no_traceback(r.text), (case, args, r.text[-2000:])
        if r.code == 2:
            refused += 1
            assert "damaged" in r.text or "not valid" in r.text or "store:" in r.text, (
                case,
                args,
                r.text,
            )
    assert refused or case in HARMLESS, f"{case}: no reader noticed"
    assert _digest(store) == before


def test_a_read_only_command_never_changes_a_store_mode(cloud: Path, tmp_path: Path):
    store = cloud / ".stepwise" / "testcloud.sqlite"
    store.chmod(0o644)
    for args in (["status"], ["history"], ["plan", "update"]):
        assert cli(*args, "-d", cloud / "deployment.yaml").code == 0
    assert stat.S_IMODE(store.stat().st_mode) == 0o644


def test_a_store_link_to_a_foreign_file_is_refused_untouched(tmp_path: Path):
    foreign = tmp_path / "accounts.db"
    db = sqlite3.connect(foreign)
    db.execute("CREATE TABLE accounts (id INTEGER)")
    db.commit()
    db.close()
    foreign.chmod(0o644)
    link = tmp_path / "link.sqlite"
    link.symlink_to(foreign)
    before = (_digest(foreign), stat.S_IMODE(foreign.stat().st_mode))
    dep = write_cloud(tmp_path / "c", computes=1)
    for args in (
        ["status"],
        ["history"],
        ["plan", "update"],
        ["update", "run", "--lab", tmp_path / "no-lab"],
    ):
        r = cli(*args, "-d", dep, "--store", f"sqlite:///{link}")
        assert r.code == 2 and no_traceback(r.text) and "not a stepwise state store" in r.text, (
            args,
            r.text,
        )
    assert (_digest(foreign), stat.S_IMODE(foreign.stat().st_mode)) == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["accounts.db", "c", "link.sqlite"]


def test_a_store_of_ours_is_made_private_only_by_a_writing_command(tmp_path: Path):
    from stepwise.run.store.store import open_store

    f = tmp_path / "s.sqlite"
    open_store(f"sqlite:///{f}").close()
    f.chmod(0o644)
    open_store(f"sqlite:///{f}", create=False).close()
    assert stat.S_IMODE(f.stat().st_mode) == 0o644
    open_store(f"sqlite:///{f}").close()
    assert stat.S_IMODE(f.stat().st_mode) == 0o600


def test_a_stored_plan_is_validated_by_the_plan_model():
    from stepwise.errors import InputError
    from stepwise.plan.units import Plan

    for doc in (
        {},
        [],
        {"workflow": "update", "units": [{"id": "u", "step": "packages", "nodes": "ctl-0"}]},
        {"workflow": "update", "units": [], "estimate": {"duration_s": float("inf")}},
        {"workflow": "update", "units": [], "windows": [{"service": "s", "start_s": "x"}]},
    ):
        with pytest.raises(InputError):
            Plan.from_json(doc)
