"""Real RabbitMQ and memcached in a `lab: openstack` deployment, without bringing a lab up:
which services become real, the names, ports and cookie of the RabbitMQ members (never shared
between labs), and the configuration that points keystone and the services at memcached.
The running cluster is checked by the real-OpenStack scenario (tests/run/)."""

from __future__ import annotations

import configparser
import json
import re
from pathlib import Path

from stepwise.lab import memcached, rabbitmq
from stepwise.lab.nodes import Lab
from stepwise.lab.spec import build_spec
from stepwise.model import load_deployment

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "openstack.yaml"


def _lab(tmp_path: Path, index: int = 0, text: str | None = None) -> Lab:
    """A lab directory with the spec `lab up` would write (nothing started)."""
    src = tmp_path / f"cloud{index}.yaml"
    src.write_text(text if text is not None else EXAMPLE.read_text())
    d = tmp_path / f"lab{index}"
    d.mkdir()
    (d / "lab.json").write_text(
        json.dumps(build_spec(load_deployment(src), str(d), index).to_json())
    )
    (d / "openstack").mkdir()
    (d / "openstack" / "password").write_text("Secret0\n")
    return Lab(d)


def test_a_real_openstack_lab_runs_real_rabbitmq_and_memcached(tmp_path: Path):
    lab = _lab(tmp_path)
    assert lab.service("rabbitmq").kind == rabbitmq.KIND
    assert lab.service("memcached").kind == memcached.KIND
    assert rabbitmq.real_services(lab) == ["rabbitmq"]
    # a member's boot and join, and its graceful stop, get more than the stand-ins' 3 s
    assert lab.service("rabbitmq").stop_timeout >= 30
    assert lab.service("rabbitmq").start_timeout >= 120
    # without `lab: openstack` both stay the lab's stand-ins
    plain = _lab(tmp_path, 1, re.sub(r"(?m)^lab:\n  openstack: .*\n", "", EXAMPLE.read_text()))
    assert not plain.spec.openstack
    assert plain.service("rabbitmq").kind == plain.service("memcached").kind == "stand_in"
    assert memcached.servers(plain) == [] and rabbitmq.real_services(plain) == []


def test_keystone_and_every_service_cache_in_every_memcached_member(tmp_path: Path):
    from stepwise.lab.openstack import config

    lab = _lab(tmp_path)
    servers = memcached.servers(lab)
    assert servers == [f"{lab.node(n).address}:11211" for n in lab.nodes()]
    node = lab.nodes()[1]
    ks = configparser.ConfigParser(interpolation=None)
    ks.read_string(config.service_ini(lab, node, "keystone"))
    assert ks["cache"]["enabled"] == "true"
    assert ks["cache"]["backend"] == "oslo_cache.memcache_pool"
    assert ks["cache"]["memcache_servers"] == ",".join(servers)
    for service in ("placement_api", "glance_api"):
        cp = configparser.ConfigParser(interpolation=None)
        cp.read_string(config.service_ini(lab, node, service))
        assert cp["keystone_authtoken"]["memcached_servers"] == ",".join(servers)


def test_every_release_venv_has_the_memcache_client():
    from stepwise.lab.openstack import releases, venvs

    for release in (r for rs in releases.SERIES.values() for r in rs):
        pins = dict(line.split("==", 1) for line in venvs.requirements(release.lock))
        assert pins.get("python-memcached") in ("1.59", "1.62"), release.lock


def test_rabbit_members_of_two_labs_never_share_a_name_port_or_port_mapper(tmp_path: Path):
    a, b = _lab(tmp_path, 0), _lab(tmp_path, 1)
    envs = [
        rabbitmq.env(lab, n, "rabbitmq")
        for lab in (a, b)
        for n in lab.service("rabbitmq").instances
    ]
    # node names repeat between labs, but each lab has its own epmd: a name is only ever
    # looked up in its own lab's port mapper
    assert [e["RABBITMQ_NODENAME"] for e in envs[:3]] == [
        "rabbit1@localhost",
        "rabbit2@localhost",
        "rabbit3@localhost",
    ]
    assert len({e["ERL_EPMD_PORT"] for e in envs}) == 2
    assert len({e["RABBITMQ_DIST_PORT"] for e in envs}) == 6
    # AMQP on each node's own address, state in the node's root, the lab's own cookie
    assert len({(e["RABBITMQ_NODE_IP_ADDRESS"], e["RABBITMQ_NODE_PORT"]) for e in envs}) == 6
    for lab in (a, b):
        for n in lab.service("rabbitmq").instances:
            e = rabbitmq.env(lab, n, "rabbitmq")
            assert e["RABBITMQ_MNESIA_BASE"].startswith(str(lab.node_root(n)))
            assert e["HOME"] == str(lab.dir / "rabbitmq")
            # the members and every rabbitmqctl use the lab's epmd, never start their own
            assert "-start_epmd false" in e["RABBITMQ_SERVER_ADDITIONAL_ERL_ARGS"]
            assert "-start_epmd false" in e["RABBITMQ_CTL_ERL_ARGS"]
    rabbitmq.write_cookie(a)
    rabbitmq.write_cookie(b)
    ca, cb = ((lab.dir / "rabbitmq" / ".erlang.cookie") for lab in (a, b))
    assert ca.read_text() != cb.read_text() and oct(ca.stat().st_mode & 0o777) == "0o400"
    assert rabbitmq.epmd_command(a)[:3] == ["epmd", "-port", e_port(a)]


def e_port(lab: Lab) -> str:
    return str(rabbitmq.epmd_port(lab))


def test_stand_in_members_answer_the_catalogs_rabbitmqctl(tmp_path: Path, capsys):
    """Without `lab: openstack` rabbitmq stays a stand-in, and answers what the catalog asks:
    a cluster of the node's OS major with its running members, and stop_app."""
    import os

    from stepwise.lab.nodecmd_cluster import rabbitmqctl
    from stepwise.lab.nodes import write_json

    lab = _lab(tmp_path, 0, re.sub(r"(?m)^lab:\n  openstack: .*\n", "", EXAMPLE.read_text()))
    c0, c1, c2 = lab.nodes()
    for n in (c0, c1):
        write_json(lab.unit_file(n, "rabbitmq"), {"pid": os.getpid(), "ready": True})
    for n, major in ((c0, 8), (c1, 8), (c2, 8)):
        (lab.node_root(n) / "etc").mkdir(parents=True, exist_ok=True)
        (lab.node_root(n) / "etc" / "os-release").write_text(f'VERSION_ID="{major}.9"\n')

    def ask(node: str, *args: str) -> tuple[int, str]:
        rc = rabbitmqctl(lab, node, list(args))
        return rc, capsys.readouterr().out

    rc, text = ask(c0, "cluster_status", "--formatter", "json")
    st = json.loads(text)
    assert rc == 0 and st["disk_nodes"] == [f"rabbit{k}@localhost" for k in (1, 2, 3)]
    # the catalog's rejoin check waits: one member of three is not running
    assert st["running_nodes"] == ["rabbit1@localhost", "rabbit2@localhost"]
    assert ask(c0, "stop_app")[0] == 0
    assert ask(c2, "cluster_status")[0] == 1  # its own member is not running
    # a member on another OS major is a cluster of its own (mixed_os: false)
    (lab.node_root(c1) / "etc" / "os-release").write_text('VERSION_ID="9.2"\n')
    st = json.loads(ask(c1, "-q", "cluster_status", "--formatter", "json")[1])
    assert st["disk_nodes"] == st["running_nodes"] == ["rabbit2@localhost"]
    # the OS upgrade's new cluster, as the catalog forms it: the policy set and a member
    # joining the one named as a real deployment names it (rabbit@HOST), while it runs
    assert ask(c1, "set_policy", "--apply-to", "queues", "ha-all", ".*", "{}")[0] == 0
    rc, text = ask(c0, "join_cluster", f"rabbit@{c1}")
    assert rc == 0 and "rabbit1@localhost" in text
    assert ask(c2, "join_cluster", f"rabbit@{c1}")[0] == 1  # not running


def test_a_member_named_by_its_host_is_the_labs_member_on_that_node(tmp_path: Path):
    from stepwise.lab.nodecmd_cluster import _lab_member_names

    lab = _lab(tmp_path)
    c0, c1, _ = lab.nodes()
    args = ["join_cluster", f"rabbit@{c1}", "rabbit@elsewhere", "-n", f"rabbit@{c0}"]
    assert _lab_member_names(lab, "rabbitmq", args) == [
        "join_cluster",
        rabbitmq.node_name(lab, "rabbitmq", c1),
        "rabbit@elsewhere",
        "-n",
        rabbitmq.node_name(lab, "rabbitmq", c0),
    ]
    assert rabbitmq.node_name(lab, "rabbitmq", c1) == "rabbit2@localhost"
