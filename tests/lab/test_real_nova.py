"""Real nova in the lab (issue 33), without bringing a lab up: which services of
`examples/openstack-nova.yaml` run real code and how nova and neutron are configured. The lab
itself: tests/run/test_e2e_real_nova.py."""

from __future__ import annotations

import configparser
import json
from pathlib import Path

from stepwise.lab import rabbitmq
from stepwise.lab.nodes import Lab
from stepwise.lab.openstack import config, releases
from stepwise.lab.spec import build_spec
from stepwise.model import load_deployment

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "openstack-nova.yaml"
NOVA = ("nova_api", "nova_conductor", "nova_scheduler", "nova_compute")


def _spec_lab(tmp_path: Path, text: str | None = None) -> Lab:
    """A lab directory with the spec `lab up` would write (nothing started)."""
    src = tmp_path / "cloud.yaml"
    src.write_text(text if text is not None else EXAMPLE.read_text())
    d = tmp_path / "lab"
    d.mkdir()
    (d / "lab.json").write_text(json.dumps(build_spec(load_deployment(src), str(d), 0).to_json()))
    (d / "openstack").mkdir()
    (d / "openstack" / "password").write_text("Secret0\n")
    return Lab(d)


def test_nova_runs_real_its_api_under_uwsgi_the_rest_as_processes(tmp_path: Path):
    lab = _spec_lab(tmp_path)
    assert set(NOVA) <= set(lab.spec.openstack.services)
    assert all(lab.service(s).real_openstack for s in NOVA)
    # the APIs are served by uWSGI on their ports; the others are processes the unit runs
    assert lab.service("nova_api").kind == "openstack_api"
    assert lab.service("neutron_server").kind == "openstack_api"
    assert {lab.service(s).kind for s in NOVA[1:]} == {"openstack_process"}
    # real servers are the computes' workloads: no stand-in VM is made
    assert lab.spec.workloads == {} and lab.spec.routers == {}


def test_the_2025_1_series_has_no_nova_code_so_nova_stays_a_stand_in(tmp_path: Path):
    lab = _spec_lab(
        tmp_path, EXAMPLE.read_text().replace('openstack: "2023.2"', 'openstack: "2025.1"')
    )
    assert releases.series_services("2025.1") == ["keystone", "placement_api", "glance_api"]
    assert not any(lab.service(s).real_openstack for s in NOVA)
    assert lab.service("keystone").real_openstack


def test_nova_runs_real_only_whole_and_over_rabbitmq(tmp_path: Path):
    # the containers example places nova_api and nova_compute alone: both stay stand-ins
    text = EXAMPLE.read_text().replace(" nova_conductor,", "")
    lab = _spec_lab(tmp_path, text)
    assert not any(lab.service(s).real_openstack for s in NOVA if s in lab.spec.services)
    assert lab.service("neutron_server").real_openstack and lab.spec.workloads
    # without a RabbitMQ cluster neither nova nor neutron-server runs real (they talk RPC)
    (tmp_path / "b").mkdir()
    lab = _spec_lab(tmp_path / "b", EXAMPLE.read_text().replace(" rabbitmq,", ""))
    assert not lab.service("neutron_server").real_openstack
    assert not lab.service("nova_api").real_openstack and lab.service("keystone").real_openstack


def test_nova_conf_cells_rabbit_members_fake_driver_and_the_pin_kept(tmp_path: Path):
    lab = _spec_lab(tmp_path)
    cp = configparser.ConfigParser(interpolation=None)
    cp.read_string(config.service_ini(lab, "compute-1", "nova_compute"))
    assert cp["DEFAULT"]["host"] == "compute-1"
    assert cp["DEFAULT"]["my_ip"] == lab.node("compute-1").address
    assert cp["DEFAULT"]["compute_driver"] == "fake.PredictableNodeUUIDDriver"
    members = [lab.node(n).address for n in lab.service("rabbitmq").instances]
    assert cp["DEFAULT"]["transport_url"] == rabbitmq.transport_url(lab)
    assert all(f"@{a}:5672" in cp["DEFAULT"]["transport_url"] for a in members)
    # a compute has no database credentials (its conductor reaches the database for it)
    assert not cp.has_section("database") and not cp.has_section("api_database")
    ctl = configparser.ConfigParser(interpolation=None)
    ctl.read_string(config.service_ini(lab, "controller-0", "nova_conductor"))
    assert ctl["api_database"]["connection"].endswith("/nova_api")
    assert ctl["database"]["connection"].endswith("/nova")
    assert cp["placement"]["username"] == "nova"
    # durable queues on every nova service (a compute's report waits in the conductor's queue
    # through a RabbitMQ restart instead of timing out after 60 s)
    for parsed in (cp, ctl):
        assert parsed["oslo_messaging_rabbit"]["amqp_durable_queues"] == "true"
    assert str(lab.node_root("compute-1")) in cp["DEFAULT"]["state_path"]
    # an operator's pin in the file a new rendering replaces is kept (the upgrade's RPC pin)
    path = lab.node_path("compute-1", "/etc/nova/nova.conf")
    path.parent.mkdir(parents=True)
    path.write_text("[upgrade_levels]\ncompute = 6.2\n")
    again = configparser.ConfigParser(interpolation=None)
    again.read_string(config.service_ini(lab, "compute-1", "nova_compute"))
    assert again["upgrade_levels"]["compute"] == "6.2"
