"""The workloads' windows: instances a compute's leave stops in place instead of moving.

A live migration moves an instance without downtime, so a drained compute is no window. An
instance that cannot live-migrate, under `drain_policy: stop-in-place` (or on the only
compute of a cloud, with nowhere to go), is stopped by the compute's leave and started again
by its rejoin: that is workload downtime the plan announces, one window per compute, named
`workloads@NODE`. Which instances cannot move is known only when the leave runs, so the
window is announced for every compute the plan drains under that policy.
"""

from __future__ import annotations

from stepwise.model import Deployment
from stepwise.model.deployment import HYPERVISOR_SERVICE
from stepwise.model.vocab import Step, SystemUpgradeKey
from stepwise.plan.units import Plan, Unit, Window

#: the prefix of a workload window's `service`: `workloads@compute-0`
WORKLOADS = "workloads@"


def _drains(u: Unit, node: str) -> bool:
    """The unit runs the compute's leave on `node` (a visit's leave, the OS upgrade's prepare)."""
    key = u.step.info.tasks[1] if u.step.info.tasks else None
    return key in (Step.LEAVE, SystemUpgradeKey.PREPARE) and HYPERVISOR_SERVICE in u.services_on(
        node
    )


def _rejoins(u: Unit, node: str) -> bool:
    """The unit runs the compute's rejoin on `node`, which starts its stopped instances."""
    key = u.step.info.tasks[1] if u.step.info.tasks else None
    return key in (Step.REJOIN, SystemUpgradeKey.CLEANUP) and HYPERVISOR_SERVICE in u.services_on(
        node
    )


def workload_windows(plan: Plan, deployment: Deployment) -> list[Window]:
    """One window per compute whose leave may stop instances in place: from the start of its
    leave to the end of its rejoin (open when this plan does not rejoin it)."""
    computes = {n.name for n in deployment.workloads_stopped_in_place()}
    if not computes:
        return []
    why = (
        "the only compute: its instances are stopped in place, nowhere to move them"
        if len(deployment.instances.get(HYPERVISOR_SERVICE, ())) == 1
        else "drain_policy stop-in-place: instances that cannot live-migrate stop in place"
    )
    windows: list[Window] = []
    for node in sorted(computes):
        start = next((u for u in plan.units if node in u.nodes and _drains(u, node)), None)
        if start is None:
            continue
        end = next(
            (
                u
                for u in plan.units
                if u.start_s >= start.start_s and node in u.nodes and _rejoins(u, node)
            ),
            None,
        )
        windows.append(
            Window(
                f"{WORKLOADS}{node}",
                start.start_s,
                end.end_s if end is not None else float("inf"),
                f"{why} ({node})",
            )
        )
    return windows
