"""What every node command shares: the table they register in (`command`), how they answer
(`out`, `err`), the node's injected faults, how long a job's caller waits, a unit's state.

Its own module so that the command modules register here without importing the dispatcher
(`nodecmd.main` imports them: the other way round would be a circle).
"""

from __future__ import annotations

import sys
from collections.abc import Callable

from stepwise.lab.nodes import Lab

COMMANDS: dict[str, Callable[[Lab, str, list[str]], int]] = {}


def command(*names: str):
    def deco(fn):
        for n in names:
            COMMANDS[n] = fn
        return fn

    return deco


def out(msg: str) -> None:
    print(msg, flush=True)


def err(msg: str) -> int:
    print(msg, file=sys.stderr, flush=True)
    return 1


def faults(lab: Lab, node: str) -> dict:
    return lab.read_state(node, "faults.json", {}) or {}


def disk_full(lab: Lab, node: str) -> bool:
    return bool(faults(lab, node).get("disk_full"))


def job_timeout(lab: Lab, unit: str) -> float:
    """How long a job's caller waits for the supervisor: beyond the unit's own stop and start
    timeouts (a real RabbitMQ member boots in over a minute on 2 busy cores)."""
    svc = lab.spec.services.get(unit)
    own = [svc.start_timeout, svc.stop_timeout] if svc else []
    return 60.0 + sum(t for t in own if t is not None)


def unit_state(lab: Lab, node: str, unit: str) -> str:
    st = lab.call("status")
    for u in st["units"]:
        if u["node"] == node and u["unit"] == unit:
            return u["state"]
    return "inactive"
