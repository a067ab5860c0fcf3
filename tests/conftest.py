"""The suite's order under pytest-xdist (`scripts/test.sh` runs `-n 2 --dist loadfile`).

The lab scenarios take most of CI's time and each uses about one of the machine's two cores
(they wait on services starting, drains, reboots), so two run side by side. xdist hands each
worker a whole test file (a file's tests may share a lab or a database through a module
fixture: it is brought up once), taking the files in collection order as workers free up; so
the files come in the order of the seconds their scenarios took in CI, longest first
(longest-processing-time first: the last file to start is a short one), then every other file
in its own order. Without xdist the order is the same. One exception (the scheduler below):
a file that brings up a heavy lab (real OpenStack, the composed cloud's OS upgrade) goes to a
worker only while no other worker has one unfinished, so the other worker runs the lighter
scenarios and unit tests meanwhile.

Why not `--dist loadgroup` with two fixed lanes (what this file did before): pytest 9 builds a
test's id from a structured `_id`, so xdist 3.8's group suffix (`item._nodeid = ...@group`) is
lost, every test was its own work unit, and a file's module-scoped lab came up on both workers.
"""

from __future__ import annotations

import os

import pytest

# stepwise's consoles take their width when first imported: a $COLUMNS of the shell or CI that
# runs the suite (CI's is 80) would wrap every test's output; tests that are about the width
# give it to the process they start
for _name in ("COLUMNS", "LINES"):
    os.environ.pop(_name, None)

#: seconds each slow test took in CI (`--durations`); a new e2e test counts as DEFAULT_SECONDS
E2E_SECONDS = {
    # measured in a fresh clone's run of the whole suite (stop 42: two workers sharing 2 cores)
    "test_real_openstack_minor_update_and_major_upgrade": 1438,
    "test_the_seeds_twelve_steps_on_composed_roles": 877,
    # rolled back on two controllers since stop 42 (733 s with a compute too)
    "test_rollback_of_a_limited_update_keeps_the_apis_up_and_restores_every_version": 500,
    "test_every_export_passes_ansible_lint_production": 300,
    "test_management_node_os_and_release_upgrade_across_a_database_major": 231,
    "test_lab_abort_leaves_every_service_serving_and_the_same_command_finishes": 202,
    "test_drain_waits_for_live_migration_and_applies_each_policy": 174,
    "test_sigkill_and_sigint_during_a_lab_update_then_run_again": 172,
    "test_report_of_a_lab_run": 139,
    "test_l3_routers_fail_over_before_their_agent_stops": 138,
    "test_update_with_prestage_fetches_first_and_fails_no_request": 132,
    "test_config_change_restarts_only_that_service_where_it_changed": 132,
    # real nova, one lab for both (stop 44: 305-394 s together, with the unit tests beside)
    "test_real_nova_servers_kept_through_the_computes_rolling_update": 180,
    "test_real_nova_major_upgrade_pins_compute_rpc_until_no_old_compute_remains": 250,
    # real nova and a real RabbitMQ cluster through the seed's OS upgrade (stop 56: 305 s and
    # 120 s alone, on 2 cores)
    "test_real_nova_through_the_seeds_os_upgrade": 400,
    "test_the_new_os_members_form_a_new_rabbitmq_cluster": 150,
    # stand-in containers through the seed's OS upgrade (stop 51: 335 s alone, on 2 cores)
    "test_containerized_cloud_through_the_os_upgrade": 450,
    # back in CI since stop 60 (measured alone with the rest of the slow ones, 2 workers)
    "test_a_node_crashed_mid_batch_stops_the_run_before_the_next_batch": 130,
    "test_real_openstack_through_the_os_upgrade": 250,
    "test_minor_update_of_an_imported_composed_cloud_fails_no_request": 215,
    # slow (scripts/test.sh leaves them out unless STEPWISE_TEST_SLOW=1): stop 60's figures
    "test_containerized_update_and_upgrade_with_prestage": 336,
}
DEFAULT_SECONDS = 120

#: files whose tests bring up a lab that takes both cores for minutes: real OpenStack (uWSGI
#: services, a real RabbitMQ cluster, Galera), and the seed's OS upgrade on the composed cloud
#: (13 nodes, its clusters sampled every half second). Two of them at once overloaded CI's
#: machine: requests timed out, scenarios ran past their bounds, and the composed cloud's OS
#: upgrade failed its last checks beside the real-OpenStack demo (it passes alone), so at most
#: one runs at a time (the scheduler below); the other worker takes the lighter scenarios and
#: the unit tests meanwhile
HEAVY_LAB_FILES = frozenset(
    {
        "tests/run/test_e2e_real_openstack.py",
        "tests/run/test_e2e_real_openstack_os_upgrade.py",
        "tests/run/test_e2e_real_nova.py",
        "tests/run/test_e2e_real_nova_os_upgrade.py",
        "tests/run/test_e2e_containers.py",
        "tests/lab/test_containers.py",
        "tests/run/test_e2e_os_upgrade.py",
    }
)


def seconds(item: pytest.Item) -> int:
    """What CI measured for a slow test (an e2e test not measured yet: DEFAULT_SECONDS)."""
    default = DEFAULT_SECONDS if item.get_closest_marker("e2e") else 0
    return E2E_SECONDS.get(getattr(item, "originalname", item.name), default)


def pytest_xdist_make_scheduler(config: pytest.Config, log: object) -> object:
    """xdist's `loadfile` scheduling, except that a file of HEAVY_LAB_FILES goes to a worker only
    while no other worker has one unfinished.

    A worker runs a test only once it holds the next one (or is told to shut down): a worker
    refused a heavy-lab file keeps its last test until the queue empties, never forever."""
    from xdist.scheduler import LoadFileScheduling

    class OneHeavyLabAtATime(LoadFileScheduling):
        def _heavy_lab_elsewhere(self, node: object) -> bool:
            """Another worker has a heavy-lab file assigned and unfinished (this worker may
            queue the next one behind its own: they run one after the other)."""
            return any(
                scope in HEAVY_LAB_FILES and not all(tests.values())
                for worker, work in self.assigned_work.items()
                if worker is not node
                for scope, tests in work.items()
            )

        def _assign_work_unit(self, node: object) -> None:
            if self._heavy_lab_elsewhere(node):
                other = next((s for s in self.workqueue if s not in HEAVY_LAB_FILES), None)
                if other is None:
                    # only heavy-lab files are left: this worker waits for the running one
                    return
                self.workqueue.move_to_end(other, last=False)
            super()._assign_work_unit(node)

        def mark_test_complete(self, node: object, item_index: int, duration: float = 0) -> None:
            super().mark_test_complete(node, item_index, duration)
            # a worker that waited (see above) may take the next heavy-lab file now; xdist
            # asks only the worker that reported
            for other in self.nodes:
                if other is not node:
                    self._reschedule(other)

    return OneHeavyLabAtATime(config, log)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Files with the longest scenarios first; a file's tests stay together, in their order."""
    by_file: dict[str, list[pytest.Item]] = {}
    for it in items:
        by_file.setdefault(it.nodeid.split("::")[0], []).append(it)
    files = sorted(by_file.values(), key=lambda its: -sum(seconds(it) for it in its))
    items[:] = [it for its in files for it in its]


#: seconds each file and each worker spent in tests, for the lanes' summary at the very end
_FILE_SECONDS: dict[str, float] = {}
_WORKER_SECONDS: dict[str, float] = {}


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    """Add a test phase's duration to its file and its worker (xdist's controller gets every
    worker's reports, each with the worker it came from)."""
    path = report.nodeid.split("::")[0]
    _FILE_SECONDS[path] = _FILE_SECONDS.get(path, 0.0) + report.duration
    node = getattr(report, "node", None)
    worker = getattr(getattr(node, "gateway", None), "id", "main")
    _WORKER_SECONDS[worker] = _WORKER_SECONDS.get(worker, 0.0) + report.duration


@pytest.hookimpl(trylast=True)
def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    """Where CI's time went, per file and per worker, printed last: CI shows a run's tail only,
    and the suite's order (E2E_SECONDS, HEAVY_LAB_FILES) is tuned from these figures."""
    if not _FILE_SECONDS:
        return
    tr = terminalreporter
    tr.write_sep("-", "seconds per file (the 12 longest) and per worker")
    for path, s in sorted(_FILE_SECONDS.items(), key=lambda kv: -kv[1])[:12]:
        tr.write_line(f"{s:8.0f}s  {path}")
    tr.write_line(
        "workers: " + ", ".join(f"{w} {s:.0f}s" for w, s in sorted(_WORKER_SECONDS.items()))
    )
