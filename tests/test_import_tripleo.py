"""A TripleO cloud as it is: roles files and inventories imported, validated and planned."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from stepwise.cli.main import _register, app
from stepwise.errors import InputError, UnsafePlanError
from stepwise.model import load_catalog, load_deployment
from stepwise.model.importing import import_inventory, import_tripleo
from stepwise.plan import make_plan
from stepwise.verify import verify_plan

FIX = Path(__file__).resolve().parent / "fixtures" / "tripleo"
COMPOSED = FIX / "roles_data_composed.yaml"
CLASSIC = FIX / "roles_data_classic.yaml"
HCI = FIX / "roles_data_hci.yaml"
UNDERCLOUD = FIX / "roles_data_undercloud.yaml"
INVENTORY = FIX / "tripleo-ansible-inventory.yaml"
#: the THT roles the built-in catalog covers, and the fixture holding each one's ServicesDefault
COVERED_ROLES = {
    "Controller": CLASSIC,
    "ControllerOpenstack": COMPOSED,
    "Database": COMPOSED,
    "Messaging": COMPOSED,
    "Networker": COMPOSED,
    "Compute": CLASSIC,
    "ComputeHCI": HCI,
    "CephStorage": CLASSIC,
    "Undercloud": UNDERCLOUD,
}

_register()
runner = CliRunner()


@pytest.fixture(scope="module")
def catalog():
    return load_catalog()


def run(*args: str):
    return runner.invoke(app, list(args))


def written(result, tmp_path: Path, name: str = "deployment.yaml") -> Path:
    path = tmp_path / name
    path.write_text(yaml.safe_dump(result.doc, sort_keys=False))
    return path


def tht_services(role: str) -> list[str]:
    (spec,) = [r for r in yaml.safe_load(COVERED_ROLES[role].read_text()) if r["name"] == role]
    return spec["ServicesDefault"]


# ------------------------------------------------------------------------------ coverage


@pytest.mark.parametrize("role", sorted(COVERED_ROLES))
def test_every_service_of_the_covered_roles_resolves(catalog, role):
    names = tht_services(role)
    assert len(names) > 20
    unresolved = [n for n in names if catalog.resolve(n) is None]
    assert unresolved == []


def test_services_that_run_have_their_upgrade_behaviour(catalog):
    # the entries the issue names, with what upstream does to them in an upgrade
    for name in (
        "placement_api",
        "nova_metadata",
        "nova_vnc_proxy",
        "nova_libvirt",
        "neutron_metadata_agent",
        "neutron_dhcp_agent",
        "ovn_dbs",
        "ovn_controller",
        "ovn_metadata_agent",
        "horizon",
        "redis",
        "octavia_api",
        "manila_api",
        "barbican_api",
        "designate_central",
        "heat_engine",
        "aodh_api",
        "gnocchi_api",
        "ceilometer_agent_central",
        "cinder_backup",
        "swift_storage",
        "ceph_mgr",
        "ceph_rgw",
        "ceph_mds",
        "iscsid",
        "multipathd",
    ):
        assert catalog[name].has_runtime and catalog[name].packages, name
    assert catalog["placement_api"].schema == "expand_contract"
    for owner in (
        "manila_api",
        "barbican_api",
        "octavia_api",
        "designate_central",
        "aodh_api",
        "gnocchi_api",
    ):
        assert catalog[owner].schema == "offline" and catalog[owner].has_step(
            "upgrade", "migrate"
        ), owner
    assert catalog["ovn_dbs"].cluster == "ovn-dbs" and catalog["ovn_controller"].depends_on == (
        "ovn_dbs",
    )
    assert all(
        catalog[s].plane == "data"
        for s in ("ovn_controller", "nova_libvirt", "neutron_metadata_agent")
    )
    assert catalog["ceph_mgr"].external and "ceph_mon" in catalog["ceph_mgr"].depends_on
    for name in ("timezone", "kernel", "sshd", "tuned", "ca_certs", "tripleo_packages"):
        assert not catalog[name].has_runtime, name
    assert catalog.resolve("OS::TripleO::Services::Keystone") == "keystone"
    assert catalog.resolve("OS::TripleO::Services::OsloMessagingNotify") == "rabbitmq"


# ------------------------------------------------------------------------------ tripleo import


def test_composed_layout_imports_as_the_seed_describes_it(catalog):
    imp = import_tripleo(COMPOSED, catalog, stack="overcloud")
    dep = imp.deployment
    assert [r.name for r in dep.roles] == [
        "ControllerOpenstack",
        "Database",
        "Messaging",
        "Networker",
        "Compute",
        "CephStorage",
    ]
    assert {r.name: len(r.nodes) for r in dep.roles} == {
        "ControllerOpenstack": 3,
        "Database": 3,
        "Messaging": 3,
        "Networker": 2,
        "Compute": 2,
        "CephStorage": 3,
    }
    # primary/controller -> controlplane; Database and Messaging run only infra/control services
    assert [r.name for r in dep.roles if r.is_controlplane] == [
        "ControllerOpenstack",
        "Database",
        "Messaging",
    ]
    assert [n.name for n in dep.role_by_name["ControllerOpenstack"].nodes] == [
        "overcloud-controller-0",
        "overcloud-controller-1",
        "overcloud-controller-2",
    ]
    assert dep.role_by_name["Compute"].nodes[1].name == "overcloud-novacompute-1"
    assert dep.role_by_name["Compute"].update_serial == 25
    assert [n.name for n in dep.instances["galera"]] == [
        "overcloud-database-0",
        "overcloud-database-1",
        "overcloud-database-2",
    ]
    assert len(dep.instances["pacemaker"]) == 9
    assert "timezone" in dep.role_by_name["Compute"].declared and "timezone" not in dep.instances
    assert "rabbitmq" in dep.role_by_name["Messaging"].services


def test_stack_name_and_counts_shape_the_host_names(catalog):
    imp = import_tripleo(CLASSIC, catalog, stack="prod", counts={"Compute": 4})
    assert [n.name for n in imp.deployment.role_by_name["Compute"].nodes][
        -1
    ] == "prod-novacompute-3"
    assert imp.doc["roles"][0]["nodes"] == {"count": 3, "name": "prod-controller-{index}"}


def test_inventory_gives_the_real_hosts_and_addresses(catalog):
    dep = import_tripleo(COMPOSED, catalog, inventory=INVENTORY).deployment
    db = dep.role_by_name["Database"]
    assert [(n.name, n.address) for n in db.nodes] == [
        ("overcloud-database-0", "192.168.24.20"),
        ("overcloud-database-1", "192.168.24.21"),
        ("overcloud-database-2", "192.168.24.22"),
    ]
    assert len(dep.nodes) == 16  # the inventory's Undercloud group is no role of this roles file


@pytest.mark.parametrize("roles_file", [COMPOSED, CLASSIC, HCI])
def test_imported_clouds_validate_and_plan_every_workflow(catalog, tmp_path, roles_file):
    imp = import_tripleo(roles_file, catalog)
    dep = load_deployment(
        written(imp, tmp_path), catalog
    )  # what was written loads as it was checked
    assert [r.services for r in dep.roles] == [r.services for r in imp.deployment.roles]
    running = set(dep.instances)
    config_only = {s for r in dep.roles for s in r.declared} - running
    assert config_only and not {s for s in config_only if dep.catalog[s].has_runtime}
    for wf in ("update", "upgrade", "system-upgrade"):
        plan = verify_plan(make_plan(wf, dep), dep)
        touched = {s for u in plan.units for n in u.nodes for s in u.services_on(n)}
        assert touched and not touched & config_only, (
            wf
        )  # runtime: none is never stopped or started
    # the OS upgrade names one node per command: planned, or refused with what to run first
    node = dep.nodes[-1].name
    try:
        verify_plan(make_plan("system-upgrade", dep, limit=node), dep)
    except (InputError, UnsafePlanError) as refused:
        assert "first" in str(refused) or "--limit" in str(refused)


def test_management_node_imports_and_plans_its_upgrade(catalog, tmp_path):
    imp = import_tripleo(UNDERCLOUD, catalog)
    (role,) = imp.deployment.roles
    assert role.is_management and not role.is_controlplane
    dep = load_deployment(written(imp, tmp_path), catalog)
    plan = verify_plan(make_plan("undercloud-upgrade", dep), dep)
    assert plan.units


def test_unknown_tht_service_is_named_with_file_line_and_closest_alias(catalog, tmp_path):
    f = tmp_path / "roles_data.yaml"
    f.write_text(
        "- name: Controller\n  CountDefault: 3\n  ServicesDefault:\n"
        "    - OS::TripleO::Services::Keystone\n    - OS::TripleO::Services::Keystonee\n"
    )
    with pytest.raises(InputError) as exc:
        import_tripleo(f, catalog, strict=True)
    (p,) = exc.value.problems
    assert (p.file, p.line) == (str(f), 5)
    assert "unknown service 'OS::TripleO::Services::Keystonee'" in p.message
    assert "OS::TripleO::Services::Keystone" in p.hint


@pytest.mark.parametrize(
    "text, message",
    [
        ("name: Controller\n", "a roles file is a list of roles"),
        ("- name: Controller\n  CountDefault: many\n", "CountDefault must be a number"),
        (
            "- name: Controller\n  HostnameFormatDefault: '-%index%'\n  CountDefault: 1\n",
            "not a valid node name",
        ),
        ("- {name: [x]}\n", "a role must be a mapping with a 'name'"),
    ],
)
def test_bad_roles_files_are_clear_errors(tmp_path, text, message):
    f = tmp_path / "roles_data.yaml"
    f.write_text(text)
    r = run("import", "tripleo", "-r", str(f), "-o", str(tmp_path / "out.yaml"))
    assert r.exit_code == 2, r.output
    assert message in r.stderr and "Traceback" not in r.output + r.stderr
    assert not (tmp_path / "out.yaml").exists()


def test_import_command_writes_a_deployment_that_validates_and_plans(tmp_path):
    out = tmp_path / "deployment.yaml"
    r = run(
        "import",
        "tripleo",
        "--roles-data",
        str(COMPOSED),
        "--inventory",
        str(INVENTORY),
        "--stack",
        "overcloud",
        "-o",
        str(out),
    )
    assert r.exit_code == 0, r.output
    assert "6 role(s), 16 node(s)" in r.stdout
    r = run("validate", "-d", str(out), "--json")
    assert r.exit_code == 0 and json.loads(r.stdout)["nodes"] == 16
    r = run("plan", "update", "-d", str(out), "--json")
    assert r.exit_code == 0, r.output


# --------------------------------------------------------------------------- aliases in deployments


def test_a_deployment_may_name_services_by_their_tht_names(tmp_path):
    f = tmp_path / "d.yaml"
    f.write_text(
        "name: x\nroles:\n  - name: A\n    services:\n      - OS::TripleO::Services::Keystone\n"
        "      - OS::TripleO::Services::Timezone\n      - memcached\n"
        "    nodes: [{name: a-0}, {name: a-1}]\n"
    )
    dep = load_deployment(f)
    assert dep.roles[0].services == ("keystone", "memcached")
    assert dep.roles[0].declared == ("keystone", "timezone", "memcached")
    f.write_text(
        "name: x\nroles:\n  - name: A\n    services:\n      - OS::TripleO::Services::Keystonne\n"
        "    nodes: [{name: a-0}]\n"
    )
    with pytest.raises(InputError) as exc:
        load_deployment(f)
    (p,) = exc.value.problems
    assert (p.line, p.field) == (
        5,
        "roles[0].services[0]",
    ) and "OS::TripleO::Services::Keystone" in p.hint


def test_catalog_refuses_an_alias_of_two_services_and_tasks_on_runtime_none(tmp_path):
    d = tmp_path / "cat"
    d.mkdir()
    (d / "a.yaml").write_text("name: a\nplane: infra\nruntime: none\naliases: [X]\n")
    (d / "b.yaml").write_text("name: b\nplane: infra\nruntime: none\naliases: [X]\n")
    with pytest.raises(InputError, match="alias 'X' is also an alias of service 'a'"):
        load_catalog(d)
    (d / "b.yaml").write_text("name: b\nplane: infra\nruntime: none\npackages: [b]\n")
    with pytest.raises(InputError, match="nothing to stop or change; remove: packages"):
        load_catalog(d)


# ------------------------------------------------------------------------------ catalog list


def test_catalog_list_shows_aliases_plane_and_runtime():
    r = run("catalog", "list", "--json")
    assert r.exit_code == 0, r.output
    rows = {s["name"]: s for s in json.loads(r.stdout)["services"]}
    assert rows["keystone"]["aliases"] == ["OS::TripleO::Services::Keystone"]
    assert rows["keystone"]["runtime"] is True and rows["keystone"]["plane"] == "control"
    assert rows["timezone"]["runtime"] is False
    r = run("catalog", "list")
    assert r.exit_code == 0 and "OS::TripleO::Services::NovaLibvirt" in r.stdout


# ------------------------------------------------------------------------------ plain inventories


def test_ini_inventory_imports_groups_as_roles(tmp_path):
    inv = tmp_path / "hosts.ini"
    inv.write_text(
        "[controllers]\nctl-[0:2] ansible_host=10.0.0.1\n\n[controllers:vars]\n"
        "stepwise_services=pacemaker,haproxy,galera,rabbitmq,keystone,memcached\n\n"
        "[computes]\ncmp-0 ansible_host=10.0.1.10\ncmp-1 ansible_host=10.0.1.11\n\n"
        "[cloud:children]\ncontrollers\ncomputes\n"
    )
    imp = import_inventory(
        inv,
        load_catalog(),
        name="lab",
        services={"computes": ["nova_compute", "OS::TripleO::Services::NeutronOvsAgent"]},
    )
    dep = imp.deployment
    assert [r.name for r in dep.roles] == ["controllers", "computes"]
    assert [n.name for n in dep.role_by_name["controllers"].nodes] == ["ctl-0", "ctl-1", "ctl-2"]
    assert (
        dep.role_by_name["controllers"].is_controlplane
        and not dep.role_by_name["computes"].is_controlplane
    )
    assert dep.role_by_name["computes"].services == ("nova_compute", "neutron_ovs_agent")
    verify_plan(make_plan("update", dep), dep)


@pytest.mark.parametrize(
    "text, message",
    [
        ("[web\nhost-0\n", "is not a group header"),
        ("[web]\nhost-0\n", "group 'web' has hosts but no services"),
        ("#!/usr/bin/env python\nprint('{}')\n", "dynamic inventory script is not read"),
        (
            "[web]\nhost-0 ansible_host=10.0.0.999\n[web:vars]\nstepwise_services=memcached\n",
            "not an IP address",
        ),
    ],
)
def test_bad_inventories_are_clear_errors(tmp_path, text, message):
    inv = tmp_path / "inv"
    inv.write_text(text)
    r = run("import", "inventory", str(inv), "-o", "-")
    assert r.exit_code == 2, r.output
    assert message in r.stderr and "Traceback" not in r.output + r.stderr


def test_yaml_inventory_with_services_on_the_command_line(tmp_path):
    out = tmp_path / "d.yaml"
    r = run(
        "import",
        "inventory",
        str(INVENTORY),
        "--name",
        "ovc",
        "-o",
        str(out),
        "--services",
        "Undercloud=keystone,galera,rabbitmq",
        *[
            a
            for g in (
                "ControllerOpenstack",
                "Database",
                "Messaging",
                "Networker",
                "Compute",
                "CephStorage",
            )
            for a in ("--services", f"{g}=memcached")
        ],
    )
    assert r.exit_code == 0, r.output
    dep = load_deployment(out)
    assert dep.role_by_name["Database"].nodes[0].address == "192.168.24.20"


# ------------------------------------------------------------------------------ environment files

DISABLED = FIX / "default-services-disabled.yaml"


def test_environment_files_leave_out_what_the_resource_registry_disables(catalog, tmp_path):
    full = import_tripleo(COMPOSED, catalog).deployment
    imp = import_tripleo(COMPOSED, catalog, environments=[DISABLED])
    dep = imp.deployment
    assert (
        "ceph_osd" in full.instances and "ceph_osd" not in dep.instances
    )  # CephOSD: OS::Heat::None
    assert {"galera", "rabbitmq", "keystone", "nova_compute", "ovn_controller"} <= set(
        dep.instances
    )
    assert len(dep.instances) < len(full.instances)
    assert any("OS::Heat::None left out" in n for n in imp.notes)
    # a later file enables a service again, as `openstack overcloud deploy -e a -e b` does
    enable = tmp_path / "ceph.yaml"
    enable.write_text(
        "resource_registry:\n  OS::TripleO::Services::CephOSD: deployment/cephadm/ceph-osd.yaml\n"
    )
    assert (
        "ceph_osd"
        in import_tripleo(COMPOSED, catalog, environments=[DISABLED, enable]).deployment.instances
    )
    for wf in ("update", "upgrade", "system-upgrade"):
        verify_plan(make_plan(wf, dep), dep)


def test_unknown_service_after_a_disabled_one_keeps_its_line(catalog, tmp_path):
    f = tmp_path / "roles_data.yaml"
    f.write_text(
        "- name: Controller\n  CountDefault: 3\n  ServicesDefault:\n"
        "    - OS::TripleO::Services::Aide\n    - OS::TripleO::Services::Nope\n"
    )
    with pytest.raises(InputError) as exc:
        import_tripleo(f, catalog, environments=[DISABLED], strict=True)
    assert exc.value.problems[0].line == 5


def test_a_role_left_with_no_service_of_its_own_is_not_control_plane_and_is_told(catalog):
    imp = import_tripleo(FIX / "roles_data_classic.yaml", catalog, environments=[DISABLED])
    roles = {r.name: r for r in imp.deployment.roles}
    assert "controlplane" not in roles["CephStorage"].tags
    assert any(
        n.startswith("CephStorage: no service of its own is left running") for n in imp.notes
    )
    assert "controlplane" in roles["Controller"].tags  # THT's own tag, and its services
    # without the environment CephStorage keeps its OSDs: a data-plane role, nothing to tell
    full = import_tripleo(FIX / "roles_data_classic.yaml", catalog)
    assert not any("no service of its own" in n for n in full.notes)


def test_a_list_of_hosts_or_groups_holding_a_mapping_is_a_located_problem(tmp_path):
    """Older inventories list hosts and children by name; a list holding anything else is
    bad input said with its line, not a crash."""
    from stepwise.model.inventory import load_inventory

    cases = {
        "hosts.yaml": ("all:\n  children:\n    Controller:\n      hosts:\n        - {a: 1}\n", 4),
        "children.yaml": ("all:\n  children:\n    - {a: 1}\n", 2),
        "nested.yaml": ("all:\n  children:\n    C:\n      hosts: [[c-0]]\n", 4),
    }
    for name, (text, line) in cases.items():
        f = tmp_path / name
        f.write_text(text)
        with pytest.raises(InputError) as info:
            load_inventory(f)
        (p,) = info.value.problems
        assert p.line == line and "must be a mapping" in p.message, (name, p)
    ok = tmp_path / "names.yaml"
    ok.write_text("all:\n  children:\n    C:\n      hosts: [c-0, c-1]\n")
    assert [h.name for h in load_inventory(ok).groups["C"].hosts] == ["c-0", "c-1"]
