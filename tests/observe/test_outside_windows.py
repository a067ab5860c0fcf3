"""Which failed probe requests fall outside the announced downtime windows."""

from __future__ import annotations

from stepwise.observe.windows import outside_windows, target_needs
from tests.plan.cloud import catalog, service


def _fail(target: str, t: float) -> dict:
    return {"t": t, "target": target, "ok": False}


def test_a_client_call_is_excused_by_the_window_of_its_service_or_of_keystone():
    windows = {"keystone": [(100.0, 200.0)], "glance_api": [(300.0, 400.0)]}
    records = [
        _fail("client:glance", 150.0),  # keystone down: no token for glance either
        _fail("client:glance", 350.0),  # glance's own window
        _fail("client:placement", 150.0),  # keystone's window
        _fail("client:placement", 350.0),  # nothing of placement's was announced then
        _fail("client:keystone", 350.0),
        _fail("vip:glance_api", 150.0),  # the HTTP probe's request needs glance alone
        _fail("workload:vm-1", 150.0),  # not a service's request: judged elsewhere
        {"t": 500.0, "target": "client:glance", "ok": True},
    ]
    assert outside_windows(records, windows) == {
        "client:placement": 1,
        "client:keystone": 1,
        "vip:glance_api": 1,
    }


def test_the_slack_around_a_window():
    windows = {"keystone": [(100.0, 200.0)]}
    assert outside_windows([_fail("client:keystone", 202.0)], windows) == {}
    assert outside_windows([_fail("client:keystone", 204.0)], windows) == {"client:keystone": 1}


def test_a_request_counts_from_its_start_to_its_answer_or_timeout():
    windows = {"keystone": [(100.0, 200.0)]}
    # started 9 s before the window, timed out 10 s later: inside it
    slow = {"t": 91.0, "target": "vip:keystone", "ok": False, "ms": 10000.0}
    assert outside_windows([slow], windows) == {}
    # started as long before and failed at once: outside
    fast = {"t": 91.0, "target": "vip:keystone", "ok": False, "ms": 3.0}
    assert outside_windows([fast], windows) == {"vip:keystone": 1}
    # records without a duration (older stores) count at their start
    assert outside_windows([_fail("vip:keystone", 91.0)], windows) == {"vip:keystone": 1}


def test_what_a_target_needs_covers_its_dependencies_and_the_vip_carriers():
    """One controller: galera's and haproxy's windows take every API down with them, so a
    failure of keystone's VIP or of nova's client calls inside them was announced; one in no
    window of what it needs was not."""
    depends_on = {
        "galera": (),
        "haproxy": (),
        "keystone": ("galera",),
        "nova_conductor": ("keystone", "placement_api"),
        "placement_api": ("keystone",),
        "nova_api": ("keystone", "nova_conductor"),
        "neutron_server": ("keystone",),
    }
    cat = catalog(*(service(s, deps=deps) for s, deps in depends_on.items()))
    needs = target_needs(cat, depends_on)
    assert needs["vip:keystone"] == ("galera", "haproxy", "keystone", "pacemaker")
    assert set(needs["client:nova"]) >= {"nova_api", "nova_conductor", "placement_api", "galera"}
    assert "nova_api" not in needs["client:neutron"]
    windows = {"galera": [(100.0, 200.0)], "haproxy": [(300.0, 310.0)]}
    records = [
        _fail("vip:keystone", 150.0),  # galera's window
        _fail("client:nova", 305.0),  # haproxy's window
        _fail("vip:keystone", 250.0),  # no window
    ]
    assert outside_windows(records, windows, needs=needs) == {"vip:keystone": 1}
    # without what they need, only their own windows count
    assert outside_windows(records, windows) == {"vip:keystone": 2, "client:nova": 1}
