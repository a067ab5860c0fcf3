"""The lab's dnf takes a package back as dnf does: to a version an enabled repository has,
refusing one none has with dnf's words (pure: no lab processes)."""

from __future__ import annotations

from stepwise.lab.nodecmd_packages import _resolve_downgrade

REPOS = {
    "openstack-R1-el8": {"openstack-nova-api": "1.0.0"},
    "openstack-R1-updates-el8": {"openstack-nova-api": "1.1.0"},
    "os8-baseos": {"kernel": "4.18.0"},
    "os8-updates": {"kernel": "4.18.1"},
}
ENABLED = list(REPOS)
INSTALLED = {
    "openstack-nova-api": {"version": "1.1.0", "repo": "openstack-R1-updates-el8"},
    "kernel": {"version": "4.18.1", "repo": "os8-updates"},
}


def test_downgrade_to_a_version_an_enabled_repository_has():
    changes, problem = _resolve_downgrade(
        REPOS, ENABLED, INSTALLED, ["kernel-4.18.0", "openstack-nova-api-1.0.0"]
    )
    assert problem is None
    assert changes == {
        "kernel": ("4.18.0", "os8-baseos"),
        "openstack-nova-api": ("1.0.0", "openstack-R1-el8"),
    }


def test_a_bare_name_goes_one_version_down_and_the_lowest_stays(capsys):
    assert _resolve_downgrade(REPOS, ENABLED, INSTALLED, ["kernel"])[0] == {
        "kernel": ("4.18.0", "os8-baseos")
    }
    low = {"kernel": {"version": "4.18.0", "repo": "os8-baseos"}}
    assert _resolve_downgrade(REPOS, ENABLED, low, ["kernel-4.18.0"]) == ({}, None)
    assert "lowest version already installed" in capsys.readouterr().out


def test_a_version_no_enabled_repository_has_is_refused_as_dnf_does():
    changes, problem = _resolve_downgrade(
        REPOS, ["openstack-R1-updates-el8"], INSTALLED, ["openstack-nova-api-1.0.0"]
    )
    assert changes == {}
    assert problem is not None and problem.startswith(
        "No match for argument: openstack-nova-api-1.0.0"
    )
    assert "Error: No packages marked for downgrade." in problem
    _, problem = _resolve_downgrade(REPOS, ENABLED, INSTALLED, ["leapp-0.14.0"])
    assert problem is not None and "not installed" in problem
