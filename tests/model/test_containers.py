"""Deployment styles in the model: the container names per style, the `containers:` block's
located errors, and the tasks a catalog entry has in each style (`Service.styled`)."""

from __future__ import annotations

from pathlib import Path

import pytest

from stepwise.model import load_catalog, load_deployment, load_facts
from stepwise.model.choices import DeployStyle
from stepwise.model.containers import (
    Containers,
    container_name,
    image_ref,
    startup_config,
    unit_name,
)
from stepwise.model.facts import facts_from_dict, facts_to_dict
from stepwise.model.vocab import Section, Step, UpgradeKey
from tests.model.test_model_errors import only, problems, small_catalog, write

TRIPLEO, KOLLA, PACKAGES = DeployStyle.TRIPLEO, DeployStyle.KOLLA, DeployStyle.PACKAGES
SET = Containers("127.0.0.1:8787", "tripleo", "current", upgrade_namespace="tripleo-next")
DIGEST_A = "sha256:" + "a" * 64
DIGEST_B = "sha256:" + "b" * 64


@pytest.fixture(scope="module")
def builtin():
    return load_catalog()


# ------------------------------------------------------------------------------ names


@pytest.mark.parametrize(
    ("service", "style", "ref", "unit", "config"),
    [
        (
            "keystone",
            TRIPLEO,
            "127.0.0.1:8787/tripleo/openstack-keystone:current",
            "tripleo_keystone",
            "/var/lib/tripleo-config/container-startup-config/keystone.json",
        ),
        (
            "nova_api",
            TRIPLEO,
            "127.0.0.1:8787/tripleo/openstack-nova-api:current",
            "tripleo_nova_api",
            "/var/lib/tripleo-config/container-startup-config/nova_api.json",
        ),
        (
            "nova_api",
            KOLLA,
            "127.0.0.1:8787/tripleo/nova-api:current",
            "kolla-nova_api-container",
            "/etc/kolla/nova_api/container.json",
        ),
    ],
)
def test_names_per_style(service, style, ref, unit, config):
    assert image_ref(service, style, SET) == ref
    assert unit_name(service, style) == unit
    assert container_name(service) == service
    assert startup_config(service, style) == config


def test_the_image_name_prefix_suffix_and_upgrade_namespace():
    spec = Containers("reg:5000", "ns", "17.1", name_prefix="rhosp17-", name_suffix="-x")
    assert image_ref("nova_api", TRIPLEO, spec) == "reg:5000/ns/rhosp17-nova-api-x:17.1"
    # the catalog's image: replaces the name from the service (mariadb for galera)
    assert image_ref("galera", TRIPLEO, SET, image="mariadb").endswith("/openstack-mariadb:current")
    assert image_ref("keystone", KOLLA, SET, namespace="tripleo-next") == (
        "127.0.0.1:8787/tripleo-next/keystone:current"
    )
    with pytest.raises(ValueError):
        unit_name("keystone", PACKAGES)


# ------------------------------------------------------------------------------ schema

CONTAINERS = "containers: {registry: '127.0.0.1:8787', namespace: tripleo, tag: current}\n"


def cloud(tmp_path: Path, body: str) -> Path:
    small_catalog(tmp_path)
    return write(tmp_path / "cloud.yaml", "name: cloud\ncatalog: cat\n" + body)


def test_a_tripleo_deployment_gets_its_containers(tmp_path):
    f = cloud(
        tmp_path,
        "style: tripleo\n"
        + CONTAINERS
        + "roles:\n  - {name: C, services: [db], nodes: [{name: c0}]}\n",
    )
    dep = load_deployment(f)
    assert dep.containers == Containers("127.0.0.1:8787", "tripleo", "current")
    assert dep.roles[0].style is TRIPLEO
    assert dep.service_on("db", "c0").unit == "tripleo_db"


def test_a_service_with_its_own_image_source_is_pulled_from_it(tmp_path):
    f = cloud(
        tmp_path,
        "style: tripleo\n"
        "containers:\n  registry: r:8787\n  namespace: tripleo\n  tag: current\n"
        "  images:\n    db: {registry: r:8787, namespace: hotfix, tag: fix-1}\n"
        "roles:\n  - {name: C, services: [db], nodes: [{name: c0}]}\n",
    )
    dep = load_deployment(f)
    assert image_ref("db", TRIPLEO, dep.containers) == "r:8787/hotfix/openstack-db:fix-1"
    # a major upgrade's target is the next release's, for it as for every service
    assert image_ref("db", TRIPLEO, dep.containers, namespace="next") == (
        "r:8787/next/openstack-db:current"
    )


def test_a_container_style_without_containers_is_refused_at_its_style(tmp_path):
    f = cloud(
        tmp_path, "style: kolla\nroles:\n  - {name: C, services: [db], nodes: [{name: c0}]}\n"
    )
    p = only(load_deployment, f)
    assert (p.line, p.field) == (3, "style")
    assert "containers:" in p.message and "registry" in p.hint
    f = cloud(
        tmp_path,
        "roles:\n  - {name: A, services: [db], nodes: [{name: a0}]}\n"
        "  - name: C\n    style: tripleo\n    services: [db]\n    nodes: [{name: c0}]\n",
    )
    p = only(load_deployment, f)
    assert (p.line, p.field) == (6, "roles[1].style")


@pytest.mark.parametrize(
    ("block", "field"),
    [
        ("{registry: 'bad host:1', namespace: tripleo, tag: current}", "containers.registry"),
        ("{registry: r, namespace: 'Bad/NS', tag: current}", "containers.namespace"),
        ("{registry: r, namespace: ns, tag: 'x{{y}}'}", "containers.tag"),
        ("{registry: r, namespace: ns}", "containers.tag"),
        ("{registry: r, namespace: ns, tag: t, tags: t}", "containers.tags"),
        (
            "{registry: r, namespace: ns, tag: t, images: {db: {registry: r, namespace: ns}}}",
            "containers.images.db.tag",
        ),
        (
            "{registry: r, namespace: ns, tag: t, images: {web: {registry: r, namespace: n, "
            "tag: h}}}",
            "containers.images.web",
        ),
    ],
)
def test_containers_schema_errors_are_located(tmp_path, block, field):
    f = cloud(
        tmp_path,
        "style: tripleo\nroles:\n  - {name: C, services: [db], nodes: [{name: c0}]}\n"
        f"containers: {block}\n",
    )
    found = problems(load_deployment, f)
    # line 6: the containers: line (a flow mapping's keys share it)
    assert [(p.line, p.field) for p in found] == [(6, field)]


def test_a_catalog_style_override_is_checked(tmp_path):
    cat = small_catalog(
        tmp_path,
        api="name: api\nplane: control\ndepends_on: [db]\nstyles:\n  tripleo:\n"
        "    update: {stopp: []}\n",
    )
    p = only(load_catalog, cat)
    assert (p.line, p.field) == (6, "styles.tripleo.update.stopp")
    cat = small_catalog(tmp_path, api="name: api\nplane: control\nstyles: {docker: {}}\n")
    p = only(load_catalog, cat)
    assert p.field == "styles.docker" and p.line == 3


# ------------------------------------------------------------------------------ styled tasks


def _commands(tasks) -> list[str]:
    out = []
    for t in tasks:
        for key in ("ansible.builtin.command", "ansible.builtin.shell"):
            args = t.get(key)
            if isinstance(args, dict):
                out.append(" ".join(args["argv"]) if "argv" in args else args.get("cmd", ""))
            elif args:
                out.append(args)
    return out


def test_the_packages_style_is_the_entry_as_written(builtin):
    for svc in builtin:
        assert svc.styled(PACKAGES) is svc


@pytest.mark.parametrize("name", ["keystone", "nova_compute", "galera"])
def test_a_container_style_derives_stop_switch_start(builtin, name):
    svc = builtin[name]
    tri = svc.styled(TRIPLEO)
    assert tri is svc.styled(TRIPLEO)  # cached per (service, style)
    assert tri.unit == f"tripleo_{name}" and tri.packages == ()
    for section in (Section.UPDATE, Section.UPGRADE):
        steps = tri.steps(section)
        assert Step.PACKAGES not in steps
        assert steps[Step.STOP][0]["ansible.builtin.systemd_service"] == {
            "name": f"tripleo_{name}",
            "state": "stopped",
        }
        assert steps[Step.START][-1]["ansible.builtin.systemd_service"]["name"] == tri.unit
        fetch, *config = steps[Step.CONFIG]
        # the image arrives in the prestage; without one, the switch pulls it (stopped)
        assert _commands([fetch]) == [
            'podman image exists "$REF@$DIGEST" || podman pull "$TLS" "$REF"'
        ]
        assert fetch["environment"]["REF"] == "{{ stepwise_image_ref }}"
        assert config[0]["ansible.builtin.copy"]["dest"].endswith(
            f"/var/lib/tripleo-config/container-startup-config/{name}.json"
        )
        assert _commands(config)[0] == f"podman rm -f {name}"
        assert _commands(config)[1] == (
            f"podman create --name {name} "
            "{{ stepwise_image_ref + '@' + stepwise_image_digest }}"
        )
        assert _commands(config)[-1] == "os-apply-config"  # rendered for the new image
        # the service's own work (live migration) is kept as written, and the load balancer's
        # drain the run layer brings for its frontend too
        if svc.steps(section).get(Step.LEAVE):
            assert steps[Step.LEAVE] == svc.steps(section)[Step.LEAVE]
        assert tri.frontend == svc.frontend
        assert tri.has_step(section, Step.LEAVE) == svc.has_step(section, Step.LEAVE)
        # nothing of the packages style is left: no dnf
        every = [c for tasks in steps.values() for c in _commands(tasks)]
        assert not any(c.startswith("dnf") or "dnf list" in c for c in every)
    pull, inspect, check = tri.prestage
    assert pull["ansible.builtin.command"]["argv"][:2] == ["podman", "pull"]
    assert _commands([inspect]) == ["podman image inspect {{ stepwise_image_ref }}"]
    # each task names the service's image through its variables: the reference and digest
    # of this node's facts, never in the task text
    for task in (pull, inspect, check, config[0], config[2]):
        assert task["vars"] == {
            "stepwise_image_ref": f"{{{{ stepwise_images[inventory_hostname][{name!r}].ref }}}}",
            "stepwise_image_digest": (
                f"{{{{ stepwise_images[inventory_hostname][{name!r}].target }}}}"
            ),
        }
    assert check["ansible.builtin.assert"]["that"] == [
        "(_stepwise_image.stdout | from_json)[0].Digest == stepwise_image_digest"
    ]


def test_health_and_system_upgrade_follow_the_style_unit(builtin):
    nova = builtin["nova_compute"].styled(KOLLA)
    assert nova.health["command"] == "systemctl is-active kolla-nova_compute-container"
    keystone = builtin["keystone"].styled(TRIPLEO)
    assert keystone.health == builtin["keystone"].health  # an HTTP check needs no unit
    prep = keystone.system_upgrade[next(iter(keystone.system_upgrade))]
    assert prep[0]["ansible.builtin.systemd_service"]["name"] == "tripleo_keystone"


API_WITH_OVERRIDE = """\
name: api
plane: control
unit: api-server
health: {command: systemctl is-active api-server}
update:
  leave: [{name: drain, ansible.builtin.command: socat x}]
  stop: [{name: stop, ansible.builtin.systemd_service: {name: api-server, state: stopped}}]
styles:
  tripleo:
    unit: tripleo_api_wsgi
    health: {http: 'http://{address}:1/'}
    update:
      stop: [{name: pcs stop, ansible.builtin.command: pcs resource disable api}]
"""


def test_an_entry_style_override_replaces_only_its_steps(tmp_path):
    cat = small_catalog(
        tmp_path,
        api=API_WITH_OVERRIDE,
    )
    api = load_catalog(cat)["api"]
    tri = api.styled(TRIPLEO)
    assert tri.unit == "tripleo_api_wsgi"
    assert dict(tri.health) == {"http": "http://{address}:1/"}
    assert _commands(tri.steps(Section.UPDATE)[Step.STOP]) == ["pcs resource disable api"]
    assert _commands(tri.steps(Section.UPDATE)[Step.LEAVE]) == ["socat x"]
    start = tri.steps(Section.UPDATE)[Step.START]
    assert start[0]["ansible.builtin.systemd_service"]["name"] == "tripleo_api_wsgi"
    # kolla has no override: derived from the style
    kolla = api.styled(KOLLA)
    assert kolla.unit == "kolla-api-container"
    assert kolla.health["command"] == "systemctl is-active kolla-api-container"
    # and the packages style keeps its own
    assert api.styled(PACKAGES).steps(Section.UPDATE)[Step.STOP][0]["name"] == "stop"


# ------------------------------------------------------------------------------ facts


def test_image_facts_load_and_say_what_changes(tmp_path):
    f = cloud(
        tmp_path,
        "style: tripleo\n"
        + CONTAINERS
        + "roles:\n  - {name: C, services: [db, api], nodes: [{name: c0}]}\n",
    )
    dep = load_deployment(f)
    ff = write(
        tmp_path / "facts.yaml",
        f"nodes:\n  c0:\n    images:\n      db: {{running: '{DIGEST_A}', target: '{DIGEST_A}'}}\n"
        f"      api: {{running: '{DIGEST_A}', target: '{DIGEST_B}', ref: 'r/ns/api:current'}}\n",
    )
    facts = load_facts(ff, dep)
    assert not facts.image_changes("c0", "db")
    assert facts.image_changes("c0", "api")
    assert (
        facts.image("c0", "api").describe() == "image r/ns/api:current aaaaaaaaaaaa -> bbbbbbbbbbbb"
    )
    # a major upgrade plans knowing no package but its images' targets: recorded with a run
    # (facts_to_dict) they come back when the run is continued
    upgrade = facts.without_packages()
    back = facts_from_dict(facts_to_dict(upgrade), dep)
    assert not back.known and back.image("c0", "api") == facts.image("c0", "api")
    bad = write(
        tmp_path / "bad.yaml",
        "nodes:\n  c0:\n    images:\n      api: {running: 'md5:x'}\n      agent: {}\n",
    )
    found = problems(load_facts, bad, dep)
    assert [(p.line, p.field) for p in found] == [(4, "nodes.c0.images.api.running")]
    bad = write(tmp_path / "bad2.yaml", "nodes:\n  c0:\n    images:\n      agent: {}\n")
    p = only(load_facts, bad, dep)
    assert (p.line, p.field) == (4, "nodes.c0.images.agent")
    assert "not a service that runs on c0" in p.message


def test_the_facts_template_of_a_container_node_names_its_images(tmp_path):
    import yaml

    from stepwise.model.facts_template import facts_template

    f = cloud(
        tmp_path,
        "style: tripleo\n"
        + CONTAINERS
        + "roles:\n  - {name: C, services: [db], nodes: [{name: c0}]}\n"
        "  - {name: P, style: packages, services: [api], nodes: [{name: p0}]}\n",
    )
    dep = load_deployment(f)
    doc = facts_template(dep)
    assert doc["nodes"]["c0"]["images"] == {
        "db": {
            "running": None,
            "target": None,
            "ref": "127.0.0.1:8787/tripleo/openstack-db:current",
        }
    }
    assert "images" not in doc["nodes"]["p0"]
    # the template loads as it is: digests not filled in are taken to change
    back = load_facts(write(tmp_path / "t.yaml", yaml.safe_dump(doc)), dep)
    assert back.image_changes("c0", "db")


def test_every_styled_task_calls_only_documented_node_commands(builtin):
    """What a container style derives runs only commands of docs/node-commands.md, and its
    systemd tasks act on the style's unit (as the packages style's act on `unit:`)."""
    from tests.model.test_model import NODE_COMMANDS, _all_tasks
    from tests.model.test_model import _commands as run_by

    seen = set()
    for style in (TRIPLEO, KOLLA):
        for svc in builtin:
            styled = svc.styled(style)
            for where, task in [*_all_tasks(styled), *(("prestage", t) for t in styled.prestage)]:
                systemd = task.get("ansible.builtin.systemd_service")
                if systemd is not None:
                    assert systemd["name"] == styled.unit, (svc.name, where)
                words = [
                    word
                    for key, shell in (
                        ("ansible.builtin.command", False),
                        ("ansible.builtin.shell", True),
                    )
                    if key in task
                    for word in (
                        [task[key]["argv"][0]]
                        if isinstance(task[key], dict) and "argv" in task[key]
                        else run_by(task[key], shell)
                    )
                ]
                for word in words:
                    assert word in NODE_COMMANDS or word.endswith(("-manage", "-status")), (
                        svc.name,
                        where,
                        word,
                    )
                    seen.add(word)
    # (the kept steps may still ask dnf: the RPC pins read the installed release with it)
    assert {"podman", "crudini"} <= seen


def test_a_styled_service_is_not_styled_again(builtin):
    tri = builtin["keystone"].styled(TRIPLEO)
    assert tri.styled(TRIPLEO) is tri
    with pytest.raises(ValueError):
        tri.styled(KOLLA)


_PINNED_API = (
    "name: api\nplane: control\ndepends_on: [db]\nrpc: api\nupgrade:\n  pin:\n"
    "    - name: Pin the api RPC to the release installed now\n"
    "      ansible.builtin.shell:\n"
    "        cmd: |\n"
    "          set -eo pipefail\n"
    "          major=$(dnf list installed openstack-api"
    ' | awk \'$1 == "openstack-api" {split($2, v, "."); print v[1]}\')\n'
    '          test -n "$major"\n'
    '          crudini --set /etc/api/api.conf upgrade_levels api "R$major"\n'
    "        executable: /bin/bash\n"
    "      changed_when: true\n"
)


def test_a_container_pin_reads_the_release_from_the_running_image(tmp_path):
    """A pin that reads the release a node runs now (a user catalog's, pinned by release): on
    a container node that is the image its container runs (its `version` label), not a host
    package it does not have (nova's own `auto` pin asks nova instead)."""
    catalog = load_catalog(small_catalog(tmp_path, api=_PINNED_API))
    pin = catalog["api"].styled(TRIPLEO).steps(Section.UPGRADE)[UpgradeKey.PIN]
    cmd = pin[0]["ansible.builtin.shell"]["cmd"]
    assert "dnf list installed" not in cmd
    assert "podman inspect api" in cmd and '["Labels"]["version"]' in cmd
    assert 'crudini --set /etc/api/api.conf upgrade_levels api "R$major"' in cmd
    # the packages style keeps the entry as written
    written = catalog["api"].steps(Section.UPGRADE)[UpgradeKey.PIN]
    assert "dnf list installed" in written[0]["ansible.builtin.shell"]["cmd"]
