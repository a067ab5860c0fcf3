"""Two lanes for the suite under pytest-xdist (`scripts/test.sh` runs `-n 2 --dist loadgroup`).

The lab scenarios take most of CI's time and each uses about one of the machine's two cores
(they wait on services starting, drains, reboots), so they run side by side: each e2e test
goes to one of two lanes, the longest first (longest-processing-time scheduling on the
seconds CI measured), and the lanes come first in the collection so each worker starts on
one. Every other test file is one group, as it would run alone (a file's tests may share a
database or a lab). Without xdist nothing changes.
"""

from __future__ import annotations

import pytest

#: seconds each e2e test took in CI (`--durations`); a new one counts as DEFAULT_SECONDS
E2E_SECONDS = {
    # measured in a fresh clone's run of the whole suite (stop 35: two lanes sharing 2 cores,
    # module runs with the lab's compiled-code cache, the lab's checks and client paced)
    "test_real_openstack_minor_update_and_major_upgrade": 673,
    "test_the_seeds_twelve_steps_on_composed_roles": 421,
    "test_minor_update_of_an_imported_composed_cloud_fails_no_request": 409,
    "test_real_openstack_through_the_os_upgrade": 403,
    # real keystone, placement and glance in its images since stop 36: 410 s alone here
    "test_containerized_update_and_upgrade_with_prestage": 450,
    "test_rollback_of_a_limited_update_keeps_the_apis_up_and_restores_every_version": 255,
    "test_a_node_crashed_mid_batch_stops_the_run_before_the_next_batch": 231,
    "test_drain_waits_for_live_migration_and_applies_each_policy": 75,
    "test_sigkill_and_sigint_during_a_lab_update_then_run_again": 71,
    "test_management_node_os_and_release_upgrade_across_a_database_major": 70,
    "test_lab_abort_leaves_every_service_serving_and_the_same_command_finishes": 55,
    "test_report_of_a_lab_run": 54,
    "test_l3_routers_fail_over_before_their_agent_stops": 45,
    "test_update_with_prestage_fetches_first_and_fails_no_request": 43,
    "test_config_change_restarts_only_that_service_where_it_changed": 42,
}
DEFAULT_SECONDS = 120
LANES = 2


def lanes(items: list[pytest.Item]) -> list[list[pytest.Item]]:
    """The e2e tests in LANES lanes of about equal total time, longest first in each."""

    def seconds(it: pytest.Item) -> int:
        return E2E_SECONDS.get(getattr(it, "originalname", it.name), DEFAULT_SECONDS)

    out: list[list[pytest.Item]] = [[] for _ in range(LANES)]
    load = [0] * LANES
    for it in sorted(items, key=lambda it: (-seconds(it), it.nodeid)):
        i = load.index(min(load))
        out[i].append(it)
        load[i] += seconds(it)
    return out


@pytest.hookimpl(tryfirst=True)  # before xdist turns the groups into node ids
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if not getattr(config.option, "loadgroup", False):
        return
    ordered: list[pytest.Item] = []
    for i, lane in enumerate(lanes([it for it in items if it.get_closest_marker("e2e")])):
        for it in lane:
            it.add_marker(pytest.mark.xdist_group(f"e2e-lane-{i}"))
        ordered += lane
    placed = {id(it) for it in ordered}
    rest = [it for it in items if id(it) not in placed]
    for it in rest:
        it.add_marker(pytest.mark.xdist_group(it.nodeid.split("::")[0]))
    items[:] = ordered + rest
