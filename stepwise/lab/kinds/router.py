"""A router: a workload's floating IP on its keepalived master (stepwise/lab/routers.py),
forwarding while the master's L3 agent runs; SO_REUSEPORT because the new master holds the
address before the old one lets it go."""

from __future__ import annotations

import urllib.error
import urllib.request

from stepwise.lab import routers
from stepwise.lab.kinds import ROUTER, LabKind, register
from stepwise.lab.unit import Unit


@register
class Router(LabKind):
    """A stand-in L3 HA router (`router-vm-N`)."""

    name = ROUTER
    reloads = False

    def start(self, unit: Unit) -> tuple[str, int, bool]:
        r = unit.lab.spec.routers[unit.name]
        unit.version = "router"
        return r.fip, r.port, True

    def health(self, unit: Unit) -> tuple[bool, str]:
        """A router forwards while its node's L3 agent runs, to the workload behind it."""
        ok, why = routers.forwarding(unit.lab, unit.node)
        if not ok:
            return ok, why
        r = unit.lab.spec.routers[unit.name]
        w = unit.lab.spec.workloads[r.workload]
        try:
            with urllib.request.urlopen(f"http://{w.address}:{w.port}/", timeout=1.0) as resp:
                return resp.status == 200, f"{r.workload} answered {resp.status}"
        except urllib.error.HTTPError as exc:
            return False, f"{r.workload} answered {exc.code}"
        except OSError as exc:
            return False, f"{r.workload} unreachable: {exc}"
