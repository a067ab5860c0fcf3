"""Which real OpenStack code the lab runs for which lab package version, and how.

The lab's repositories carry three OpenStack versions: `1.0.0` (release R1 as first shipped),
`1.1.0` (R1's updates: the minor update) and `2.0.0` (R2: the major upgrade). When a
deployment asks the lab for real OpenStack (`lab: {openstack: SERIES}`), those three map to
SERIES at its first patch version, SERIES's latest patch version and the next series, each a
venv built from PyPI under its branch's upper-constraints (`venvs.py`, `locks/`).

The example uses R = 2023.2 (Bobcat) -> 2024.1 (Caracal) because both keystone (expand
`47147121`) and glance (`2024_1_expand01` / `2024_1_contract01`) change their schemas there, so
the rolling upgrade's `db_sync --expand/--migrate/--contract` and `glance-manage db
expand/migrate/contract` move real tables. 2025.1 -> 2025.2 is kept as a second series: there
none of the three services changes its schema (keystone 28 ships a migration file its own
`EXPAND_HEAD` does not reach yet), which makes it the plain rolling case.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Release:
    """One venv of real OpenStack code: what it contains and what lab version stands for it."""

    lock: str  # the lock file's name in locks/ (and the venv's name)
    series: str  # the OpenStack release series, e.g. 2025.1
    label: str  # what `lab status` says, e.g. "2025.1, first patch"
    versions: tuple[tuple[str, str], ...]  # (PyPI project, version) of the services' code


@dataclass(frozen=True)
class RealService:
    """A catalog service the lab can run as real code, and how a real node runs it."""

    name: str  # catalog name
    project: str  # PyPI project of its code
    wsgi_script: str  # the WSGI script pbr installs in the venv's bin/ (the same in every release;
    # the `*.wsgi.api` modules only exist from 2024.2 on)
    config: str  # the config file a real node has (inside the node's root in the lab)
    config_env: str  # the environment variable that points the WSGI app at its config file(s)
    manage: str  # its schema tool
    status: str  # its upgrade-check tool
    health_path: str  # an unauthenticated path that answers 200 when the API serves
    # a service that is not a WSGI API runs this console script of the venv instead (nova's
    # conductor, scheduler and compute); its health is the process running
    command: str = ""
    # what must be placed too for it to run real (else it stays a stand-in): the project's
    # other services, and a RabbitMQ cluster for a service that talks RPC
    needs: tuple[str, ...] = ()
    messaging: bool = False

    @property
    def runs(self) -> str:
        """How the lab runs it, as `lab status` says it."""
        return "as a process" if self.command else "under uWSGI"


SERIES: dict[str, tuple[Release, Release, Release]] = {
    "2023.2": (
        Release(
            "2023.2.0",
            "2023.2",
            "2023.2, first patch",
            (
                ("keystone", "24.0.0"),
                ("openstack-placement", "10.0.0"),
                ("glance", "27.0.0"),
                ("nova", "28.0.0"),
                ("neutron", "23.0.0"),
            ),
        ),
        Release(
            "2023.2.latest",
            "2023.2",
            "2023.2, latest patch",
            (
                ("keystone", "24.1.0"),
                ("openstack-placement", "10.0.1"),
                ("glance", "27.1.1"),
                ("nova", "28.3.1"),
                ("neutron", "23.5.0"),
            ),
        ),
        Release(
            "2024.1",
            "2024.1",
            "2024.1",
            (
                ("keystone", "25.0.0"),
                ("openstack-placement", "11.0.1"),
                ("glance", "28.1.0"),
                ("nova", "29.2.2"),
                ("neutron", "24.2.2"),
            ),
        ),
    ),
    "2025.1": (
        Release(
            "2025.1.0",
            "2025.1",
            "2025.1, first patch",
            (("keystone", "27.0.0"), ("openstack-placement", "13.0.0"), ("glance", "30.0.0")),
        ),
        Release(
            "2025.1.latest",
            "2025.1",
            "2025.1, latest patch",
            (("keystone", "27.1.0"), ("openstack-placement", "13.0.1"), ("glance", "30.2.0")),
        ),
        Release(
            "2025.2",
            "2025.2",
            "2025.2",
            (("keystone", "28.1.0"), ("openstack-placement", "14.0.0"), ("glance", "31.1.0")),
        ),
    ),
}

SERVICES: dict[str, RealService] = {
    "keystone": RealService(
        "keystone",
        "keystone",
        "keystone-wsgi-public",
        "/etc/keystone/keystone.conf",
        "OS_KEYSTONE_CONFIG_FILES",
        "keystone-manage",
        "keystone-status",
        "/healthcheck",
    ),
    "placement_api": RealService(
        "placement_api",
        "openstack-placement",
        "placement-api",
        "/etc/placement/placement.conf",
        "OS_PLACEMENT_CONFIG_DIR",
        "placement-manage",
        "placement-status",
        "/",
    ),
    **{
        name: RealService(
            name,
            "nova",
            "nova-api-wsgi" if name == "nova_api" else "",
            "/etc/nova/nova.conf",
            "OS_NOVA_CONFIG_DIR",
            "nova-manage",
            "nova-status",
            "/",
            "" if name == "nova_api" else name.replace("_", "-"),
            # nova runs real only whole: its API, conductor and scheduler, over RabbitMQ
            needs=("nova_api", "nova_conductor", "nova_scheduler"),
            messaging=True,
        )
        # conductor first: `nova-manage` on a controller is the conductor's (it owns the cells)
        for name in ("nova_api", "nova_scheduler", "nova_compute", "nova_conductor")
    },
    "neutron_server": RealService(
        "neutron_server",
        "neutron",
        "neutron-api",
        "/etc/neutron/neutron.conf",
        "OS_NEUTRON_CONFIG_DIR",
        "neutron-db-manage",
        "neutron-status",
        "/healthcheck",
        messaging=True,
    ),
    "glance_api": RealService(
        "glance_api",
        "glance",
        "glance-wsgi-api",
        "/etc/glance/glance-api.conf",
        "OS_GLANCE_CONFIG_DIR",
        "glance-manage",
        "glance-status",
        "/healthcheck",
    ),
}

#: schema tool name -> the real service it belongs to
TOOLS: dict[str, str] = {t: s.name for s in SERVICES.values() for t in (s.manage, s.status)}


def series_services(series: str) -> list[str]:
    """The services whose real code every release of `series` carries (nova from 2023.2's
    locks on; the 2025.1 series' venvs hold keystone, placement and glance only)."""
    projects = set.intersection(*({p for p, _ in r.versions} for r in SERIES[series]))
    return [name for name, s in SERVICES.items() if s.project in projects]


def series_names() -> list[str]:
    """The series a deployment may ask the lab for."""
    return sorted(SERIES)


def release_for(series: str, lab_version: str | None) -> Release | None:
    """The real release a lab package version stands for (`1.0.x`, `1.1.x`, `2.0.x`)."""
    if not lab_version or series not in SERIES:
        return None
    first, latest, nxt = SERIES[series]
    parts = lab_version.split(".")
    if parts[0] == "1":
        return first if parts[1:2] == ["0"] else latest
    if parts[0] == "2":
        return nxt
    return None


def version_of(release: Release, service: str) -> str:
    """The PyPI version of `service`'s code in `release`."""
    return dict(release.versions)[SERVICES[service].project]
