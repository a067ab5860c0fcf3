"""How many instances of each service a deployment may have down at once.

A pure function of the deployment and its catalog's availability rules: the planner sizes
its batches with it, and the verifier and the lower bound check and measure against the same
figures, so it lives in the model where both may read it.
"""

from __future__ import annotations

from stepwise.model.catalog import allowance
from stepwise.model.deployment import Deployment


def service_allowances(dep: Deployment) -> tuple[dict[str, int], dict[str, int]]:
    """Per service: instances that may be down at once (services with a rule), and totals."""
    allow: dict[str, int] = {}
    totals: dict[str, int] = {}
    for s, nodes in dep.instances.items():
        totals[s] = len(nodes)
        a = allowance(dep.catalog[s], len(nodes))
        if a is not None:
            allow[s] = a
    return allow, totals
