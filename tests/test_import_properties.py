"""Random THT-style roles files built from the catalog's aliases import and plan safely."""

from __future__ import annotations

import tempfile
from collections import Counter
from pathlib import Path

import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from stepwise.errors import InputError, UnsafePlanError
from stepwise.model import load_catalog
from stepwise.model.importing import import_tripleo
from stepwise.plan import make_plan
from stepwise.verify import verify_plan
from tests.shares import assert_share

CATALOG = load_catalog()
ALIASES = sorted(CATALOG.aliases)
ROLE_NAMES = [
    "Controller",
    "ControllerOpenstack",
    "Database",
    "Messaging",
    "Networker",
    "Compute",
    "ComputeHCI",
    "CephStorage",
    "ObjectStorage",
    "Telemetry",
]
THT_TAGS = ["primary", "controller", "compute", "ceph", "storage", "external_bridge"]


@st.composite
def roles_files(draw):
    """A roles_data.yaml as THT writes it: a list of roles with CountDefault, tags,
    HostnameFormatDefault, update_serial and ServicesDefault of OS::TripleO::Services names
    (repeats across roles, several names of one entry, configuration-only ones included)."""
    names = draw(st.lists(st.sampled_from(ROLE_NAMES), min_size=1, max_size=4, unique=True))
    roles = []
    for name in names:
        role = {
            "name": name,
            "description": f"{name} role",
            # 3+ nodes: a quorum cluster or a min_available rule holds on any of them
            "CountDefault": draw(st.integers(3, 4)),
            "tags": draw(st.lists(st.sampled_from(THT_TAGS), max_size=2, unique=True)),
            "networks": {"InternalApi": {"subnet": "internal_api_subnet"}},
            "update_serial": draw(st.integers(1, 25)),
            "ServicesDefault": draw(
                st.lists(st.sampled_from(ALIASES), min_size=1, max_size=40, unique=True)
            ),
        }
        if draw(st.booleans()):
            role["HostnameFormatDefault"] = f"%stackname%-{name.lower()}-%index%"
        roles.append(role)
    return roles


WORKFLOWS = ("update", "upgrade", "system-upgrade")
#: the least share of the imported clouds each workflow must plan (measured on these
#: derandomized examples: all of them, the OS upgrade 58 of 60): refusing every input is no pass
MIN_PLANNED = 0.5


def test_random_tht_roles_files_import_and_plan_safely():
    of: dict[str, Counter[str]] = {w: Counter() for w in WORKFLOWS}

    # derandomized: the same examples every run (as tests/plan/test_properties.py)
    @settings(
        max_examples=60,
        deadline=None,
        derandomize=True,
        suppress_health_check=[HealthCheck.too_slow],
    )
    @given(roles_files())
    def import_and_plan(roles):
        for workflow, outcome in _imported_and_planned(roles).items():
            of[workflow][outcome] += 1

    import_and_plan()
    for w in WORKFLOWS:
        assert_share(of[w], "planned", MIN_PLANNED)


def _imported_and_planned(roles) -> dict[str, str]:
    """Import a roles file and plan each workflow: per workflow "planned" (and the plan
    verified) or "refused" (with a reason)."""
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "roles_data.yaml"
        path.write_text(yaml.safe_dump(roles, sort_keys=False))
        dep = import_tripleo(path, CATALOG, stack="overcloud").deployment
    # every THT name reached its entry; configuration-only entries are declared, never run
    for role, spec in zip(dep.roles, roles, strict=True):
        assert set(role.declared) == {CATALOG.resolve(n) for n in spec["ServicesDefault"]}
        assert all(CATALOG[s].has_runtime for s in role.services)
        assert (
            len(role.nodes) == spec["CountDefault"] and role.update_serial == spec["update_serial"]
        )
    running = {s for r in dep.roles for s in r.services}
    out = {}
    for workflow in WORKFLOWS:
        try:
            plan = make_plan(workflow, dep)
        except (InputError, UnsafePlanError) as refused:
            # refused before anything is shown, with the reason
            assert str(refused).strip()
            out[workflow] = "refused"
            continue
        verify_plan(plan, dep)  # the plan it shows is one its own verifier accepts
        assert {s for u in plan.units for n in u.nodes for s in u.services_on(n)} <= running
        out[workflow] = "planned"
    return out
