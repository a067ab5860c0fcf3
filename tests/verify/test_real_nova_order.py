"""nova's upgrade order on the real-nova example, as the real services judge it (issue 33).

On the lab nova 2024.1's conductor exited at its start because placement's API did not answer
("The placement service ... exists but does not have any supported versions"): the first real
major upgrade had planned the conductor in the same batch as placement, whose backend was still
out of HAProxy. nova's upgrade guide upgrades placement first, then the conductors, then the
other control services, then the computes; the catalog now says so (depends_on), the planner
orders the plan by it and the verifier refuses a plan that does not keep it.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from stepwise.errors import UnsafePlanError
from stepwise.model import Deployment, load_deployment
from stepwise.model.vocab import Step, Workflow
from stepwise.plan import make_plan
from stepwise.plan.units import Plan
from stepwise.verify import verify_plan

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def dep() -> Deployment:
    return load_deployment(ROOT / "examples" / "openstack-nova.yaml")


def _first_stop(plan: Plan, service: str) -> float:
    return min(u.start_s for u in plan.units if u.step is Step.STOP and service in u.services)


def _last_start(plan: Plan, service: str) -> float:
    return max(u.end_s for u in plan.units if u.step is Step.START and service in u.services)


def test_placement_then_conductors_then_the_other_control_services_then_computes(dep):
    plan = verify_plan(make_plan(Workflow.UPGRADE, dep), dep)
    assert _last_start(plan, "placement_api") <= _first_stop(plan, "nova_conductor")
    for later in ("nova_api", "nova_scheduler", "nova_compute"):
        assert _last_start(plan, "nova_conductor") <= _first_stop(plan, later), later


def without_conductors_placement(dep: Deployment) -> Deployment:
    """`dep` with a catalog whose nova_conductor does not depend on placement_api."""
    conductor = dep.catalog.services["nova_conductor"]
    loose = dataclasses.replace(
        dep.catalog,
        services={
            **dep.catalog.services,
            "nova_conductor": dataclasses.replace(
                conductor, depends_on=tuple(d for d in conductor.depends_on if d != "placement_api")
            ),
        },
    )
    return dataclasses.replace(dep, catalog=loose)


def test_the_verifier_refuses_a_conductor_upgraded_beside_placement(dep):
    """A catalog without the conductor's dependency on placement plans them into one batch
    (the plan the real conductor refused); the verifier, with the real catalog, refuses it."""
    plan = make_plan(Workflow.UPGRADE, without_conductors_placement(dep))
    assert _first_stop(plan, "nova_conductor") < _last_start(plan, "placement_api")
    with pytest.raises(UnsafePlanError) as refused:
        verify_plan(plan, dep)
    assert "nova_conductor starts its upgrade at" in str(refused.value)
    assert "its dependency placement_api is upgraded everywhere only at" in str(refused.value)
