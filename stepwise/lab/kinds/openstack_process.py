"""Real OpenStack code run as a console service (nova's conductor, scheduler and compute with
the fake virt driver): the unit runs the installed release's console script as its child
(stepwise/lab/openstack/process.py) and answers its health while the process runs."""

from __future__ import annotations

import signal

from stepwise.lab.kinds import register
from stepwise.lab.kinds.openstack_api import OpenStackApi
from stepwise.lab.openstack import process
from stepwise.lab.unit import Unit


@register
class OpenStackProcess(OpenStackApi):
    """A real OpenStack service that is a process, not an API (what `lab status` says of it is
    the API's: its code, release and how it runs)."""

    name = "openstack_process"

    def start(self, unit: Unit) -> tuple[str, int, bool]:  # type: ignore[override]
        return process.start(unit)

    def health(self, unit: Unit) -> tuple[bool, str]:
        return process.health(unit)

    def reload(self, unit: Unit) -> None:
        if unit.child_running():
            unit.child.send_signal(signal.SIGHUP)  # oslo.service's reload
