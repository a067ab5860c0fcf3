"""A RabbitMQ member: Debian's rabbitmq-server, run by the unit as its child after the
packaged service's checks, joined to (or forming) its cluster (stepwise/lab/rabbitmq.py)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from stepwise.lab import rabbitmq
from stepwise.lab.kinds import register
from stepwise.lab.kinds.stand_in import PackagedServer
from stepwise.lab.unit import Unit

if TYPE_CHECKING:
    from stepwise.lab.nodes import Lab


@register
class RabbitMember(PackagedServer):
    """A member of the lab's real RabbitMQ cluster."""

    name = rabbitmq.KIND

    def run(self, unit: Unit) -> None:
        rabbitmq.start(unit)

    def health(self, unit: Unit) -> tuple[bool, str]:
        return rabbitmq.health(unit)

    def describe(self, lab: Lab, node: str, service: str, published: dict | None) -> str:
        return f"RabbitMQ member {rabbitmq.node_name(lab, service, node)}"

    def components(self, lab: Lab, services: list[str], ask: bool) -> list[dict[str, str]]:
        return rabbitmq.component(lab, ask)
