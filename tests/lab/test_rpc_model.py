"""The lab's RPC model judges a group as its project does: nova's pinned peers, cinder's and
neutron-server's negotiated caps, neutron's agents that follow their servers."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from stepwise.lab import rpc

MIXING = {
    "neutron_server": "negotiated",
    "neutron_ovs_agent": "follows",
    "cinder_api": "negotiated",
    "nova_compute": "pinned",
    "nova_conductor": "pinned",
}


@pytest.fixture
def lab(monkeypatch):
    """A lab of running peers: (node, service, release major) -> the version it sends."""
    peers: list[tuple[str, str, int, int]] = []
    monkeypatch.setattr(rpc, "rpc_peers", lambda _lab, _group: list(peers))
    fake = SimpleNamespace(
        peers=peers,
        service=lambda name: SimpleNamespace(rpc_mixing=MIXING[name], rpc="g"),
    )
    return fake


def test_a_newer_neutron_server_serves_older_agents_not_the_reverse(lab):
    # the servers first: a new server caps what it sends at the agents' release (negotiated)
    lab.peers[:] = [("c0", "neutron_server", 2, 1), ("n0", "neutron_ovs_agent", 1, 1)]
    assert rpc.rpc_state(lab, "neutron") == (True, "RPC neutron: ok")
    # then the agents, one by one: a new agent talks to its (new) server only
    lab.peers.append(("n1", "neutron_ovs_agent", 2, 2))
    assert rpc.rpc_state(lab, "neutron")[0]
    # an agent upgraded before its server speaks a version the server cannot read
    lab.peers[:] = [("c0", "neutron_server", 1, 1), ("n0", "neutron_ovs_agent", 2, 2)]
    ok, why = rpc.rpc_state(lab, "neutron")
    assert not ok and "neutron_ovs_agent@n0 send version 2 to peers running 1" in why


def test_an_unpinned_new_nova_conductor_breaks_its_old_computes(lab):
    lab.peers[:] = [("c0", "nova_conductor", 2, 2), ("k0", "nova_compute", 1, 1)]
    ok, why = rpc.rpc_state(lab, "nova")
    assert not ok and "nova_conductor@c0" in why
    lab.peers[0] = ("c0", "nova_conductor", 2, 1)  # pinned (auto): it sends 1
    assert rpc.rpc_state(lab, "nova")[0]


def test_a_negotiating_service_caps_itself_at_the_oldest_peer_and_a_follower_never(
    lab, monkeypatch
):
    monkeypatch.setattr(rpc, "oldest_peer", lambda _lab, _group: 1)
    assert rpc.rpc_pin(lab, "c0", "cinder_api", 2) == 1
    assert rpc.rpc_pin(lab, "c0", "neutron_server", 2) == 1
    assert rpc.rpc_pin(lab, "n0", "neutron_ovs_agent", 2) is None
