"""Inventories as Ansible reads them, Kolla-Ansible's and OpenStack-Ansible's own files
(issue 37 items 3, 4, 5): children of children, variables at every level kept through import
and export, a role the inventory lacks refused, kolla's `multinode` and `all-in-one` and an
OpenStack-Ansible openstack_user_config imported and planned."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from stepwise.cli.main import _register, app
from stepwise.errors import InputError
from stepwise.model import load_catalog, load_deployment
from stepwise.model.import_kolla import import_kolla
from stepwise.model.import_osa import import_openstack_ansible
from stepwise.model.importing import import_tripleo
from stepwise.plan import make_plan
from stepwise.verify import verify_plan

FIX = Path(__file__).resolve().parent / "fixtures"
MASTER = FIX / "real" / "tht-master-roles_data.yaml"
COMPOSED = FIX / "tripleo" / "roles_data_composed.yaml"
TRIPLEO_INVENTORY = FIX / "tripleo" / "tripleo-ansible-inventory.yaml"
MULTINODE = FIX / "real" / "kolla-multinode"
ALL_IN_ONE = FIX / "real" / "kolla-all-in-one"
OSA = FIX / "real" / "osa-openstack_user_config.prod.yml"
OSA_GENERATED = FIX / "real" / "osa-openstack_inventory.prod.json"

_register()
runner = CliRunner()

MULTI_STACK = """\
overcloud:
  children:
    Controller: {}
    Compute: {}
  vars:
    ansible_ssh_user: tripleo-admin
Controller:
  hosts:
    overcloud-controller-0: {ansible_host: 192.168.24.10}
Compute:
  children:
    cell1_Compute: {}
cell1:
  children:
    cell1_Compute: {}
cell1_Compute:
  hosts:
    cell1-compute-0: {ansible_host: 192.168.24.50}
    cell1-compute-1: {ansible_host: 192.168.24.51, ansible_port: 2222}
  vars:
    ansible_ssh_user: cell-admin
Undercloud:
  hosts:
    undercloud: {ansible_host: localhost, ansible_connection: local}
"""


class _Unsafe(yaml.SafeLoader):
    """Reads an exported inventory: `!unsafe 'text'` is the text."""


_Unsafe.add_constructor("!unsafe", lambda loader, node: loader.construct_scalar(node))


@pytest.fixture(scope="module")
def catalog():
    return load_catalog()


def _written(imp, tmp_path: Path) -> Path:
    path = tmp_path / "cloud.yaml"
    path.write_text(yaml.safe_dump(imp.doc, sort_keys=False))
    return path


def _planned(path: Path, workflows=("update", "upgrade", "system-upgrade")):
    dep = load_deployment(path)
    for wf in workflows:
        assert verify_plan(make_plan(wf, dep), dep).units, wf
    return dep


def _exported_hosts(deployment: Path, out: Path, *extra: str) -> dict:
    r = runner.invoke(app, ["export", "update", "-d", str(deployment), "-o", str(out), *extra])
    assert r.exit_code == 0, r.output
    inv = yaml.load((out / "inventory.yml").read_text(), Loader=_Unsafe)  # noqa: S506
    return {h: v for g in inv["all"]["children"].values() for h, v in g["hosts"].items()}


# ------------------------------------------------------------------ item 3: inventories


def test_a_multi_stack_inventory_gives_every_stack_its_hosts(catalog, tmp_path):
    inv = tmp_path / "inventory.yaml"
    inv.write_text(MULTI_STACK)
    imp = import_tripleo(MASTER, catalog, inventory=inv)
    dep = imp.deployment
    compute = dep.role_by_name["Compute"]
    # the cell's hosts, through Compute's child (CountDefault's invented node before)
    assert [(n.name, n.address) for n in compute.nodes] == [
        ("cell1-compute-0", "192.168.24.50"),
        ("cell1-compute-1", "192.168.24.51"),
    ]
    # the deepest group's variable wins, as in Ansible; the host's own on top
    assert dict(compute.nodes[0].vars) == {"ansible_ssh_user": "cell-admin"}
    assert dict(compute.nodes[1].vars) == {"ansible_ssh_user": "cell-admin", "ansible_port": 2222}
    controller = dep.role_by_name["Controller"].nodes[0]
    assert dict(controller.vars) == {"ansible_ssh_user": "tripleo-admin"}
    _planned(_written(imp, tmp_path))


def test_a_role_the_inventory_lacks_is_refused_with_its_name(catalog, tmp_path):
    inv = tmp_path / "inventory.yaml"
    inv.write_text(MULTI_STACK.replace("Compute:\n  children:\n    cell1_Compute: {}\n", ""))
    with pytest.raises(InputError) as info:
        import_tripleo(MASTER, catalog, inventory=inv)
    (p,) = info.value.problems
    assert "role 'Compute'" in p.message and p.file == str(inv)
    assert "--count Compute=N" in p.hint
    # counted on purpose: the operator's word
    imp = import_tripleo(MASTER, catalog, inventory=inv, counts={"Compute": 2})
    assert len(imp.deployment.role_by_name["Compute"].nodes) == 2


def test_the_inventory_connection_variables_reach_the_exported_plays(catalog, tmp_path):
    imp = import_tripleo(COMPOSED, catalog, inventory=TRIPLEO_INVENTORY)
    hosts = _exported_hosts(_written(imp, tmp_path), tmp_path / "export")
    assert hosts["overcloud-controller-0"]["ansible_ssh_user"] == "tripleo-admin"
    assert hosts["overcloud-controller-0"]["ansible_host"] == "192.168.24.10"


def test_export_with_a_tripleo_inventory_keeps_its_connection_variables(catalog, tmp_path):
    """`export -i` with the stack's own inventory (role groups at the top, no `all:`): its
    ansible_ssh_user was lost, and the exported plays connected as the wrong user."""
    imp = import_tripleo(COMPOSED, catalog, inventory=TRIPLEO_INVENTORY)
    for role in imp.doc["roles"]:  # a deployment that carries no connection variables
        for node in role["nodes"]:
            node.pop("vars", None)
    dep = _written(imp, tmp_path)
    plain = _exported_hosts(dep, tmp_path / "plain")
    assert "ansible_ssh_user" not in plain["overcloud-database-0"]
    given = _exported_hosts(dep, tmp_path / "given", "-i", str(TRIPLEO_INVENTORY))
    assert given["overcloud-database-0"]["ansible_ssh_user"] == "tripleo-admin"


# ------------------------------------------------------------------- item 4: kolla


def test_kolla_multinode_reads_the_service_groups(catalog, tmp_path):
    imp = import_kolla(MULTINODE, catalog)
    dep = imp.deployment
    roles = {r.name: r for r in dep.roles}
    assert [n.name for n in roles["control"].nodes] == ["control01", "control02", "control03"]
    assert {"keystone", "nova_api", "neutron_server", "galera", "rabbitmq", "placement_api"} <= set(
        roles["control"].declared
    )
    assert {"nova_compute", "nova_libvirt", "neutron_ovs_agent"} <= set(roles["compute"].declared)
    assert "neutron_l3_agent" in roles["network"].declared
    # off by default in Kolla-Ansible: not planned
    assert not {"cinder_api", "cinder_volume"} & {s for r in dep.roles for s in r.declared}
    # the deploy host (deployment: localhost, ansible_connection=local) runs nothing: no node
    assert "localhost" not in {n.name for n in dep.nodes}
    # kolla's services with no catalog entry are named, never dropped
    assert "fluentd" in roles["control"].unmanaged
    assert imp.doc["style"] == "kolla"
    assert imp.doc["containers"] == {
        "registry": "quay.io",
        "namespace": "openstack.kolla",
        "tag": "master-rocky-10",
    }
    _planned(_written(imp, tmp_path), ("update", "upgrade"))


def test_kolla_all_in_one_is_one_local_node_in_every_group(catalog, tmp_path):
    imp = import_kolla(ALL_IN_ONE, catalog)
    (role,) = imp.deployment.roles
    (node,) = role.nodes
    assert node.name == "localhost" and dict(node.vars) == {"ansible_connection": "local"}
    assert {"keystone", "nova_compute", "neutron_l3_agent"} <= set(role.declared)
    path = _written(imp, tmp_path)
    _planned(path, ("update", "upgrade"))
    hosts = _exported_hosts(path, tmp_path / "export")
    assert hosts["localhost"]["ansible_connection"] == "local"  # never reached over SSH


def test_kolla_globals_enable_projects_and_name_the_images(catalog, tmp_path):
    g = tmp_path / "globals.yml"
    g.write_text(
        "---\nenable_cinder: 'yes'\nenable_heat: no\ndocker_registry: registry.example:5000\n"
        "openstack_release: '2025.1'\nkolla_base_distro: ubuntu\n"
        'enable_haproxy: "{{ enable_loadbalancer }}"\n'
    )
    imp = import_kolla(MULTINODE, catalog, globals_file=g)
    declared = {s for r in imp.deployment.roles for s in r.declared}
    assert {"cinder_api", "cinder_volume"} <= declared and "heat_engine" not in declared
    assert imp.doc["containers"]["registry"] == "registry.example:5000"
    assert imp.doc["containers"]["tag"] == "2025.1-ubuntu-noble"
    assert any("enable_haproxy is a template" in n for n in imp.notes)


def test_a_bad_image_setting_names_its_globals_line(catalog, tmp_path):
    g = tmp_path / "globals.yml"
    g.write_text("docker_registry: quay.io\ndocker_namespace: 'Not A Namespace'\n")
    with pytest.raises(InputError) as info:
        import_kolla(MULTINODE, catalog, globals_file=g)
    (p,) = info.value.problems
    assert (p.file, p.line, p.field) == (str(g), 2, "docker_namespace")


def test_the_kolla_command_writes_a_deployment(tmp_path):
    out = tmp_path / "kolla.yaml"
    r = runner.invoke(app, ["import", "kolla", str(MULTINODE), "-o", str(out), "--json"])
    assert r.exit_code == 0, r.output
    assert json.loads(r.stdout)["nodes"] == 8
    assert load_deployment(out).style.value == "kolla"


# ----------------------------------------------------------------- item 5: OpenStack-Ansible


def test_openstack_ansible_user_config_imports_and_plans(catalog, tmp_path):
    imp = import_openstack_ansible(OSA, catalog)
    roles = {r.name: r for r in imp.deployment.roles}
    assert [(n.name, n.address) for n in roles["infra"].nodes] == [
        ("infra1", "172.29.236.11"),
        ("infra2", "172.29.236.12"),
        ("infra3", "172.29.236.13"),
    ]
    assert {"galera", "rabbitmq", "keystone", "nova_api", "haproxy"} <= set(roles["infra"].declared)
    assert {"nova_compute", "nova_libvirt"} <= set(roles["compute"].declared)
    assert "repo_infra_hosts" in roles["infra"].unmanaged  # named, not dropped
    _planned(_written(imp, tmp_path))


def test_the_generated_openstack_ansible_inventory_imports_as_its_user_config(catalog, tmp_path):
    """openstack_inventory.json, generated by OpenStack-Ansible from the prod example: the same
    roles, hosts, addresses and services as the file it came from (its containers are no
    nodes, `lxc_hosts` no host group), and it plans."""
    generated = import_openstack_ansible(OSA_GENERATED, catalog)
    user = import_openstack_ansible(OSA, catalog)

    def shape(imp):
        return {
            r.name: ([(n.name, n.address) for n in r.nodes], set(r.declared), set(r.unmanaged))
            for r in imp.deployment.roles
        }

    assert shape(generated) == shape(user)
    assert any("generated inventory" in n for n in generated.notes)
    out = tmp_path / "out.yaml"
    r = runner.invoke(app, ["import", "openstack-ansible", str(OSA_GENERATED), "-o", str(out)])
    assert r.exit_code == 0, r.output
    _planned(out)


def test_a_generated_inventory_without_hostvars_is_refused_at_its_line(tmp_path):
    f = tmp_path / "openstack_inventory.json"
    f.write_text(json.dumps({"_meta": [], "compute_hosts": {"hosts": ["c1"]}}, indent=1))
    out = tmp_path / "out.yaml"
    r = runner.invoke(app, ["import", "openstack-ansible", str(f), "-o", str(out)])
    assert r.exit_code == 2 and not out.exists()
    assert "_meta.hostvars" in r.stderr and f"{f.name}:2" in r.stderr.replace("\n", "")


def test_a_json_inventory_is_read_with_its_meta_hostvars(catalog, tmp_path):
    """`ansible-inventory --list` JSON (what OpenStack-Ansible generates) was read as INI: its
    lone '{' a host, every line an error."""
    from stepwise.model.importing import import_inventory

    f = tmp_path / "inventory.json"
    f.write_text(
        json.dumps(
            {
                "_meta": {
                    "hostvars": {"ctl1": {"ansible_host": "10.0.0.11", "ansible_user": "ops"}}
                },
                "all": {"children": ["controllers", "ungrouped"]},
                "controllers": {"hosts": ["ctl1"]},
            },
            indent=1,
        )
    )
    imp = import_inventory(f, catalog, services={"controllers": ["keystone"]})
    (node,) = imp.deployment.role_by_name["controllers"].nodes
    assert (node.address, dict(node.vars)) == ("10.0.0.11", {"ansible_user": "ops"})


def test_kolla_haproxy_leaves_no_pacemaker_standby(catalog, tmp_path):
    """Kolla-Ansible has no pacemaker: keepalived holds its VIPs and follows haproxy's health,
    so haproxy's stop itself moves them; every node's services reach the plays
    (`stepwise_services`) and haproxy's pacemaker standby runs only where pacemaker does."""
    path = _written(import_kolla(MULTINODE, catalog), tmp_path)
    hosts = _exported_hosts(path, tmp_path / "kolla")
    on = list(hosts["network01"]["stepwise_services"])
    assert "haproxy" in on and "pacemaker" not in on
    plays = "\n".join(p.read_text() for p in (tmp_path / "kolla").rglob("*.yml"))
    # the standby is guarded by pacemaker's presence on the node, which a kolla node lacks
    guard = "when: '''pacemaker'' in stepwise_services'"
    assert plays.count("pcs node standby") == plays.count(guard) // 2 > 0
    classic = Path(__file__).resolve().parents[1] / "examples" / "classic.yaml"
    hosts = _exported_hosts(classic, tmp_path / "classic")
    assert "pacemaker" in hosts["controller-0"]["stepwise_services"]
    site = (tmp_path / "classic" / "site.yml").read_text()
    assert "when: '''pacemaker'' in stepwise_services'" in site
    # pacemaker's own standby is the same task: beside haproxy's in a visit it runs once
    assert site.count("pcs node standby") == 3  # one per controller's visit
