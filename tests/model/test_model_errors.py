"""Bad input of every kind: an InputError naming file, line and field, and nothing returned."""

from __future__ import annotations

from pathlib import Path

import pytest

from stepwise.errors import InputError, Problem
from stepwise.model import load_catalog, load_deployment, load_facts

SMALL_CATALOG = {
    "db": "name: db\nplane: infra\navailability: {quorum: majority}\ncluster: galera\n",
    "api": "name: api\nplane: control\ndepends_on: [db]\navailability: {min_available: 1}\n",
    "agent": "name: agent\nplane: data\ndepends_on: [api]\n"
    'availability: {max_unavailable: "10%"}\n',
}


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def small_catalog(tmp_path: Path, **overrides: str) -> Path:
    files = {**SMALL_CATALOG, **overrides}
    for name, text in files.items():
        if text is not None:
            write(tmp_path / "cat" / f"{name}.yaml", text)
    return tmp_path / "cat"


def problems(fn, *args) -> list[Problem]:
    with pytest.raises(InputError) as info:
        fn(*args)
    assert info.value.exit_code == 2
    assert info.value.problems
    return info.value.problems


def only(fn, *args) -> Problem:
    found = problems(fn, *args)
    assert len(found) == 1, [str(p) for p in found]
    return found[0]


def deployment(tmp_path: Path, body: str, catalog_files: dict[str, str] | None = None) -> Path:
    small_catalog(tmp_path, **(catalog_files or {}))
    return write(tmp_path / "cloud.yaml", "name: cloud\ncatalog: cat\n" + body)


@pytest.fixture(scope="module")
def builtin():
    return load_catalog()


# ------------------------------------------------------------------------------ deployment


def test_unknown_service_suggests_the_closest_name(tmp_path, builtin):
    f = write(
        tmp_path / "d.yaml",
        """\
name: cloud
roles:
  - name: Compute
    services:
      - neutron_ovs_agent
      - nova_compte
    nodes: [{name: c0}]
""",
    )
    p = only(load_deployment, f, builtin)
    assert (p.file, p.line, p.field) == (str(f), 6, "roles[0].services[1]")
    assert p.message == "unknown service 'nova_compte'"
    assert "did you mean nova_compute" in p.hint
    assert str(f) + ":6: roles[0].services[1]: unknown service 'nova_compte'" in str(p)


def test_unknown_service_without_close_match_says_how_to_fix(tmp_path):
    f = deployment(tmp_path, "roles:\n  - name: R\n    services: [zzzz]\n")
    p = only(load_deployment, f)
    assert (p.line, p.field) == (5, "roles[0].services[0]")
    assert "add a service file" in p.hint and str(tmp_path / "cat") in p.hint


@pytest.mark.parametrize(
    "body,line,field,allowed",
    [
        (
            "rolez: []\nroles:\n  - {name: R}\n",
            3,
            "rolez",
            "name, description, catalog, vars, reboot_packages, drain_policy, style, "
            "containers, roles",
        ),
        (
            "roles:\n  - name: R\n    update_serail: 2\n",
            5,
            "roles[0].update_serail",
            "update_serial",
        ),
        (
            "roles:\n  - name: R\n    nodes:\n"
            "      - {name: n0}\n      - {name: n1, adress: 10.0.0.1}\n",
            7,
            "roles[0].nodes[1].adress",
            "name, address, vars",
        ),
        (
            'roles:\n  - name: R\n    nodes: {count: 2, name: "r-{index}", serial: 1}\n',
            5,
            "roles[0].nodes.serial",
            "count, name, address, start, vars",
        ),
    ],
)
def test_unknown_key_lists_the_allowed_keys(tmp_path, body, line, field, allowed):
    f = deployment(tmp_path, body)
    p = only(load_deployment, f)
    unknown = field.rsplit(".", 1)[-1]
    assert (p.file, p.line, p.field, p.message) == (str(f), line, field, f"unknown key '{unknown}'")
    assert allowed in p.hint


def test_duplicate_node_across_roles(tmp_path):
    f = deployment(
        tmp_path,
        """\
roles:
  - name: A
    nodes: {count: 2, name: "node-{index}"}
  - name: B
    nodes:
      - {name: other}
      - {name: node-1}
""",
    )
    p = only(load_deployment, f)
    assert (p.line, p.field) == (9, "roles[1].nodes")
    assert p.message == "duplicate node 'node-1' (also in role A)"


def test_duplicate_node_in_a_counted_role_points_at_its_nodes(tmp_path):
    f = deployment(
        tmp_path,
        """\
roles:
  - name: A
    nodes: [{name: b-3}]
  - name: B
    nodes:
      count: 5
      name: "b-{index}"
""",
    )
    p = only(load_deployment, f)
    assert (p.line, p.field, p.message) == (
        7,
        "roles[1].nodes",
        "duplicate node 'b-3' (also in role A)",
    )


def test_duplicate_role_and_repeated_service_are_both_reported(tmp_path):
    f = deployment(
        tmp_path,
        """\
roles:
  - name: R
    services: [api, db, api]
  - name: R
""",
    )
    found = problems(load_deployment, f)
    assert [(p.line, p.field) for p in found] == [(5, "roles[0].services"), (6, "roles[1].name")]
    assert found[0].message == "service 'api' is listed twice"
    assert found[1].message == "role 'R' is defined twice (also roles[0])"


def test_bootstrap_must_be_a_node_of_the_role(tmp_path):
    f = deployment(
        tmp_path,
        'roles:\n  - name: R\n    bootstrap: r-9\n    nodes: {count: 2, name: "r-{index}"}\n',
    )
    p = only(load_deployment, f)
    assert (p.line, p.field) == (5, "roles[0].bootstrap")
    assert "bootstrap node 'r-9' is not a node of role R" == p.message


@pytest.mark.parametrize(
    "name,message",
    [
        ("compute", "a counted node name needs '{index}'"),
        ("compute {index}", "gives node names like 'compute 0', which is not a valid name"),
        ("compute-{index}-{rack}", "only '{index}' may appear in braces"),
    ],
)
def test_bad_counted_node_name(tmp_path, name, message):
    f = deployment(
        tmp_path, f'roles:\n  - name: R\n    nodes:\n      count: 2\n      name: "{name}"\n'
    )
    p = only(load_deployment, f)
    assert (p.line, p.field) == (7, "roles[0].nodes.name")
    assert message in p.message


def test_nodes_of_the_wrong_shape(tmp_path):
    f = deployment(tmp_path, "roles:\n  - name: R\n    nodes: node-0\n")
    p = only(load_deployment, f)
    assert (p.line, p.field) == (5, "roles[0].nodes")
    assert "must be a list of nodes or {count: N" in p.message


@pytest.mark.parametrize(
    "body,line,field",
    [
        ("roles:\n  - services: [db]\n", 4, "roles[0].name"),
        ("description: no roles\n", 1, "roles"),
        (
            "roles:\n  - name: R\n    nodes:\n      - {address: 10.0.0.1}\n",
            6,
            "roles[0].nodes[0].name",
        ),
        ('roles:\n  - name: R\n    nodes: {name: "r-{index}"}\n', 5, "roles[0].nodes.count"),
    ],
)
def test_missing_required_field(tmp_path, body, line, field):
    f = deployment(tmp_path, body)
    p = only(load_deployment, f)
    assert (p.file, p.line, p.field, p.message) == (str(f), line, field, "Field required")
    assert p.hint == f"add '{field.rsplit('.', 1)[-1]}'"


@pytest.mark.parametrize(
    "text,line",
    [
        ("name: cloud\nroles:\n  - name: R\n    services: [db, api\n  - name: S\n", 5),
        ("name: cloud\nroles:\n  - name: R\n   services: [db]\n", 4),
        ("name: cloud\nroles: [{name: R}]\nname: again\n", 3),
        ("name: cloud\nroles:\n\t- name: R\n", 3),
    ],
)
def test_bad_yaml_syntax_names_the_line(tmp_path, text, line):
    small_catalog(tmp_path)
    f = write(tmp_path / "cloud.yaml", text)
    p = only(load_deployment, f)
    assert p.file == str(f) and p.line == line
    assert p.message.startswith("invalid YAML")


def test_missing_empty_and_non_mapping_files(tmp_path):
    p = only(load_deployment, tmp_path / "nope.yaml")
    assert (p.file, p.message) == (str(tmp_path / "nope.yaml"), "file not found")
    p = only(load_deployment, write(tmp_path / "empty.yaml", "# nothing\n"))
    assert p.message == "the file is empty"
    p = only(load_deployment, write(tmp_path / "list.yaml", "- name: cloud\n"))
    assert p.line == 1 and "valid dictionary" in p.message


def test_catalog_directory_not_found(tmp_path):
    f = write(tmp_path / "d.yaml", "name: cloud\nroles: [{name: R}]\ncatalog: services/\n")
    p = only(load_deployment, f)
    assert (p.file, p.line, p.field) == (str(f), 3, "catalog")
    assert "catalog directory 'services/' not found" in p.message


def test_availability_rule_that_cannot_hold(tmp_path):
    """Changed on purpose (issue 21 item 8): a rule that cannot hold with the instances placed
    no longer refuses the deployment (a one-controller cloud is a real cloud); the service's
    update becomes a planned downtime window a run must accept (tests/plan/
    test_single_controller.py)."""
    f = deployment(
        tmp_path,
        """\
roles:
  - name: Db
    services: [api, db]
    nodes: [{name: db-0}]
  - name: Api
    services: [api]
    nodes: [{name: api-0}]
""",
    )
    # quorum of 1 cannot lose one; api has 2 instances with min_available 1: fine
    forced = load_deployment(f).forced_downtime
    assert forced == {
        "db": "its availability rule 'quorum: majority' cannot hold with 1 instance(s) "
        "(a majority quorum needs at least 3)"
    }


@pytest.mark.parametrize(
    "rule,count,ok",
    [
        ("{quorum: majority}", 2, False),
        ("{quorum: majority}", 3, True),
        ("{min_available: 2}", 2, False),
        ("{min_available: 2}", 3, True),
        ("{max_unavailable: 0}", 5, False),
        ('{max_unavailable: "1%"}', 2, True),
    ],
)
def test_availability_rule_holds_iff_one_instance_can_go_down(tmp_path, rule, count, ok):
    f = deployment(
        tmp_path,
        "roles:\n  - name: R\n    services: [x]\n"
        f'    nodes: {{count: {count}, name: "r-{{index}}"}}\n',
        {"x": f"name: x\nplane: infra\navailability: {rule}\n"},
    )
    dep = load_deployment(f)
    assert len(dep.instances["x"]) == count
    if ok:
        assert "x" not in dep.forced_downtime
    else:
        assert "cannot hold" in dep.forced_downtime["x"]


def test_management_roles_are_exempt_from_availability_rules(tmp_path):
    f = deployment(
        tmp_path,
        "roles:\n  - name: Undercloud\n    tags: [management]\n    services: [db, api]\n"
        "    nodes: [{name: undercloud-0}]\n",
    )
    dep = load_deployment(f)
    assert dep.roles[0].is_management and len(dep.instances["db"]) == 1
    assert not dep.forced_downtime
    # ... but not when the same services also run on a cloud role with too few nodes
    g = write(
        tmp_path / "mixed.yaml",
        f.read_text() + "  - name: Db\n    services: [db]\n    nodes: [{name: db-0}]\n",
    )
    assert "cannot hold with 1 instance(s)" in load_deployment(g).forced_downtime["db"]


# ------------------------------------------------------------------------------ catalog


def test_dependency_cycle_prints_the_cycle(tmp_path):
    cat = small_catalog(
        tmp_path,
        db="name: db\nplane: infra\ndepends_on:\n  - x\n",
        x="name: x\nplane: control\ndescription: x\ndepends_on: [api]\n",
    )
    p = only(load_catalog, cat)
    assert p.message == "dependency cycle: api -> db -> x -> api"
    assert (p.file, p.line, p.field) == (str(cat / "api.yaml"), 3, "depends_on[0]")


def test_two_service_cycle(tmp_path):
    cat = small_catalog(
        tmp_path, db="name: db\nplane: infra\ndepends_on: [x, api]\n", x="name: x\nplane: infra\n"
    )
    p = only(load_catalog, cat)
    assert p.message == "dependency cycle: api -> db -> api"
    assert (p.file, p.line, p.field) == (str(cat / "api.yaml"), 3, "depends_on[0]")


def test_unknown_and_self_dependencies(tmp_path):
    cat = small_catalog(
        tmp_path, api="name: api\nplane: control\ndepends_on:\n  - db\n  - dbb\n  - api\n"
    )
    found = problems(load_catalog, cat)
    assert [(p.file, p.line, p.field) for p in found] == [
        (str(cat / "api.yaml"), 5, "depends_on[1]"),
        (str(cat / "api.yaml"), 6, "depends_on[2]"),
    ]
    assert (
        found[0].message == "depends_on names unknown service 'dbb'"
        and "did you mean db" in found[0].hint
    )
    assert found[1].message == "a service cannot depend on itself"


@pytest.mark.parametrize("value", ['"110%"', '"ten%"', '"0%"', "-1", "true", '"10"'])
def test_bad_percentage(tmp_path, value):
    cat = small_catalog(
        tmp_path, agent=f"name: agent\nplane: data\navailability:\n  max_unavailable: {value}\n"
    )
    p = only(load_catalog, cat)
    assert (p.file, p.line, p.field) == (str(cat / "agent.yaml"), 4, "availability.max_unavailable")
    if "%" in value:
        assert (
            f"'{value.strip(chr(34))}' is not a number of instances "
            "or a percentage between 0% and 100%" in p.message
        )


def test_a_boolean_is_not_a_count(tmp_path):
    cat = small_catalog(
        tmp_path, agent="name: agent\nplane: data\navailability: {min_available: true}\n"
    )
    p = only(load_catalog, cat)
    assert (p.line, p.field) == (3, "availability.min_available")
    assert "'true' is not a number of instances" in p.message


def test_availability_needs_exactly_one_rule(tmp_path):
    cat = small_catalog(
        tmp_path,
        agent="name: agent\nplane: data\navailability: {min_available: 1, quorum: majority}\n",
    )
    p = only(load_catalog, cat)
    assert (p.line, p.field) == (3, "availability")
    assert "exactly one of max_unavailable, min_available, quorum" in p.message


@pytest.mark.parametrize(
    "text,line,field,hint",
    [
        (
            "name: api\nplane: control\nupdate:\n  stpo: []\n",
            4,
            "update.stpo",
            "pre, post, validate, leave, stop",
        ),
        ("name: api\nplane: control\ndepends: [db]\n", 3, "depends", "depends_on"),
        (
            "name: api\nplane: control\nsystem_upgrade:\n  transfer: []\n",
            4,
            "system_upgrade.transfer",
            "prepare, run, transfer_data, form_cluster, join_cluster, cleanup",
        ),
        (
            "name: api\nplane: control\nhealth: {https: x}\n",
            3,
            "health.https",
            "http, tcp, command",
        ),
    ],
)
def test_unknown_catalog_key(tmp_path, text, line, field, hint):
    cat = small_catalog(tmp_path, api=text)
    p = only(load_catalog, cat)
    assert (p.file, p.line, p.field) == (str(cat / "api.yaml"), line, field)
    assert hint in p.hint


@pytest.mark.parametrize(
    "text,line,field,message",
    [
        ("name: api\n", 1, "plane", "Field required"),
        ("name: api\nplane: edge\n", 2, "plane", "Input should be 'infra', 'control' or 'data'"),
        (
            "name: api\nplane: control\ndurations: {reboto: 10}\n",
            3,
            "durations",
            "unknown step 'reboto'",
        ),
        (
            "name: api\nplane: control\ndurations: {reboot: -1}\n",
            3,
            "durations",
            "must not be negative",
        ),
        ("name: 9api\nplane: control\n", 1, "name", "String should match pattern"),
        ("name: api\nplane: control\nupdate:\n  stop: {name: x}\n", 4, "update.stop", "valid list"),
        (
            "name: api\nplane: control\nschema: {strategy: online}\n",
            3,
            "schema.strategy",
            "'expand_contract' or 'offline'",
        ),
        (
            "name: api\nplane: control\nschema:\n  strategy: expand_contract\n",
            3,
            "schema",
            "expand_contract needs 'expand' tasks",
        ),
        (
            "name: api\nplane: control\nschema:\n  strategy: offline\n"
            "  expand: [{name: x, command: y}]\n",
            3,
            "schema",
            "an offline schema has no expand or contract tasks",
        ),
        (
            "name: api\nplane: control\nrolling: false\n"
            "schema:\n  strategy: expand_contract\n  expand: [{name: x, command: y}]\n",
            1,
            None,
            "expand_contract rolls node by node",
        ),
    ],
)
def test_bad_catalog_values(tmp_path, text, line, field, message):
    cat = small_catalog(tmp_path, api=text)
    p = only(load_catalog, cat)
    assert (p.file, p.line, p.field) == (str(cat / "api.yaml"), line, field)
    assert message in p.message


def test_every_bad_catalog_file_is_reported_at_once(tmp_path):
    cat = small_catalog(
        tmp_path,
        api="name: api\n",
        agent="name: agent\nplane: data\nrpc: [x]\n",
        other="name: db\nplane: infra\n",
    )
    found = problems(load_catalog, cat)
    assert sorted((Path(p.file).name, p.field) for p in found) == [
        ("agent.yaml", "rpc"),
        ("api.yaml", "plane"),
        ("other.yaml", "name"),
    ]
    assert "service 'db' is defined twice" in next(
        p.message for p in found if p.file.endswith("other.yaml")
    )


def test_catalog_directory_missing_or_empty(tmp_path):
    assert only(load_catalog, tmp_path / "nope").message == "catalog directory not found"
    (tmp_path / "empty").mkdir()
    assert "no service files" in only(load_catalog, tmp_path / "empty").message


def test_bad_yaml_in_a_catalog_file(tmp_path):
    cat = small_catalog(
        tmp_path,
        api="name: api\nplane: control\nupdate:\n  stop:\n    - name: x\n      "
        "ansible.builtin.command: systemctl stop api\n     bad: indent\n",
    )
    p = only(load_catalog, cat)
    assert (p.file, p.line) == (str(cat / "api.yaml"), 7) and p.message.startswith("invalid YAML")


# ------------------------------------------------------------------------------ facts


def test_unknown_node_in_facts(tmp_path):
    dep = load_deployment(
        deployment(tmp_path, 'roles:\n  - name: R\n    nodes: {count: 2, name: "r-{index}"}\n')
    )
    f = write(
        tmp_path / "facts.yaml",
        """\
nodes:
  r-0:
    os: {major: 9}
  r-2:
    os: {major: 9}
""",
    )
    p = only(load_facts, f, dep)
    assert (p.file, p.line, p.field, p.message) == (str(f), 4, "nodes.r-2", "unknown node 'r-2'")


@pytest.mark.parametrize(
    "text,line,field",
    [
        (
            "nodes:\n  r-0:\n    packages:\n      nova: {installed: 1.0.0, availabel: 1.1.0}\n",
            4,
            "nodes.r-0.packages.nova.availabel",
        ),
        ("defaults:\n  os: {major: nine}\n", 2, "defaults.os.major"),
        ("default:\n  os: {major: 8}\n", 1, "default"),
    ],
)
def test_bad_facts(tmp_path, text, line, field):
    dep = load_deployment(
        deployment(tmp_path, 'roles:\n  - name: R\n    nodes: {count: 2, name: "r-{index}"}\n')
    )
    f = write(tmp_path / "facts.yaml", text)
    p = only(load_facts, f, dep)
    assert (p.file, p.line, p.field) == (str(f), line, field)


def test_a_cloud_name_longer_than_a_file_name_is_refused(tmp_path):
    # the name becomes the store's file name: a 250-character name once crashed `plan`
    f = deployment(
        tmp_path,
        "roles:\n  - name: R\n    services: [db]\n"
        "    nodes: [{name: r-0}, {name: r-1}, {name: r-2}]\n",
    )
    f.write_text(f.read_text().replace("name: cloud", "name: " + "c" * 250))
    p = only(load_deployment, f)
    assert (p.line, p.field) == (1, "name") and "at most 128 characters" in p.message


# ------------------------------------------------------------------------------ rpc_mixing

_SERVER = "name: api\nplane: control\ndepends_on: [db]\nrpc: net\nrpc_mixing: negotiated\n"


def test_an_rpc_follower_must_follow_a_peer_that_negotiates(tmp_path):
    agent = "name: agent\nplane: data\ndepends_on: [db]\nrpc: net\nrpc_mixing: follows\n"
    p = only(load_catalog, small_catalog(tmp_path, api=_SERVER, agent=agent))
    assert (p.file, p.line, p.field) == (str(tmp_path / "cat" / "agent.yaml"), 5, "rpc_mixing")
    assert "depends on no service of RPC group 'net' that negotiates" in p.message
    assert "depends_on" in p.hint
    # following its negotiating server, it loads
    fixed = agent.replace("[db]", "[api]")
    assert load_catalog(small_catalog(tmp_path, api=_SERVER, agent=fixed))["agent"].rpc == "net"


def test_a_service_that_negotiates_has_no_pin_and_needs_an_rpc_group(tmp_path):
    pinned = _SERVER + "upgrade:\n  pin:\n    - name: Pin\n      ansible.builtin.command: crudini\n"
    p = only(load_catalog, small_catalog(tmp_path, api=pinned))
    assert "no pin to set; remove upgrade.pin" in p.message
    alone = _SERVER.replace("rpc: net\n", "")
    p = only(load_catalog, small_catalog(tmp_path, api=alone))
    assert "is for a service in an RPC group" in p.message
