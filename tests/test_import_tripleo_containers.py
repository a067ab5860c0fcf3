"""`stepwise import tripleo --containers-prepare`: TripleO's ContainerImagePrepare read into
`style: tripleo` and `containers:`, the result planned as containers; bad files located."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from stepwise.cli.main import _register, app
from stepwise.errors import InputError
from stepwise.model import load_catalog, load_deployment
from stepwise.model.choices import DeployStyle
from stepwise.model.containers import image_ref
from stepwise.model.importing import import_tripleo
from stepwise.model.tripleo_containers import load_containers_prepare
from stepwise.model.vocab import Step, Workflow
from stepwise.plan import make_plan
from tests.security.helpers import cli

FIX = Path(__file__).resolve().parent / "fixtures" / "tripleo"
PREPARE = FIX / "containers-prepare-parameter.yaml"
CLASSIC = FIX / "roles_data_classic.yaml"
INVENTORY = FIX / "tripleo-ansible-inventory.yaml"

_register()
runner = CliRunner()


def test_the_fixture_gives_the_undercloud_registry_and_the_namespace_path():
    assert load_containers_prepare(PREPARE) == {
        "registry": "192.168.24.1:8787",
        "namespace": "tripleowallaby",
        "tag": "current-tripleo",
        "name_prefix": "openstack-",
        "name_suffix": "",
    }


def _classic_with_containers():
    """The classic roles file with the composed stack's inventory and the fixture's prepare
    file: the inventory has no Controller group, so the controllers are counted, as asked."""
    return import_tripleo(
        CLASSIC,
        load_catalog(),
        inventory=INVENTORY,
        containers_prepare=PREPARE,
        counts={"Controller": 3},
    )


def test_an_imported_containerized_cloud_plans_container_units():
    result = _classic_with_containers()
    dep = result.deployment
    assert result.doc["style"] == "tripleo"
    assert {r.style for r in dep.roles} == {DeployStyle.TRIPLEO}
    assert image_ref("nova_api", DeployStyle.TRIPLEO, dep.containers) == (
        "192.168.24.1:8787/tripleowallaby/openstack-nova-api:current-tripleo"
    )
    plan = make_plan(Workflow.UPDATE, dep)
    steps = {u.step for u in plan.units}
    assert Step.CONFIG in steps and Step.STOP in steps
    # a package step only for the services TripleO runs on the host (pacemaker, Open
    # vSwitch): a containerized service's image is its package
    packaged = {s for u in plan.units if u.step is Step.PACKAGES for s in u.services}
    assert packaged and packaged <= {"pacemaker", "openvswitch"}, packaged
    assert all(not dep.catalog[s].in_container(DeployStyle.TRIPLEO) for s in packaged)


def test_the_import_command_writes_a_containerized_deployment(tmp_path):
    out = tmp_path / "cloud.yaml"
    res = runner.invoke(
        app,
        [
            "import",
            "tripleo",
            "-r",
            str(CLASSIC),
            "-i",
            str(INVENTORY),
            "--count",
            "Controller=3",
            "--containers-prepare",
            str(PREPARE),
            "-o",
            str(out),
        ],
    )
    assert res.exit_code == 0, res.output
    doc = yaml.safe_load(out.read_text())
    assert doc["containers"]["registry"] == "192.168.24.1:8787"
    # the registry credentials of the file are never read, so never written
    assert "placeholder-not-a-secret" not in out.read_text()
    assert load_deployment(out).style is DeployStyle.TRIPLEO
    # the seed's OS upgrade is written for containerized TripleO: its containers are planned,
    # but TripleO's Galera runs in one, and the catalog forms its new cluster with the host's
    # galera_new_cluster: refused, naming it and what to do, nothing planned as if it could
    res = cli("plan", "system-upgrade", "-d", str(out), "-e", "target_release=R2", "--json")
    assert res.code == 2, res.text
    (problem,) = json.loads(res.out)["error"]["problems"]
    assert "galera on Controller (tripleo)" in problem["message"], problem
    assert problem["field"] == "style" and "host: true" in problem["hint"]
    # the same cloud with its database on the host (a packages-style role) plans it
    doc["roles"] = [
        {**r, "style": "packages"} if "galera" in r["services"] else r for r in doc["roles"]
    ]
    out.write_text(yaml.safe_dump(doc))
    res = cli("plan", "system-upgrade", "-d", str(out), "-e", "target_release=R2", "--json")
    assert res.code == 0, res.text
    units = json.loads(res.out)["units"]
    steps = {u["step"] for u in units}
    assert {"system_upgrade_run", "config", "form_cluster", "start"} <= steps, steps


def _prepare(tmp_path: Path, text: str) -> Path:
    f = tmp_path / "prepare.yaml"
    f.write_text(text)
    return f


@pytest.mark.parametrize(
    ("text", "line", "field", "message"),
    [
        (
            "parameter_defaults: {}\n",
            1,
            "parameter_defaults.ContainerImagePrepare",
            "no ContainerImagePrepare",
        ),
        (
            "parameter_defaults:\n  ContainerImagePrepare:\n  - push_destination: r:1\n",
            3,
            "parameter_defaults.ContainerImagePrepare[0].set",
            "no 'set:'",
        ),
        (
            "parameter_defaults:\n  ContainerImagePrepare:\n  - set:\n      namespace: q.io/ns\n",
            3,
            "parameter_defaults.ContainerImagePrepare[0].set.tag",
            "set.tag is missing",
        ),
        (
            "parameter_defaults:\n  ContainerImagePrepare:\n  - set:\n      namespace: ns\n"
            "      tag: t\n",
            4,
            "parameter_defaults.ContainerImagePrepare[0].set.namespace",
            "names none",
        ),
        (
            "parameter_defaults:\n  ContainerImagePrepare:\n  - push_destination: true\n"
            "    set: {namespace: q.io/ns, tag: t}\n",
            3,
            "parameter_defaults.ContainerImagePrepare[0].push_destination",
            "does not name",
        ),
    ],
)
def test_bad_prepare_files_are_located(tmp_path, text, line, field, message):
    f = _prepare(tmp_path, text)
    with pytest.raises(InputError) as info:
        load_containers_prepare(f)
    (p,) = info.value.problems
    assert (p.file, p.line, p.field) == (str(f), line, field)
    assert message in p.message


def test_a_value_the_schema_refuses_is_refused_as_imported(tmp_path):
    f = _prepare(
        tmp_path,
        "parameter_defaults:\n  ContainerImagePrepare:\n  - push_destination: r:1\n"
        "    set: {namespace: q.io/ns, tag: 'a b'}\n",
    )
    with pytest.raises(InputError) as info:
        import_tripleo(CLASSIC, load_catalog(), containers_prepare=f)
    # located in the prepare file, where the tag is (not in the roles file, which has none)
    assert [(p.file, p.line, p.field) for p in info.value.problems] == [
        (str(f), 4, "parameter_defaults.ContainerImagePrepare[0].set.tag")
    ]


def test_push_destination_true_takes_the_undercloud_registry_the_file_names(tmp_path):
    f = _prepare(
        tmp_path,
        "parameter_defaults:\n  ContainerImagePrepare:\n  - push_destination: true\n"
        "    set: {namespace: registry.redhat.io/rhosp-rhel9, tag: '17.1',\n"
        "          name_prefix: openstack-}\n"
        "  DockerInsecureRegistryAddress: [undercloud.ctlplane.localdomain:8787]\n",
    )
    block = load_containers_prepare(f)
    assert (block["registry"], block["namespace"]) == (
        "undercloud.ctlplane.localdomain:8787",
        "rhosp-rhel9",
    )
    f = _prepare(
        tmp_path,
        "parameter_defaults:\n  ContainerImagePrepare:\n"
        "  - set: {namespace: quay.io/tripleo/x, tag: t}\n",
    )
    assert load_containers_prepare(f)["registry"] == "quay.io"
    assert load_containers_prepare(f)["namespace"] == "tripleo/x"


def test_the_prepare_file_is_read_once(monkeypatch: pytest.MonkeyPatch):
    # read twice (once for the registry, once for each image's entry), a file rewritten in
    # between would give the cloud a registry of one version and images of another
    import stepwise.model.import_tht as tht
    import stepwise.model.tripleo_containers as tc
    from stepwise.model.yamlsrc import load_yaml

    reads: list[str] = []

    def counted(path, **kw):
        reads.append(str(path))
        return load_yaml(path, **kw)

    monkeypatch.setattr(tht, "load_yaml", counted)
    monkeypatch.setattr(tc, "load_yaml", counted)
    result = _classic_with_containers()
    assert result.doc["containers"]["registry"] == "192.168.24.1:8787"
    assert reads.count(str(PREPARE)) == 1, reads
