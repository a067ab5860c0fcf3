"""A cloud with one controller (THT's default roles file: Controller and Compute CountDefault 1)
imports and plans: a service whose availability rule cannot hold with its instances is down
for a planned window, and a run takes those windows only with --accept-downtime."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from stepwise.cli.main import _register, app
from stepwise.errors import InputError
from stepwise.model import load_catalog, load_deployment
from stepwise.model.importing import import_tripleo
from stepwise.model.vocab import Step, Workflow
from stepwise.plan import make_plan, selection_for
from stepwise.run.resume import RunRequest, run_plan
from stepwise.run.store.store import open_store
from stepwise.verify import plan_verified
from stepwise.verify.downtime import downtime_to_accept
from tests.plan.cloud import catalog, deployment, service

ROOT = Path(__file__).resolve().parents[2]
DEFAULT_ROLES = ROOT / "tests" / "fixtures" / "tripleo" / "roles_data_default.yaml"

_register()
runner = CliRunner()


@pytest.fixture(scope="module")
def single(tmp_path_factory) -> Path:
    """THT's default roles file imported (one controller, one compute), written out."""
    imported = import_tripleo(DEFAULT_ROLES, load_catalog())
    path = tmp_path_factory.mktemp("single") / "deployment.yaml"
    path.write_text(yaml.safe_dump(imported.doc, sort_keys=False))
    return path


def test_default_roles_file_imports_with_one_controller_and_one_compute(single):
    dep = load_deployment(single)
    assert [(r.name, len(r.nodes)) for r in dep.roles if r.nodes] == [
        ("Controller", 1),
        ("Compute", 1),
    ]
    forced = dep.forced_downtime
    assert "cannot hold with 1 instance(s)" in forced["nova_api"]
    assert "majority quorum needs at least 3" in forced["rabbitmq"]
    # a rule that allows its one instance down (max_unavailable 10%, at least one) is no force
    assert "nova_compute" not in forced


def test_import_cli_writes_it_and_notes_the_windows(tmp_path):
    out = tmp_path / "dep.yaml"
    r = runner.invoke(app, ["import", "tripleo", "-r", str(DEFAULT_ROLES), "-o", str(out)])
    assert r.exit_code == 0, r.output
    assert out.exists()
    assert "cannot stay available while updated" in r.stderr
    assert "--accept-downtime" in r.stderr


@pytest.mark.parametrize("workflow", [Workflow.UPDATE, Workflow.UPGRADE])
def test_update_and_upgrade_plan_with_windows_naming_the_services(single, workflow):
    dep = load_deployment(single)
    plan = plan_verified(workflow, dep, _no_facts(), selection_for(workflow), runnable=False)
    assert plan.units
    forced = {w.service: w for w in downtime_to_accept(plan, dep)}
    assert {"keystone", "rabbitmq", "galera"} <= set(forced)
    # each window says why: the batch that stops it and the rule that cannot hold
    assert "cannot hold with 1 instance(s)" in forced["keystone"].why
    assert forced["keystone"].end_s > forced["keystone"].start_s
    # the windows end: every service serves again by the end of the plan
    assert all(w.end_s != float("inf") for w in plan.windows)


def test_plan_output_shows_the_windows_and_the_flag(single):
    r = runner.invoke(app, ["plan", "update", "-d", str(single)])
    assert r.exit_code == 0, r.output
    assert "Downtime windows" in r.output and "nova_api" in r.output
    assert "--accept-downtime" in r.output
    r = runner.invoke(app, ["plan", "update", "-d", str(single), "--json"])
    windows = {w["service"] for w in json.loads(r.output)["windows"]}
    assert {"nova_api", "keystone"} <= windows


def test_run_without_accept_downtime_is_refused_naming_the_flag(single, tmp_path):
    store = tmp_path / "store.db"
    r = runner.invoke(
        app, ["update", "run", "-d", str(single), "--store", f"sqlite:///{store}", "--yes"]
    )
    assert r.exit_code == 2, r.output
    assert "--accept-downtime" in r.stderr and "downtime window(s)" in r.stderr
    assert "aodh_api" in r.stderr  # the services it takes down, named (first ones)
    assert "Traceback" not in r.output + r.stderr
    assert not store.exists(), "refused before anything is created"


def test_run_layer_refuses_too_before_anything_is_recorded(single, tmp_path):
    dep = load_deployment(single)
    store = open_store(f"sqlite:///{tmp_path / 'store.db'}")
    req = RunRequest(
        store=store,
        deployment=dep,
        workflow=Workflow.UPDATE,
        selection=selection_for(Workflow.UPDATE),
        lock_path=tmp_path / "lock",
    )
    with pytest.raises(InputError) as exc:
        run_plan(req)
    assert exc.value.problems[0].field == "--accept-downtime"
    assert store.runs(dep.name, 5) == []


def test_multi_controller_cloud_needs_no_flag():
    dep = load_deployment(ROOT / "examples" / "classic.yaml")
    assert not dep.forced_downtime
    plan = plan_verified(
        Workflow.UPDATE, dep, _no_facts(), selection_for(Workflow.UPDATE), runnable=False
    )
    assert not downtime_to_accept(plan, dep)


def test_quorum_of_two_is_down_from_its_first_member_down():
    """Two members of a majority quorum: one down already loses the majority, so the window
    opens at the first stop, not only when both are down."""
    cat = catalog(service("db", "infra", rule={"quorum": "majority"}, cluster="galera"))
    dep = deployment(
        cat,
        [{"name": "Db", "services": ["db"], "nodes": {"count": 2, "name": "db-{index}"}}],
    )
    assert "cannot hold with 2 instance(s)" in dep.forced_downtime["db"]
    plan = plan_verified(
        Workflow.UPDATE, dep, _no_facts(), selection_for(Workflow.UPDATE), runnable=False
    )
    windows = [w for w in plan.windows if w.service == "db"]
    # one node at a time (update_serial 1 and the allowance of one): a window per member
    assert len(windows) == 2
    assert all("quorum" in w.why for w in windows)
    assert downtime_to_accept(plan, dep) == windows


def _no_facts():
    from stepwise.model import NO_FACTS

    return NO_FACTS


def test_a_lone_database_member_keeps_its_datadir_through_a_reprovision(single):
    """A controller that is Galera's only member has no other member to copy the data from
    in the OS upgrade: its prepare persists the catalog's `data:` with the rest (the render
    adds it to the archive in reprovision mode), and step 6 starts on the data it kept."""
    from stepwise.model.vocab import Step
    from stepwise.plan import make_plan
    from stepwise.plan.os_first_wave import LONE_DATA_VAR
    from stepwise.run.node_work import PERSIST_PATHS

    dep = load_deployment(single)
    plan = make_plan(Workflow.SYSTEM_UPGRADE, dep)
    prepare = [u for u in plan.units if u.step is Step.SYSTEM_UPGRADE_PREPARE]
    lone = [u for u in prepare if u.vars.get(LONE_DATA_VAR)]
    ctl = "overcloud-controller-0"
    assert [dict(u.vars[LONE_DATA_VAR]) for u in lone] == [{ctl: ["var/lib/mysql"]}]
    assert f"{ctl} alone holds /var/lib/mysql: a reprovision keeps it" in lone[0].why
    assert not [u for u in plan.units if u.step is Step.SYSTEM_UPGRADE_TRANSFER_DATA]
    whys = " ".join(u.why for u in plan.units)
    assert "on the data the node kept" in whys and "transferred data" not in whys
    # the compute holds no data of its own: nothing more is persisted there
    assert all(not u.vars.get(LONE_DATA_VAR) for u in prepare if "controller" not in u.nodes[0])
    assert LONE_DATA_VAR in PERSIST_PATHS


def test_a_database_with_other_members_persists_no_datadir():
    """Three controllers: the first new-OS one gets the data by the transfer (step 5)."""
    from stepwise.model.vocab import Step
    from stepwise.plan import make_plan
    from stepwise.plan.os_first_wave import LONE_DATA_VAR

    dep = load_deployment(ROOT / "examples" / "classic.yaml")
    plan = make_plan(Workflow.SYSTEM_UPGRADE, dep)
    assert not [u for u in plan.units if u.vars.get(LONE_DATA_VAR)]
    assert [u for u in plan.units if u.step is Step.SYSTEM_UPGRADE_TRANSFER_DATA]
    assert "on the transferred data" in " ".join(u.why for u in plan.units)


@pytest.mark.parametrize("path", ["var/lib/mysql", "/var/../etc", "/var/lib/my sql", "/"])
def test_a_catalog_data_path_is_absolute_and_plain(tmp_path, path):
    entry = yaml.safe_load((ROOT / "stepwise" / "content" / "catalog" / "galera.yaml").read_text())
    entry["data"] = [path]
    (tmp_path / "galera.yaml").write_text(yaml.safe_dump(entry))
    with pytest.raises(InputError) as err:
        load_catalog(tmp_path)
    assert "data" in str(err.value)


def _leaving(plan, node: str) -> set[str]:
    return {s for u in plan.units if u.step is Step.LEAVE for s in u.services_on(node)}


def test_a_lone_controllers_infrastructure_stays_in_place_while_its_apis_drain():
    """One controller: pacemaker's standby and galera's drain would move their traffic nowhere
    and hold the VIPs (the database behind one) away from the node's own services until the
    rejoin, after every start: nova-api, opening its database as it starts, would wait out its
    start timeout. Its APIs still leave HAProxy first; three controllers keep every leave."""
    one = load_deployment(ROOT / "examples" / "openstack-nova.yaml")
    plan = make_plan(Workflow.UPDATE, one)
    left = _leaving(plan, "controller-0")
    assert {"keystone", "nova_api", "placement_api"} <= left
    assert not left & {"pacemaker", "haproxy", "galera"}
    stopped = {s for u in plan.units if u.step is Step.STOP for s in u.services_on("controller-0")}
    assert {"pacemaker", "haproxy", "galera"} <= stopped  # they still restart, in place
    three = load_deployment(ROOT / "examples" / "openstack.yaml")
    plan = make_plan(Workflow.UPDATE, three)
    for n in ("controller-0", "controller-1", "controller-2"):
        assert {"pacemaker", "haproxy", "galera", "keystone"} <= _leaving(plan, n), n
