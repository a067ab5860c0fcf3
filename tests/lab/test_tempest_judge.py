"""tempest's verdict on the tests a run reported: a run whose every test was skipped checked
nothing and is no acceptance (no tempest needed: the outcomes are given as the subunit stream's
parser reports them)."""

from __future__ import annotations

import pytest

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


def test_passes_are_counted_per_api():
    tests = [
        {"id": "tempest.api.compute.servers.test_servers.T.test_a[id-1]", "status": "success"},
        {"id": "tempest.api.compute.flavors.test_flavors.T.test_b", "status": "success"},
        {"id": "tempest.api.network.test_ports.PortsTestJSON.test_c", "status": "success"},
        {"id": "tempest.api.network.test_ports.PortsTestJSON.test_d", "status": "skip"},
        {"id": "keystone_tempest_plugin.tests.api.T.test_e", "status": "success"},
    ]
    res = judge([{**t, "reason": ""} for t in tests], 1.0)
    assert res.ok
    assert res.passed_by_api == (("compute", 2), ("keystone_tempest_plugin", 1), ("network", 1))


def test_tempest_is_told_of_nova_and_neutron_only_when_they_are_real(tmp_path):
    import configparser

    from stepwise.lab.openstack.tempest_conf import (
        COMPUTE_TESTS,
        DEFAULT_TESTS,
        NETWORK_TESTS,
        Admin,
        ComputeCloud,
        tests_for,
        write_config,
    )

    def conf(**kw) -> configparser.ConfigParser:
        path = write_config(
            tmp_path / "ws", "http://k/v3", Admin("admin", "pw", "admin"), "R", **kw
        )
        c = configparser.ConfigParser(interpolation=None)
        c.read(path)
        return c

    bare = conf()
    assert bare["service_available"]["nova"] == "false"
    assert bare["service_available"]["neutron"] == "false"
    assert not bare.has_section("compute")
    cloud = ComputeCloud(image="img-1", flavor="fl-1", computes=2, max_microversion="2.95")
    full = conf(compute=cloud, network_extensions=["binding", "port-security"])
    assert full["service_available"]["nova"] == "true"
    assert full["service_available"]["neutron"] == "true"
    assert (full["compute"]["image_ref"], full["compute"]["flavor_ref"]) == ("img-1", "fl-1")
    assert full["compute"]["max_microversion"] == "2.95"
    assert full["compute-feature-enabled"]["live_migration"] == "true"
    assert full["compute-feature-enabled"]["snapshot"] == "false"
    assert full["network-feature-enabled"]["api_extensions"] == "binding,port-security"
    one = conf(compute=ComputeCloud("img-1", "fl-1", 1, "2.95"))
    assert one["compute-feature-enabled"]["live_migration"] == "false"  # nowhere to move to
    assert one["service_available"]["neutron"] == "false"
    assert tests_for(False, False) == DEFAULT_TESTS
    assert tests_for(True, True) == DEFAULT_TESTS + COMPUTE_TESTS + NETWORK_TESTS
    # a caller that checks the other APIs elsewhere asks for some of them only
    assert tests_for(True, True, ("compute", "network")) == COMPUTE_TESTS + NETWORK_TESTS
    assert tests_for(True, False, ("compute", "network")) == COMPUTE_TESTS
    assert tests_for(True, True, ("image",)) == tuple(t for t in DEFAULT_TESTS if "image" in t)
    assert tests_for(True, True, ("image",)) and all(
        ".identity." not in t for t in tests_for(True, True, ("image",))
    )
    with pytest.raises(ValueError, match="volume"):
        tests_for(True, True, ("volume",))


def test_the_short_tempest_list_is_a_part_of_the_full_one_per_api():
    """The demo's short list runs only tests CI's full lists run too, one per API it has."""
    import re

    from stepwise.lab.openstack.tempest_conf import SHORT_TESTS, api_of, tests_for

    def an_id(regex: str) -> str:
        """A test id the regex matches: its literal part, a test method if it names a class."""
        text = regex.replace("\\.", ".").replace("\\b", "").replace("(JSON)?", "")
        return text + ("test_x" if text.endswith(".") else "") + "[id-1,smoke]"

    for compute, network in ((False, False), (True, False), (True, True)):
        short = tests_for(compute, network, short=True)
        full = tests_for(compute, network)
        # shorter: some of the full list's tests are not in it
        assert short and not all(any(re.search(t, an_id(f)) for t in short) for f in full)
        ids = [an_id(t) for t in short]
        for test_id in ids:
            assert any(re.search(t, test_id) for t in short), test_id
            assert any(re.search(t, test_id) for t in full), (test_id, "not in the full list")
        apis = {api_of(i) for i in ids}
        assert apis == {"identity", "image"} | ({"compute"} if compute else set()) | (
            {"network"} if network else set()
        )
    assert set(SHORT_TESTS) == {"identity", "image", "compute", "network"}
    # a short list of some APIs only
    assert all(api_of(an_id(t)) == "image" for t in tests_for(True, True, ("image",), short=True))
