"""memcached: Debian's, run by the unit as its child after the packaged service's checks
(stepwise/lab/memcached.py)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from stepwise.lab import memcached
from stepwise.lab.kinds import register
from stepwise.lab.kinds.stand_in import PackagedServer
from stepwise.lab.unit import Unit

if TYPE_CHECKING:
    from stepwise.lab.nodes import Lab


@register
class Memcached(PackagedServer):
    """keystone's token cache and the services' keystone_authtoken cache."""

    name = memcached.KIND

    def run(self, unit: Unit) -> None:
        memcached.start(unit)

    def health(self, unit: Unit) -> tuple[bool, str]:
        return memcached.health(unit)

    def describe(self, lab: Lab, node: str, service: str, published: dict | None) -> str:
        return f"Debian's memcached on port {memcached.PORT}"

    def components(self, lab: Lab, services: list[str], ask: bool) -> list[dict[str, str]]:
        row = memcached.component(lab)
        return [row] if row else []
