"""`model.availability.service_allowances`: what the planner sizes batches with and the verifier
checks against, from the deployment and the catalog's rules alone."""

from __future__ import annotations

from stepwise.model.availability import service_allowances
from tests.plan.cloud import catalog, deployment, service


def test_allowances_follow_each_services_rule_and_totals_count_every_instance() -> None:
    cat = catalog(
        service("galera", "infra", cluster="galera"),  # no rule: a quorum cluster's majority
        service("keystone", "control", rule={"min_available": 3}),
        service("glance", "control", rule={"max_unavailable": "10%"}),
        service("heat", "control"),  # no rule at all
        service("nova_compute", "data", rule={"max_unavailable": "50%"}),
    )
    dep = deployment(
        cat,
        [
            {
                "name": "Controller",
                "tags": ["controlplane"],
                "services": ["galera", "keystone", "glance", "heat"],
                "nodes": {"count": 5, "name": "controller-{index}"},
            },
            {
                "name": "Compute",
                "services": ["nova_compute"],
                "nodes": {"count": 4, "name": "compute-{index}"},
            },
        ],
    )
    allow, totals = service_allowances(dep)
    assert totals == {"galera": 5, "keystone": 5, "glance": 5, "heat": 5, "nova_compute": 4}
    # 10% of 5 rounds down to none, but work must proceed: never below one
    assert allow == {"galera": 2, "keystone": 2, "glance": 1, "nova_compute": 2}
