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


def test_a_window_open_at_a_commands_end_lasts_until_the_next_command_begins_its_work(
    tmp_path,
):
    """The seed's steps are commands: a service one command took down (its window open at
    its end) stays down through the pause and the next command's start, which plans and
    starts Ansible before its first unit; that command's own windows take over from there."""
    import dataclasses
    import math
    from datetime import datetime, timedelta

    from stepwise.model import load_deployment
    from stepwise.observe.windows import cloud_intervals
    from stepwise.plan import make_plan
    from stepwise.plan.units import Window
    from stepwise.run.store.base import epoch
    from stepwise.run.store.models import RunRow, UnitRow
    from stepwise.run.store.store import RunOrigin, open_store
    from tests.run.conftest import write_cloud

    dep = load_deployment(write_cloud(tmp_path / "cloud", computes=1, controllers=1))
    plan = make_plan("update", dep)
    stop = next(u for u in plan.units if u.end_s > u.start_s)  # the first unit that takes time
    opened = dataclasses.replace(
        plan, windows=(Window("db", stop.start_s, math.inf, "stopped, started by a later step"),)
    )
    st = open_store(f"sqlite:///{tmp_path / 'store.sqlite'}")
    t0 = datetime(2026, 1, 1, 12, 0, 0)
    base = epoch(t0)

    def record(p, key: str, start: float, end: float, first_unit: float | None) -> None:
        """A run of `p` from t0+start to t0+end; its units one second each from
        t0+start+first_unit (none when None)."""
        rid = st.create_run(
            dep.name, "update", key, RunOrigin("stepwise update run"), {}, p.to_json(),
            [u.to_json() for u in p.units],
        )  # fmt: skip
        with st.session() as s:
            row = s.get(RunRow, rid)
            row.started_at = t0 + timedelta(seconds=start)
            row.ended_at = t0 + timedelta(seconds=end)
            row.status = "done"
            for i, u in enumerate(p.units if first_unit is not None else ()):
                unit = s.get(UnitRow, (rid, u.id))
                at = t0 + timedelta(seconds=start + first_unit + i)
                unit.started_at, unit.ended_at, unit.state = at, at + timedelta(seconds=1), "done"

    n = plan.units.index(stop)
    # run 1 ends at t0+20 s with db's window open; run 2 starts at t0+30 s, its first unit
    # at t0+41 s
    record(opened, "k1", 0.0, 20.0, 0.0)
    record(plan, "k2", 30.0, 45.0, 11.0)
    (db,) = cloud_intervals(st, dep.name)["db"]
    # from the unit that opened it to the next command's first unit (not its start, 30 s)
    assert db == (base + n, base + 41.0)
    # a command that ran no unit hands over at its start
    record(opened, "k3", 50.0, 60.0, 0.0)
    record(plan, "k4", 70.0, 71.0, None)
    assert cloud_intervals(st, dep.name)["db"][1] == (base + 50.0 + n, base + 70.0)
