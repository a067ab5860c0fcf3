"""A workload: a stand-in instance on a compute, answering HTTP on its own address while
its storage is reachable; it moves with live migration (the destination binds the same
address before the source lets it go, hence SO_REUSEPORT)."""

from __future__ import annotations

from stepwise.lab.health import storage_ok
from stepwise.lab.kinds import WORKLOAD, LabKind, register
from stepwise.lab.unit import Unit


@register
class Workload(LabKind):
    """An instance (`vm-N`) of the lab's stand-in nova."""

    name = WORKLOAD
    reloads = False

    def start(self, unit: Unit) -> tuple[str, int, bool]:
        w = unit.lab.spec.workloads[unit.name]
        unit.version = "vm"
        return w.address, w.port, True

    def health(self, unit: Unit) -> tuple[bool, str]:
        return storage_ok(unit.lab)
