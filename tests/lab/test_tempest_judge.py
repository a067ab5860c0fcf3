"""tempest's verdict on the tests a run reported: a run whose every test was skipped checked
nothing and is no acceptance (no tempest needed: the outcomes are given as the subunit stream's
parser reports them)."""

from __future__ import annotations

from stepwise.lab.openstack.tempest import TempestResult, judge


def _tests(**by_status: int) -> list[dict[str, str]]:
    return [
        {"id": f"tempest.api.t_{status}_{i}", "status": status, "reason": f"{status} reason"}
        for status, n in by_status.items()
        for i in range(n)
    ]


def test_a_run_whose_every_test_was_skipped_fails():
    res = judge(_tests(skip=18), 30.0)
    assert not res.ok
    assert (res.run, res.passed, res.skipped) == (18, 0, 18)
    assert res.failed == 1 and res.error and "skipped" in res.error
    assert res.failures == (("tempest run", res.error),)


def test_an_all_skipped_result_is_not_ok_whatever_built_it():
    """The verdict itself asks for a passed test, not only for no failure."""
    res = TempestResult(run=5, passed=0, failed=0, skipped=5, failures=(), seconds=1.0)
    assert not res.ok


def test_passes_with_some_skipped_tests_are_accepted_and_the_skips_counted():
    res = judge(_tests(success=85, skip=18), 90.0)
    assert res.ok and res.error is None and res.failures == ()
    assert (res.run, res.passed, res.failed, res.skipped) == (103, 85, 0, 18)


def test_a_failed_test_fails_the_run_and_is_listed():
    res = judge(_tests(success=3, fail=1, skip=2), 10.0)
    assert not res.ok and res.failed == 1 and res.error is None
    assert res.failures == (("tempest.api.t_fail_0", "fail reason"),)


def test_failures_without_a_pass_are_failures_not_skips():
    res = judge(_tests(fail=2, skip=1), 10.0)
    assert not res.ok and res.failed == 2 and res.error is None


def test_an_error_fails_a_run_whose_tests_passed():
    res = judge(_tests(success=4), 10.0, "timed out after 900s")
    assert not res.ok and res.failed == 1
    assert res.failures == (("tempest run", "timed out after 900s"),)
