"""The model layer: the cloud as it is (deployment), what its services are (catalog), facts."""

from stepwise.model.catalog import Availability, Catalog, Service, load_catalog
from stepwise.model.deployment import Deployment, Node, Role, load_deployment
from stepwise.model.facts import NO_FACTS, Facts, load_facts

__all__ = [
    "Availability",
    "Catalog",
    "Service",
    "load_catalog",
    "Deployment",
    "Node",
    "Role",
    "load_deployment",
    "Facts",
    "NO_FACTS",
    "load_facts",
]
