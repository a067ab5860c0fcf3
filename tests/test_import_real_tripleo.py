"""TripleO clouds as operators really have them (issue 37): tripleo-heat-templates' own roles
files, environment files and rendered registry (tests/fixtures/real, each naming its commit)
imported, validated and planned for every workflow; what TripleO would read differently is
right or refused."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from stepwise.cli.main import _register, app
from stepwise.errors import InputError
from stepwise.model import load_catalog, load_deployment
from stepwise.model.containers import image_ref
from stepwise.model.importing import import_tripleo
from stepwise.model.tripleo import RENAMED
from stepwise.plan import make_plan
from stepwise.verify import verify_plan

REAL = Path(__file__).resolve().parent / "fixtures" / "real"
MASTER = REAL / "tht-master-roles_data.yaml"
TRAIN = REAL / "tht-train-roles_data.yaml"
TRAIN_REGISTRY = REAL / "tht-train-registry-rendered.yaml"
NFV = REAL / "tht-nfv-roles.yaml"
DCN = REAL / "tht-dcn-edge-roles.yaml"
INSTANCE_HA = REAL / "tht-instanceha-roles.yaml"
MONOLITHIC_HA = REAL / "tht-monolithic-ha.yaml"
SCENARIO010 = REAL / "tht-scenario010-multinode-containers.yaml"
PREPARE = (
    Path(__file__).resolve().parent / "fixtures" / "tripleo" / "containers-prepare-parameter.yaml"
)
WORKFLOWS = ("update", "upgrade", "system-upgrade")

_register()
runner = CliRunner()


@pytest.fixture(scope="module")
def catalog():
    return load_catalog()


def planned_everywhere(imp, tmp_path: Path):
    """What was imported, written, loaded and planned (verified) for every workflow."""
    path = tmp_path / "cloud.yaml"
    path.write_text(yaml.safe_dump(imp.doc, sort_keys=False))
    dep = load_deployment(path)
    for wf in WORKFLOWS:
        plan = verify_plan(make_plan(wf, dep), dep)
        assert plan.units, wf
        # an unmanaged service is never touched: it has no units (it is no catalog entry)
        touched = {s for u in plan.units for s in u.services}
        assert not touched & {s for r in dep.roles for s in r.unmanaged}
    return dep


# --------------------------------------------------------------- item 1: unknown services


@pytest.mark.parametrize(
    ("roles_file", "environments", "counts", "unmanaged"),
    [
        # THT's default roles file: every name known (BlockStorageCinderVolume is renamed, Ptp
        # and CertmongerUser have entries)
        (MASTER, [], {}, {}),
        # Train, the fast-forward starting point, with its own rendered registry: what the
        # registry deploys and the catalog does not know is left running
        (
            TRAIN,
            [TRAIN_REGISTRY],
            {},
            {"Controller": {"OS::TripleO::Services::Docker", "OS::TripleO::Services::Keepalived"}},
        ),
        (NFV, [], {}, {"ComputeOvsDpdkSriov": {"OS::TripleO::Services::OvsDpdkNetcontrold"}}),
        (
            DCN,
            [],
            {"DistributedComputeHCI": 3, "DistributedComputeHCIScaleOut": 2},
            {"DistributedComputeHCI": {"OS::TripleO::Services::BarbicanClient"}},
        ),
        (INSTANCE_HA, [], {"ComputeInstanceHA": 2}, {}),
    ],
    ids=["master-default", "train-with-registry", "nfv", "dcn-edge", "instance-ha"],
)
def test_the_real_roles_files_import_and_plan_every_workflow(
    catalog, tmp_path, roles_file, environments, counts, unmanaged
):
    imp = import_tripleo(roles_file, catalog, environments=environments, counts=counts)
    dep = planned_everywhere(imp, tmp_path)
    got = {r.name: set(r.unmanaged) for r in dep.roles if r.unmanaged and r.nodes}
    for role, names in unmanaged.items():
        assert names <= got.get(role, set()), (role, got)
    if not unmanaged:
        assert got == {}
    for names in got.values():
        for name in names:
            assert any(name in n and "unmanaged" in n for n in imp.notes)


def test_the_services_the_issue_names_have_catalog_entries(catalog):
    by_layout = {
        "neutron_sriov_agent": "NeutronSriovAgent",
        "neutron_ovs_dpdk_agent": "ComputeNeutronOvsDpdk",
        "glance_api_edge": "GlanceApiEdge",
        "haproxy_edge": "HAproxyEdge",
        "cinder_volume_edge": "CinderVolumeEdge",
        "pacemaker_remote": "PacemakerRemote",
        "compute_instance_ha": "ComputeInstanceHA",
        "ceph_nfs": "CephNfs",
        "ptp": "Ptp",
        "certmonger_user": "CertmongerUser",
    }
    for entry, tht in by_layout.items():
        assert catalog.resolve(f"OS::TripleO::Services::{tht}") == entry
    # the runtime ones are planned: an upgrade behaviour, not a configuration
    for entry in ("neutron_sriov_agent", "glance_api_edge", "cinder_volume_edge", "ptp"):
        assert catalog[entry].has_runtime


def test_renamed_services_of_earlier_releases_resolve_to_the_current_entry(catalog, tmp_path):
    f = tmp_path / "roles_data.yaml"
    f.write_text(
        "- name: Controller\n  CountDefault: 1\n  tags: [primary, controller]\n"
        "  ServicesDefault:\n"
        + "".join(f"    - {old}\n" for old in RENAMED)
        + "    - OS::TripleO::Services::Keystone\n"
    )
    imp = import_tripleo(f, catalog)
    (role,) = imp.deployment.roles
    assert {"placement_api", "rabbitmq", "timesync", "cinder_volume"} <= set(role.declared)
    # Keepalived has no entry of its own: the renamed Undercloud name is left unmanaged
    assert role.unmanaged == ("OS::TripleO::Services::UndercloudKeepalived",)


def test_strict_refuses_an_unknown_service_but_never_in_a_role_without_nodes(catalog, tmp_path):
    f = tmp_path / "roles_data.yaml"
    f.write_text(
        "- name: Controller\n  CountDefault: 1\n  ServicesDefault:\n"
        "    - OS::TripleO::Services::Keystone\n"
        "- name: Spare\n  CountDefault: 0\n  ServicesDefault:\n"
        "    - OS::TripleO::Services::Keystone\n    - OS::TripleO::Services::Nope\n"
    )
    imp = import_tripleo(f, catalog, strict=True)  # Spare has no nodes: nothing refused
    assert imp.deployment.role_by_name["Spare"].unmanaged == ("OS::TripleO::Services::Nope",)
    with pytest.raises(InputError) as info:
        import_tripleo(f, catalog, strict=True, counts={"Spare": 1})
    (p,) = info.value.problems
    assert (p.file, p.line) == (str(f), 9) and "OS::TripleO::Services::Nope" in p.message
    out = tmp_path / "out.yaml"
    r = runner.invoke(
        app, ["import", "tripleo", "-r", str(f), "--count", "Spare=1", "--strict", "-o", str(out)]
    )
    assert r.exit_code == 2 and not out.exists()


def test_the_plan_names_the_unmanaged_services(tmp_path):
    out = tmp_path / "cloud.yaml"
    r = runner.invoke(
        app, ["import", "tripleo", "-r", str(TRAIN), "-e", str(TRAIN_REGISTRY), "-o", str(out)]
    )
    assert r.exit_code == 0, r.output
    assert (
        "OS::TripleO::Services::Keepalived"
        in yaml.safe_load(out.read_text())["roles"][0]["unmanaged"]
    )
    shown = runner.invoke(app, ["plan", "update", "-d", str(out)])
    assert shown.exit_code == 0, shown.output
    # the line may wrap at whatever width the console took (a terminal's $COLUMNS): read it whole
    text = " ".join(shown.stdout.split())
    said = text[text.index("unmanaged (left running") :]
    assert said.split(": ", 1)[1].startswith("Controller: OS::TripleO::Services::")
    assert "OS::TripleO::Services::Keepalived" in said


# ------------------------------------------------------------- item 2: environment files


def test_role_counts_of_an_environment_file_are_the_node_counts(catalog, tmp_path):
    imp = import_tripleo(MASTER, catalog, environments=[MONOLITHIC_HA])
    counts = {r.name: len(r.nodes) for r in imp.deployment.roles}
    assert counts == {
        "Controller": 3,
        "Compute": 3,
        "BlockStorage": 0,
        "ObjectStorage": 0,
        "CephStorage": 1,
    }
    # --count is the operator's word over the file's
    imp = import_tripleo(MASTER, catalog, environments=[MONOLITHIC_HA], counts={"Compute": 5})
    assert len(imp.deployment.role_by_name["Compute"].nodes) == 5
    planned_everywhere(imp, tmp_path)


def test_a_role_count_that_is_no_number_is_refused_at_its_line(catalog, tmp_path):
    env = tmp_path / "env.yaml"
    env.write_text("parameter_defaults:\n  ControllerCount: three\n")
    with pytest.raises(InputError) as info:
        import_tripleo(MASTER, catalog, environments=[env])
    (p,) = info.value.problems
    assert (p.file, p.line, p.field) == (str(env), 2, "parameter_defaults.ControllerCount")


def test_role_services_of_an_environment_file_replace_the_roles_file(catalog, tmp_path):
    imp = import_tripleo(MASTER, catalog, environments=[SCENARIO010])
    controller = imp.deployment.role_by_name["Controller"]
    # scenario010's ControllerServices: octavia and ceph, nova-compute on the controller,
    # no cinder, swift or heat (in the roles file's ServicesDefault)
    assert {"octavia_api", "octavia_worker", "ceph_mon", "nova_compute"} <= set(controller.declared)
    assert not {"cinder_api", "heat_engine", "swift_proxy"} & set(controller.declared)
    assert any("ControllerServices" in n for n in imp.notes)
    planned_everywhere(imp, tmp_path)


def test_a_role_services_item_that_is_unknown_names_the_environment_file(catalog, tmp_path):
    env = tmp_path / "env.yaml"
    env.write_text(
        "parameter_defaults:\n  ComputeServices:\n    - OS::TripleO::Services::NovaCompute\n"
        "    - OS::TripleO::Services::NovaKompute\n"
    )
    with pytest.raises(InputError) as info:
        import_tripleo(MASTER, catalog, environments=[env], strict=True)
    (p,) = info.value.problems
    assert (p.file, p.line) == (str(env), 4)


# ---------------------------------------------------------------- item 6: duplicate keys


def test_duplicate_keys_of_an_environment_file_are_the_last_with_a_warning(catalog):
    # scenario010 maps SwiftRingBuilder and SwiftStorage to OS::Heat::None twice
    imp = import_tripleo(MASTER, catalog, environments=[SCENARIO010])
    twice = [n for n in imp.notes if "is given on line" in n]
    assert len(twice) == 2
    assert (
        "'OS::TripleO::Services::SwiftRingBuilder' is given on line 25 and again on line 27"
        in (twice[0])
    )
    assert str(SCENARIO010) in twice[0] and "as Heat does" in twice[0]


def test_the_last_of_a_duplicate_key_wins(catalog, tmp_path):
    env = tmp_path / "env.yaml"
    env.write_text(
        "resource_registry:\n  OS::TripleO::Services::Aide: OS::Heat::None\n"
        "  OS::TripleO::Services::Aide: deployment/aide/aide-baremetal-ansible.yaml\n"
    )
    imp = import_tripleo(MASTER, catalog, environments=[env])
    assert "aide" in imp.deployment.role_by_name["Controller"].declared
    assert any("line 2 and again on line 3" in n for n in imp.notes)


# ------------------------------------------------------------------- containers (item 2)


def test_a_containerized_environment_without_its_prepare_file_is_refused(catalog, tmp_path):
    out = tmp_path / "out.yaml"
    r = runner.invoke(
        app, ["import", "tripleo", "-r", str(MASTER), "-e", str(PREPARE), "-o", str(out)]
    )
    assert r.exit_code == 2 and not out.exists()
    assert "--containers-prepare" in r.stderr and "ContainerImagePrepare" in r.stderr
    ok = runner.invoke(
        app,
        ["import", "tripleo", "-r", str(MASTER), "-e", str(PREPARE), "--containers-prepare",
         str(PREPARE), "-o", str(out)],
    )  # fmt: skip
    assert ok.exit_code == 0, ok.output


def test_a_packages_import_of_a_cloud_that_runs_podman_is_told(catalog):
    imp = import_tripleo(MASTER, catalog)
    assert any("--containers-prepare" in n and "Podman" in n for n in imp.notes)


def _prepare(tmp_path: Path, text: str) -> Path:
    f = tmp_path / "prepare.yaml"
    f.write_text(text)
    return f


SET = "    set: {namespace: quay.io/tripleowallaby, tag: current-tripleo}\n"


def test_push_destination_true_is_the_undercloud_registry_given(catalog, tmp_path):
    f = _prepare(
        tmp_path,
        "parameter_defaults:\n  ContainerImagePrepare:\n  - push_destination: true\n" + SET,
    )
    with pytest.raises(InputError) as info:
        import_tripleo(MASTER, catalog, containers_prepare=f)
    assert "--undercloud-registry" in info.value.problems[0].message
    imp = import_tripleo(
        MASTER, catalog, containers_prepare=f, undercloud_registry="192.168.24.1:8787"
    )
    assert imp.doc["containers"]["registry"] == "192.168.24.1:8787"
    assert imp.doc["containers"]["namespace"] == "tripleowallaby"


HOTFIX = (
    "  - push_destination: r.example:8787\n"
    "    excludes: [nova-api]\n" + SET + "  - push_destination: r.example:8787\n"
    "    includes: [nova-api]\n"
    "    set: {namespace: quay.io/tripleowallaby, tag: hotfix-1}\n"
)


@pytest.mark.parametrize("first_excludes", [True, False])
def test_a_hotfix_entry_prepares_its_images_from_its_own_tag(catalog, tmp_path, first_excludes):
    """tripleo-docs' hotfix: nova-api from another tag. The last entry that takes an image is
    its source, whether the first entry excludes it or not (TripleO merges in order)."""
    entries = HOTFIX if first_excludes else HOTFIX.replace("    excludes: [nova-api]\n", "")
    f = _prepare(tmp_path, "parameter_defaults:\n  ContainerImagePrepare:\n" + entries)
    imp = import_tripleo(MASTER, catalog, containers_prepare=f)
    block = imp.doc["containers"]
    assert block["tag"] == "current-tripleo"
    assert set(block["images"]) == {"nova_api"}
    assert block["images"]["nova_api"]["tag"] == "hotfix-1"
    dep = imp.deployment
    role = next(r for r in dep.roles if "nova_api" in dep.containerized(r))
    refs = {
        s: image_ref(s, role.style, dep.containers, image=dep.catalog[s].image)
        for s in dep.containerized(role)
    }
    assert refs["nova_api"] == "r.example:8787/tripleowallaby/openstack-nova-api:hotfix-1"
    assert refs["keystone"] == "r.example:8787/tripleowallaby/openstack-keystone:current-tripleo"
    # a major upgrade's target is the next release's image for every service, hotfixed or not
    assert image_ref(
        "nova_api", role.style, dep.containers, image="", namespace="tripleoxena"
    ).endswith("/tripleoxena/openstack-nova-api:current-tripleo")


@pytest.mark.parametrize(
    ("entries", "line", "field", "said"),
    [
        # excluded by the only entry: TripleO would deploy keystone with no image
        (
            "  - push_destination: r.example:8787\n    excludes: [keystone]\n" + SET,
            2,
            "parameter_defaults.ContainerImagePrepare",
            "keystone (keystone)",
        ),
        (
            "  - push_destination: r.example:8787\n    includes: ['nova-(']\n" + SET,
            4,
            "parameter_defaults.ContainerImagePrepare[0].includes[0]",
            "not a regular expression",
        ),
        (
            "  - push_destination: r.example:8787\n    excludes: nova-api\n" + SET,
            4,
            "parameter_defaults.ContainerImagePrepare[0].excludes",
            "not a list",
        ),
        (
            "  - push_destination: r.example:8787\n" + SET + "  - includes: [nova-api]\n",
            5,
            "parameter_defaults.ContainerImagePrepare[1].set",
            "no 'set:'",
        ),
    ],
)
def test_prepare_entries_that_cannot_be_planned_are_refused_where_they_are(
    catalog, tmp_path, entries, line, field, said
):
    f = _prepare(tmp_path, "parameter_defaults:\n  ContainerImagePrepare:\n" + entries)
    with pytest.raises(InputError) as info:
        import_tripleo(MASTER, catalog, containers_prepare=f)
    (p,) = info.value.problems
    assert (p.file, p.line, p.field) == (str(f), line, field), p
    assert said in p.message
